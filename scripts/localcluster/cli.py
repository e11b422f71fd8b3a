"""Run a SageMaker training image as a local multi-host cluster of containers.

Every host gets its own /opt/ml tree written in SageMaker's file formats (hyperparameter values are
JSON-encoded strings, channel and resource configs as the platform writes them), bind-mounted into a
container `<job>-algo-i` that the others reach as `algo-i` (its network alias) on a private
`--internal` Docker network. As in SageMaker local mode, a container's own hostname is its id, not
`algo-i` (`--hostname-mode host` changes that): identity comes from resourceconfig.json. The
containers run `train`, their logs are streamed prefixed by host, and the job's verdict follows
SageMaker local mode: the exit code of the first container to exit, after which the others get
`docker stop -t 10` (--stop-timeout). Every host's exit code is reported as well. As in local mode,
resourceconfig.json names instance type "local" (--instance-type names a SageMaker one); the checkpoint
and TensorBoard output configurations, and a channel's input mode other than File, are written when
asked for. /opt/ml/model and /opt/ml/output of algo-1 are copied to --output. Containers, network and
temporary trees are removed on every path out, Ctrl-C and SIGTERM included. Every flag is checked, and
the engine, the image (never pulled) and the job's names are checked, before anything is written or
created.

Needs only Python 3 and the docker CLI.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from sagetrain.config.channels import InputMode
from sagetrain.config.paths import Paths
from sagetrain.config.resources import LOCAL_INSTANCE_TYPE

from localcluster.docker import preflight
from localcluster.dockercli import DockerCli, DockerError
from localcluster.job import execute
from localcluster.run import SignalGate, remove_tree
from localcluster.sagemaker_files import validate_tree_inputs, write_trees, written_checkpoint_dir
from localcluster.spec import (
    DEFAULT_CHECKPOINT_DIR,
    DEFAULT_TENSORBOARD_DIR,
    EXIT_DOCKER,
    EXIT_USAGE,
    SDK_LOCAL_STOP_TIMEOUT_SECONDS,
    ContainerLimits,
    Interrupted,
    RunSpec,
    TreeSpec,
    UsageError,
    checkpoint_mount_target,
    default_job_name,
    host_names,
    hosts_in_workdir,
    parse_channels,
    parse_container_folder,
    parse_hp_json,
    parse_hp_pairs,
    parse_instance_groups,
    parse_instance_type,
    parse_start_delays,
    parse_stop_timeout,
    split_assignment,
)

EPILOG = """\
examples (from the repository root):
  scripts/local-cluster --image sagemaker-tf-horovod:cpu --hosts 2 --code examples/keras_digits \\
      --program model.py --channel train=examples/keras_digits/data/train --hp epochs=3 --hp batch_size=64
  scripts/local-cluster --image IMG --hosts 3 --code src --hp-json hps.json --gpus all --cpus 4 --memory 16g
  SageMaker's conventions: the job's checkpoint folder with a host folder mounted there, TensorBoard
  output, a channel's input mode, a SageMaker instance type and its stop window:
  scripts/local-cluster --image sagemaker-tf-horovod:cpu --code examples/keras_digits --program model.py \\
      --channel train=examples/keras_digits/data/train --input-mode train=FastFile --hp epochs=1 \\
      --checkpoint-local-path /opt/ml/checkpoints/run-1 --checkpoints ./ckpt \\
      --tensorboard-local-path /opt/ml/output/tensorboard --instance-type ml.c5.xlarge --stop-timeout 120

exit status: the job's verdict (exit code of the first container to exit, as SageMaker local mode);
  2 bad flags (an image not on this machine or a --job-name in use included), 124 --timeout reached,
  125 docker failed or did not answer, 128+N stopped by signal N.
