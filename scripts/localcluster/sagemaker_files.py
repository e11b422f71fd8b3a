"""Every host's /opt/ml tree as SageMaker lays it out before a container starts: the configuration files,
written by the image's own writers (sagetrain.config.job_files, beside the readers), then the code and
the data of each channel whose input mode has a folder, File and FastFile (for ShardedByS3Key, each file on
exactly one host). A channel in another mode (Pipe) gets its configuration only: no folder, and no FIFO,
for nothing here would feed one."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from sagetrain.config.channels import S3Distribution
from sagetrain.config.job_files import JobFiles
from sagetrain.config.local_paths import read_local_path
from sagetrain.config.paths import DEFAULT_ROOT, Paths
from sagetrain.errors import UserError

from localcluster.spec import TreeSpec, UsageError

CONTAINER_CODE_DIR = "/opt/ml/code"


def job_hyperparameters(spec: TreeSpec) -> dict[str, object]:
    """The SDK's own keys first, so a user's --hp may override any of them (tests do)."""
    values: dict[str, object] = {
        "sagemaker_submit_directory": CONTAINER_CODE_DIR,
        "sagemaker_container_log_level": 20,
        "sagemaker_job_name": spec.job_name,
        "sagemaker_region": spec.region,
    }
    if spec.program is not None:
        values["sagemaker_program"] = spec.program
    if spec.distribution_instance_groups:
        values["sagemaker_distribution_instance_groups"] = list(spec.distribution_instance_groups)
    values.update(spec.hyperparameters)
    return values


def job_files(spec: TreeSpec) -> JobFiles:
    return JobFiles(
        hosts=spec.hosts,
        hyperparameters=job_hyperparameters(spec),
        channels=tuple(source.channel for source in spec.channels),
        instance_groups=spec.instance_groups,
        network_interface=spec.network_interface,
        tensorboard_local_path=spec.tensorboard_local_path,
        checkpoint_local_path=spec.checkpoint_local_path,
    )


def shard_files(files: Sequence[str], hosts: Sequence[str]) -> dict[str, list[str]]:
    """ShardedByS3Key as the platform does it: each S3 object goes to exactly one host."""
    shards: dict[str, list[str]] = {host: [] for host in hosts}
    for index, name in enumerate(sorted(files)):
        shards[hosts[index % len(hosts)]].append(name)
    return shards


def write_host_tree(root: Path, host: str, spec: TreeSpec) -> None:
    """One host's /opt/ml as SageMaker lays it out before the container starts."""
    job_files(spec).write(root, host)
    for channel in spec.channels:
        if not channel.channel.input_mode.has_folder:
            continue
        destination = root / "input" / "data" / channel.name
        if channel.channel.s3_distribution is S3Distribution.SHARDED_BY_S3_KEY:
            files = [path.relative_to(channel.source).as_posix() for path in _files_under(channel.source)]
            destination.mkdir(parents=True, exist_ok=True)
            for name in shard_files(files, spec.hosts)[host]:
                (destination / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(channel.source / name, destination / name)
        elif channel.source.is_dir():
            shutil.copytree(channel.source, destination, dirs_exist_ok=True)
        else:
            destination.mkdir(parents=True, exist_ok=True)
            shutil.copy2(channel.source, destination / channel.source.name)
    if spec.code_dir is not None:
        shutil.copytree(spec.code_dir, root / "code", dirs_exist_ok=True)


def _files_under(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*") if path.is_file())


def write_trees(workdir: Path, spec: TreeSpec) -> dict[str, Path]:
    trees = {host: workdir / host for host in spec.hosts}
    for host, root in trees.items():
        write_host_tree(root, host, spec)
    return trees


def validate_tree_inputs(spec: TreeSpec) -> None:
    if spec.code_dir is not None and not spec.code_dir.is_dir():
        raise UsageError(f"--code {spec.code_dir} is not a directory; give the folder holding your code.")
    if spec.code_dir is not None and spec.program is not None and "/" not in spec.program:
        program = spec.code_dir / spec.program
        if not program.exists():
            raise UsageError(f"--program {spec.program} is not in --code {spec.code_dir}.")
    for channel in spec.channels:
        if not channel.source.exists():
            raise UsageError(f"--channel {channel.name}={channel.source}: that path does not exist.")


def written_checkpoint_dir(tree: Path) -> str | None:
    """The checkpoint folder in the containers that a written host tree's checkpointconfig.json names,
    read with the image's reader; None when the tree has no checkpoint configuration."""
    in_container = Paths(DEFAULT_ROOT)
    try:
        folder = read_local_path(Paths(tree).checkpoint_config, in_container.checkpoint_dir, in_container)
    except UserError as error:
        raise UsageError(f"--from-workdir: {error}.") from None
    return None if folder is None else str(folder)