"""


def _modes(*, has_folder: bool) -> str:
    """The input modes whose data is (or is not) a folder, as the help offers them: ``File or FastFile``."""
    return " or ".join(mode.value for mode in InputMode if mode.has_folder is has_folder)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="local-cluster",
        description=__doc__.split("\n\n")[0],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    job = parser.add_argument_group("the job")
    job.add_argument("--image", required=True, help="training image, e.g. sagemaker-tf-horovod:cpu")
    job.add_argument("--hosts", type=int, default=1, help="number of hosts algo-1..algo-N (default 1)")
    job.add_argument("--code", type=Path, help="folder with your code, copied to /opt/ml/code")
    job.add_argument("--program", help="sagemaker_program: the script or module in --code to run")
    job.add_argument(
        "--channel",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a data channel: a folder (or file) copied to /opt/ml/input/data/NAME",
    )
    job.add_argument(
        "--content-type", action="append", default=[], metavar="NAME=TYPE", help="ContentType of a channel"
    )
    job.add_argument(
        "--sharded",
        action="append",
        default=[],
        metavar="NAME",
        help="give that channel S3DistributionType ShardedByS3Key: files split across hosts",
    )
    job.add_argument(
        "--input-mode",
        action="append",
        default=[],
        metavar=f"NAME={'|'.join(mode.value for mode in InputMode)}",
        help=f"a channel's TrainingInputMode (default {InputMode.FILE.value}). A channel in mode "
        f"{_modes(has_folder=True)} gets a copy of its data; in mode {_modes(has_folder=False)}, its "
        "configuration only, with no data folder and nothing fed, to try what the image does with it",
    )
    job.add_argument(
        "--hp",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a hyperparameter; VALUE is JSON when it parses as JSON, else a string",
    )
    job.add_argument("--hp-json", metavar="FILE|JSON", help="hyperparameters as one JSON object")
    job.add_argument(
        "--instance-group",
        action="append",
        default=[],
        metavar="NAME=COUNT",
        help="heterogeneous cluster: hosts handed out to groups in order",
    )
    job.add_argument(
        "--distribution-instance-groups",
        metavar="NAME[,NAME]",
        help="sets sagemaker_distribution_instance_groups: the groups that train",
    )
    job.add_argument(
        "--instance-type",
        default=LOCAL_INSTANCE_TYPE,
        metavar="TYPE",
        help="resourceconfig.json's instance type, of every host and group: local (default, as SDK local "
        "mode writes), local_gpu, or a SageMaker type such as ml.c5.xlarge to look like a SageMaker job",
    )
    job.add_argument(
        "--checkpoint-local-path",
        metavar="PATH",
        help="write checkpointconfig.json with this LocalPath on every host: the job's checkpoint folder "
        f"in the containers (SageMaker's default {DEFAULT_CHECKPOINT_DIR}); --checkpoints mounts there",
    )
    job.add_argument(
        "--tensorboard-local-path",
        metavar="PATH",
        help="write tensorboardoutputconfig.json with this LocalPath on every host (SageMaker's default "
        f"{DEFAULT_TENSORBOARD_DIR})",
    )
    job.add_argument("--network-interface", default="eth0", help="network_interface_name (default eth0)")
    job.add_argument("--job-name", help="name for containers, network and output (default: generated)")
    run = parser.add_argument_group("the containers")
    run.add_argument("--gpus", help="passed to `docker create --gpus` for every host (all|N)")
    run.add_argument("--cpus", help="CPU limit per host (docker --cpus)")
    run.add_argument("--memory", help="memory limit per host (docker --memory), e.g. 8g")
    run.add_argument("--shm-size", default="1g", help="/dev/shm size per host (default 1g)")
    run.add_argument(
        "--ulimit", action="append", default=[], metavar="NAME=SOFT[:HARD]",
        help="a resource limit per host (docker --ulimit), e.g. nofile=1024:1024",
    )  # fmt: skip
    run.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="environment variable")
    run.add_argument(
        "--hostname-mode",
        choices=("container-id", "host"),
        default="container-id",
        help="each container's own hostname: its id, as in SageMaker local mode (default), or algo-i",
    )
    run.add_argument(
        "--checkpoints",
        type=Path,
        help=f"folder mounted on every host at the job's checkpoint folder ({DEFAULT_CHECKPOINT_DIR}, "
        "--checkpoint-local-path, or with --from-workdir the one algo-1's tree names); it outlives the job",
    )
    run.add_argument("--timeout", type=float, help="stop the job after this many seconds (exit 124)")
    run.add_argument(
        "--grace",
        type=float,
        default=0.0,
        help="after the first host exits, let the others end on their own for this many "
        "seconds before `docker stop` (default 0: stop at once, as SageMaker local mode)",
    )
    run.add_argument(
        "--stop-timeout",
        default=str(SDK_LOCAL_STOP_TIMEOUT_SECONDS),
        metavar="SECONDS",
        help="`docker stop -t`: how long a host has between SIGTERM and SIGKILL when the runner stops it "
        f"(after the first host exits, --timeout, Ctrl-C); default {SDK_LOCAL_STOP_TIMEOUT_SECONDS} as "
        "SDK local mode, 120 on SageMaker",
    )
    run.add_argument(
        "--start-delay",
        action="append",
        default=[],
        metavar="HOST=SECONDS",
        help="testing aid: start that host's container later (a slow or never-starting host)",
    )
    run.add_argument("--docker", default="docker", help="docker CLI to use (default: docker on PATH)")
    files = parser.add_argument_group("files")
    files.add_argument(
        "--output", type=Path, help="where algo-1's model/ and output/ go (default ./sagetrain-output/JOB)"
    )
    files.add_argument(
        "--workdir", type=Path, help="write the host trees here instead of a temporary folder (kept)"
    )
    files.add_argument("--keep", action="store_true", help="keep the temporary host trees")
    files.add_argument("--write-only", action="store_true", help="write the host trees to --workdir and stop")
    files.add_argument(
        "--from-workdir",
        action="store_true",
        help="run the host trees already in --workdir (e.g. after editing them) as they are",
    )
    return parser


def tree_spec_from_args(args: argparse.Namespace, hosts: tuple[str, ...], job_name: str) -> TreeSpec:
    hyperparameters = parse_hp_json(args.hp_json) if args.hp_json else {}
    hyperparameters.update(parse_hp_pairs(args.hp))
    spec = TreeSpec(
        hosts=hosts,
        code_dir=args.code,
        program=args.program,
        channels=parse_channels(args.channel, args.content_type, args.sharded, args.input_mode),
        hyperparameters=hyperparameters,
        instance_groups=parse_instance_groups(
            args.instance_group, hosts, parse_instance_type(args.instance_type)
        ),
        distribution_instance_groups=tuple(
            name for name in (args.distribution_instance_groups or "").split(",") if name
        ),
        network_interface=args.network_interface,
        job_name=job_name,
        region=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        checkpoint_local_path=optional_container_folder(
            args.checkpoint_local_path, "--checkpoint-local-path"
        ),
        tensorboard_local_path=optional_container_folder(
            args.tensorboard_local_path, "--tensorboard-local-path"
        ),
    )
    validate_tree_inputs(spec)
    return spec


def run_spec_from_args(args: argparse.Namespace, hosts: tuple[str, ...], job_name: str) -> RunSpec:
    """Pure: flags → RunSpec. Its mistakes are found before anything is written."""
    return RunSpec(
        image=args.image,
        hosts=hosts,
        job_name=job_name,
        limits=ContainerLimits(args.gpus, args.cpus, args.memory, args.shm_size or None, tuple(args.ulimit)),
        env=tuple(split_assignment(text, "--env") for text in args.env),
        start_delays=parse_start_delays(args.start_delay, hosts),
        checkpoints=args.checkpoints,
        checkpoint_dir=checkpoint_dir_from_args(args, hosts),
        timeout_seconds=args.timeout,
        stop_timeout_seconds=parse_stop_timeout(args.stop_timeout),
        grace_seconds=args.grace,
        docker=args.docker,
        hostname_is_host=args.hostname_mode == "host",
    )


def optional_container_folder(text: str | None, flag: str) -> str | None:
    return None if text is None else parse_container_folder(text, flag)


def checkpoint_dir_from_args(args: argparse.Namespace, hosts: tuple[str, ...]) -> str:
    """The job's checkpoint folder in the containers, where --checkpoints is mounted: the one the trees
    name (--checkpoint-local-path, or algo-1's checkpointconfig.json with --from-workdir), else
    SageMaker's default."""
    if args.from_workdir:
        tree = args.workdir / hosts[0]
        flag, local_path = f"{Paths(tree).checkpoint_config} LocalPath", written_checkpoint_dir(tree)
    else:
        flag = "--checkpoint-local-path"
        local_path = optional_container_folder(args.checkpoint_local_path, flag)
    if local_path is None:
        return DEFAULT_CHECKPOINT_DIR
    return local_path if args.checkpoints is None else checkpoint_mount_target(local_path, flag)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run_from_args(args)
    except UsageError as error:
        print(f"local-cluster: {error}", file=sys.stderr)
        return EXIT_USAGE
    except DockerError as error:
        print(f"local-cluster: {error}", file=sys.stderr)
        return EXIT_DOCKER
    except KeyboardInterrupt:  # Ctrl-C before the signal gate is in place: nothing exists yet
        print("local-cluster: interrupted before anything was written or started", file=sys.stderr)
        return 128 + signal.SIGINT


def run_from_args(args: argparse.Namespace) -> int:
    """Every flag is checked and every spec built before the first file is written or the first
    container created; the temporary host trees are removed on every path out unless kept."""
    job_name = job_name_from_args(args)
    hosts, tree_spec = hosts_from_args(args, job_name)
    run_spec = run_spec_from_args(args, hosts, job_name)
    if args.checkpoints is not None and args.checkpoints.exists() and not args.checkpoints.is_dir():
        raise UsageError(f"--checkpoints {args.checkpoints} is not a folder.")
    docker = DockerCli(run_spec.docker)
    if not args.write_only:
        preflight(docker, run_spec)
    return write_and_run(args, run_spec, tree_spec, docker)


def job_name_from_args(args: argparse.Namespace) -> str:
    if (args.write_only or args.from_workdir) and args.workdir is None:
        raise UsageError("--write-only and --from-workdir need --workdir.")
    job_name: str = args.job_name or default_job_name(time.time(), secrets.token_hex(2))
    if not re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*", job_name):
        raise UsageError(f"--job-name {job_name!r} may hold only letters, digits, '_', '.', '-'.")
    return job_name


def hosts_from_args(args: argparse.Namespace, job_name: str) -> tuple[tuple[str, ...], TreeSpec | None]:
    """The hosts, and the spec of the trees to write (None: --from-workdir runs the trees already there)."""
    if args.from_workdir:
        if not args.workdir.is_dir():
            raise UsageError(
                f"--workdir {args.workdir} is not a folder; --from-workdir runs the trees in one."
            )
        return hosts_in_workdir(path.name for path in args.workdir.iterdir() if path.is_dir()), None
    hosts = host_names(args.hosts)
    tree_spec = tree_spec_from_args(args, hosts, job_name)
    if args.workdir is not None and args.workdir.exists() and not is_empty_folder(args.workdir):
        raise UsageError(
            f"--workdir {args.workdir} is not empty; give a new or empty folder, or add --from-workdir "
            "to run the host trees already in it."
        )
    return hosts, tree_spec


def write_and_run(
    args: argparse.Namespace, run_spec: RunSpec, tree_spec: TreeSpec | None, docker: DockerCli
) -> int:
    """Write the trees (unless they are there already), run the job on them (unless --write-only), and
    remove them on every path out unless they are kept."""
    job_name = run_spec.job_name
    output = args.output or Path("sagetrain-output") / job_name
    keep_trees = args.keep or args.workdir is not None
    with SignalGate() as gate:
        # The gate is installed and not raising: a signal during mkdtemp is recorded, not lost, and
        # raises when the writing starts, inside the try that removes the folder.
        workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"{job_name}-"))
        try:
            if tree_spec is not None:
                try:
                    with gate.raising():
                        write_trees(workdir, tree_spec)
                except Interrupted as stop:
                    print(f"local-cluster: {stop} received while writing the host trees; nothing was started")
                    return 128 + stop.signum
            if args.write_only:
                print(f"local-cluster: host trees written to {workdir}")
                return 0
            if run_spec.checkpoints is not None:
                run_spec.checkpoints.mkdir(parents=True, exist_ok=True)
            trees = {host: workdir / host for host in run_spec.hosts}
            return execute(run_spec, trees, workdir, output, keep_trees, gate, docker)
        finally:
            if not keep_trees:
                remove_tree(workdir, docker, run_spec.image)


def is_empty_folder(path: Path) -> bool:
    return path.is_dir() and next(path.iterdir(), None) is None
