"""Pure parts of scripts/local-cluster (the package scripts/localcluster/, on pytest's pythonpath):
SageMaker file contents, flag parsing, docker argument lists, tree writing (read back with the image's
own readers) and the job verdict. The docker-driving parts are tested in tests/container; here the
docker CLI is at most a small script."""

import itertools
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest
from localcluster.cli import EPILOG, build_parser, main, run_spec_from_args
from localcluster.docker import container_create_args, network_create_args
from localcluster.dockercli import DockerCli, DockerError, answer_deadline, parse_docker_time
from localcluster.report import exit_text
from localcluster.run import ClusterRun, LogPrinter, SignalGate, job_verdict, wind_down_seconds
from localcluster.sagemaker_files import (
    job_files,
    job_hyperparameters,
    shard_files,
    validate_tree_inputs,
    write_trees,
)
from localcluster.spec import (
    ChannelSource,
    ContainerLimits,
    HostState,
    Interrupted,
    RunSpec,
    TreeSpec,
    UsageError,
    checkpoint_mount_target,
    host_names,
    hosts_in_workdir,
    parse_channels,
    parse_container_folder,
    parse_hp_json,
    parse_hp_pairs,
    parse_hp_value,
    parse_instance_groups,
    parse_instance_type,
    parse_start_delays,
    parse_stop_timeout,
)
from sagetrain.config import channels as sagemaker_channels
from sagetrain.config import resources as sagemaker_resources
from sagetrain.config.channels import Channel, InputMode, S3Distribution
from sagetrain.config.checkpoints import read_checkpoint_dir
from sagetrain.config.hyperparameters import encode_hyperparameters
from sagetrain.config.job import load_job_config
from sagetrain.config.paths import Paths
from sagetrain.config.resources import InstanceGroup
from sagetrain.config.tensorboard import read_tensorboard_dir

RUNNER_PATH = Path(__file__).resolve().parents[2] / "scripts" / "local-cluster"


def resource_config(host, spec):
    """resourceconfig.json of ``host`` in the local cluster's job, from the package's writer."""
    files = job_files(spec)
    return sagemaker_resources.resource_config(
        host, files.hosts, files.instance_groups, files.network_interface
    )


def input_data_config(channels):
    return sagemaker_channels.input_data_config(source.channel for source in channels)


def tree_spec(**overrides):
    values = {
        "hosts": ("algo-1", "algo-2"),
        "code_dir": None,
        "program": "train.py",
        "job_name": "job-1",
    }
    values.update(overrides)
    return TreeSpec(**values)


# -- hyperparameters ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3", 3),
        ("0.5", 0.5),
        ("true", True),
        ("null", None),
        ("adam", "adam"),
        ('"3"', "3"),
        ("[1, 2]", [1, 2]),
        ('{"a": 1}', {"a": 1}),
        ("", ""),
        ("a=b", "a=b"),
    ],
)
def test_hp_value_is_json_when_it_parses_else_a_string(text, value):
    assert parse_hp_value(text) == value


def test_hp_pairs_split_at_the_first_equals_sign():
    assert parse_hp_pairs(["epochs=3", "expr=a=b", "name=adam"]) == {
        "epochs": 3,
        "expr": "a=b",
        "name": "adam",
    }


@pytest.mark.parametrize("bad", ["epochs", "=3"])
def test_hp_pair_without_key_or_equals_is_a_usage_error(bad):
    with pytest.raises(UsageError, match="KEY=VALUE"):
        parse_hp_pairs([bad])


def test_every_hyperparameter_is_written_as_a_json_encoded_string():
    encoded = encode_hyperparameters({"epochs": 3, "lr": 0.1, "flag": True, "name": "adam", "l": [1]})
    assert encoded == {"epochs": "3", "lr": "0.1", "flag": "true", "name": '"adam"', "l": "[1]"}
    assert all(isinstance(value, str) for value in encoded.values())


def test_hp_json_inline_and_from_file(tmp_path):
    assert parse_hp_json('{"epochs": 2}') == {"epochs": 2}
    path = tmp_path / "hps.json"
    path.write_text('{"batch_size": 64, "optimizer": "sgd"}')
    assert parse_hp_json(str(path)) == {"batch_size": 64, "optimizer": "sgd"}


def test_hp_json_garbled_or_not_an_object_names_the_flag(tmp_path):
    with pytest.raises(UsageError, match="--hp-json is not valid JSON"):
        parse_hp_json("{epochs: 2}")
    with pytest.raises(UsageError, match="must be a JSON object"):
        parse_hp_json("[1, 2]")
    path = tmp_path / "bad.json"
    path.write_text("{")
    with pytest.raises(UsageError, match=f"--hp-json file {path}"):
        parse_hp_json(str(path))


def test_job_hyperparameters_carry_the_sdk_keys_and_user_values_win():
    values = job_hyperparameters(tree_spec(hyperparameters={"epochs": 2, "sagemaker_region": "eu-west-1"}))
    assert values == {
        "sagemaker_submit_directory": "/opt/ml/code",
        "sagemaker_container_log_level": 20,
        "sagemaker_job_name": "job-1",
        "sagemaker_region": "eu-west-1",
        "sagemaker_program": "train.py",
        "epochs": 2,
    }


def test_distribution_instance_groups_become_a_json_list_hyperparameter():
    values = job_hyperparameters(tree_spec(distribution_instance_groups=("gpus",)))
    assert encode_hyperparameters(values)["sagemaker_distribution_instance_groups"] == '["gpus"]'


# -- resource and channel configs ----------------------------------------------------------------------


def test_resource_config_per_host_names_that_host_and_the_whole_cluster():
    spec = tree_spec(hosts=("algo-1", "algo-2", "algo-3"))
    config = resource_config("algo-2", spec)
    assert config == {
        "current_host": "algo-2",
        "current_instance_type": "local",
        "current_group_name": "homogeneousCluster",
        "hosts": ["algo-1", "algo-2", "algo-3"],
        "instance_groups": [
            {
                "instance_group_name": "homogeneousCluster",
                "instance_type": "local",
                "hosts": ["algo-1", "algo-2", "algo-3"],
            }
        ],
        "network_interface_name": "eth0",
    }


def test_heterogeneous_groups_hand_out_hosts_in_order():
    hosts = ("algo-1", "algo-2", "algo-3")
    groups = parse_instance_groups(["trainers=2", "data=1"], hosts)
    assert groups == (
        InstanceGroup("trainers", "local", ("algo-1", "algo-2")),
        InstanceGroup("data", "local", ("algo-3",)),
    )
    config = resource_config("algo-3", tree_spec(hosts=hosts, instance_groups=groups))
    assert config["current_group_name"] == "data"
    assert [group["hosts"] for group in config["instance_groups"]] == [["algo-1", "algo-2"], ["algo-3"]]


@pytest.mark.parametrize(
    ("texts", "message"),
    [
        (["a=1"], "add up to 1, but --hosts is 2"),
        (["a=0", "b=2"], "positive integer"),
        (["a=x", "b=1"], "positive integer"),
        (["a=1", "a=1"], "unique"),
    ],
)
def test_instance_group_mistakes_are_usage_errors(texts, message):
    with pytest.raises(UsageError, match=message):
        parse_instance_groups(texts, ("algo-1", "algo-2"))


@pytest.mark.parametrize(
    "text", ["local", "local_gpu", "ml.c5.xlarge", "ml.p4d.24xlarge", "ml.trn1n.32xlarge"]
)
def test_instance_types_of_local_mode_and_sagemaker_are_taken(text):
    assert parse_instance_type(text) == text


@pytest.mark.parametrize("text", ["", "c5.xlarge", "ml.c5", "ML.C5.XLARGE", "local gpu", "ml.c5.xlarge "])
def test_an_instance_type_that_is_none_is_refused_naming_it(text):
    with pytest.raises(UsageError) as refused:
        parse_instance_type(text)
    assert str(refused.value) == (
        f"--instance-type {text!r} is not an instance type; give local (SDK local mode's), local_gpu or a "
        "SageMaker type such as ml.c5.xlarge."
    )


def test_the_instance_type_is_every_groups():
    hosts = ("algo-1", "algo-2", "algo-3")
    assert parse_instance_groups([], hosts, "ml.c5.xlarge") == (
        InstanceGroup("homogeneousCluster", "ml.c5.xlarge", hosts),
    )
    assert parse_instance_groups(["a=1", "b=2"], hosts, "ml.g5.xlarge") == (
        InstanceGroup("a", "ml.g5.xlarge", ("algo-1",)),
        InstanceGroup("b", "ml.g5.xlarge", ("algo-2", "algo-3")),
    )


def test_input_data_config_has_the_platform_fields():
    channels = parse_channels(["train=/data/train", "eval=/data/eval"], ["train=application/x-npy"], ["eval"])
    assert input_data_config(channels) == {
        "train": {
            "TrainingInputMode": "File",
            "S3DistributionType": "FullyReplicated",
            "RecordWrapperType": "None",
            "ContentType": "application/x-npy",
        },
        "eval": {
            "TrainingInputMode": "File",
            "S3DistributionType": "ShardedByS3Key",
            "RecordWrapperType": "None",
        },
    }


@pytest.mark.parametrize(
    ("channels", "types", "sharded", "message"),
    [
        (["train"], [], [], "KEY=VALUE"),
        (["tr ain=/x"], [], [], "may hold only"),
        (["train=/x", "train=/y"], [], [], "once"),
        (["train=/x"], ["eval=text/csv"], [], "'eval'"),
        (["train=/x"], [], ["eval"], "'eval'"),
    ],
)
def test_channel_flag_mistakes_are_usage_errors(channels, types, sharded, message):
    with pytest.raises(UsageError, match=message):
        parse_channels(channels, types, sharded)


def test_input_modes_are_sagemakers_training_input_modes():
    channels = parse_channels(
        ["train=/d/train", "eval=/d/eval", "stream=/d/stream"],
        [],
        ["stream"],
        ["eval=FastFile", "stream=Pipe"],
    )
    assert [source.channel.input_mode for source in channels] == [
        InputMode.FILE,
        InputMode.FAST_FILE,
        InputMode.PIPE,
    ]
    config = input_data_config(channels)
    assert {name: entry["TrainingInputMode"] for name, entry in config.items()} == {
        "train": "File",
        "eval": "FastFile",
        "stream": "Pipe",
    }
    assert config["stream"]["S3DistributionType"] == "ShardedByS3Key"


@pytest.mark.parametrize(
    ("modes", "message"),
    [
        (["train"], "--input-mode expects KEY=VALUE, got 'train'."),
        (["train=Stream"], "--input-mode 'train=Stream': the mode must be one of File|Pipe|FastFile."),
        (["train=pipe"], "--input-mode 'train=pipe': the mode must be one of File|Pipe|FastFile."),
        (["train=Pipe", "train=File"], "--input-mode names channel 'train' twice; give its mode once."),
        (
            ["eval=Pipe"],
            "--content-type/--sharded/--input-mode name a channel 'eval' that no --channel gives.",
        ),
    ],
)
def test_input_mode_mistakes_are_one_sentence_naming_the_flag(modes, message):
    with pytest.raises(UsageError) as refused:
        parse_channels(["train=/d/train"], [], [], modes)
    assert str(refused.value) == message


def test_sharded_by_s3_key_gives_every_file_to_exactly_one_host():
    files = [f"part-{index}.npz" for index in range(7)]
    shards = shard_files(files, ["algo-1", "algo-2", "algo-3"])
    assert sorted(name for names in shards.values() for name in names) == sorted(files)
    assert [len(names) for names in shards.values()] == [3, 2, 2]


# -- names, delays, docker arguments ---------------------------------------------------------------------


def test_host_names_are_sagemakers():
    assert host_names(3) == ("algo-1", "algo-2", "algo-3")
    with pytest.raises(UsageError):
        host_names(0)


def test_start_delays_must_name_a_host_and_a_number():
    hosts = ("algo-1", "algo-2")
    assert parse_start_delays(["algo-2=60"], hosts) == {"algo-2": 60.0}
    with pytest.raises(UsageError, match="algo-3"):
        parse_start_delays(["algo-3=1"], hosts)
    with pytest.raises(UsageError, match="number"):
        parse_start_delays(["algo-2=soon"], hosts)


def test_container_args_give_sagemaker_names_and_mount_the_host_tree(tmp_path):
    spec = RunSpec(
        image="img:cpu",
        hosts=("algo-1", "algo-2"),
        job_name="job-7",
        limits=ContainerLimits(
            gpus="all", cpus="1.5", memory="4g", shm_size="2g", ulimits=("nofile=1024:1024",)
        ),
        env=(("A", "1"),),
        checkpoints=tmp_path / "ckpt",
    )
    args = container_create_args(spec, "algo-2", tmp_path / "algo-2")
    assert args[0] == "create"
    assert args[-2:] == ["img:cpu", "train"]
    pairs = list(itertools.pairwise(args))
    for pair in [
        ("--name", "job-7-algo-2"),
        ("--network", "job-7-net"),
        ("--network-alias", "algo-2"),
        ("--label", "sagetrain.local-cluster.job=job-7"),
        ("--mount", f"type=bind,source={tmp_path / 'algo-2'},target=/opt/ml"),
        ("--mount", f"type=bind,source={tmp_path / 'ckpt'},target=/opt/ml/checkpoints"),
        ("--gpus", "all"),
        ("--cpus", "1.5"),
        ("--memory", "4g"),
        ("--shm-size", "2g"),
        ("--ulimit", "nofile=1024:1024"),
        ("--env", "A=1"),
    ]:
        assert pair in pairs
    # SageMaker local mode leaves the container id as hostname; --hostname-mode host names it algo-i.
    assert "--hostname" not in args
    named = container_create_args(replace(spec, hostname_is_host=True), "algo-2", tmp_path / "algo-2")
    assert ("--hostname", "algo-2") in list(itertools.pairwise(named))


def test_container_args_without_limits_pass_no_limit_flags(tmp_path):
    spec = RunSpec(image="img", hosts=("algo-1",), job_name="j", limits=ContainerLimits(shm_size=None))
    args = container_create_args(spec, "algo-1", tmp_path)
    assert not {"--gpus", "--cpus", "--memory", "--shm-size", "--ulimit"} & set(args)
    # The one variable every host gets, as SageMaker sets it.
    assert [pair for pair in itertools.pairwise(args) if pair[0] == "--env"] == [
        ("--env", "TRAINING_JOB_NAME=j")
    ]


def test_network_is_internal_and_labelled():
    assert network_create_args("job-7") == [
        "network",
        "create",
        "--internal",
        "--label",
        "sagetrain.local-cluster.job=job-7",
        "job-7-net",
    ]


def test_verdict_is_the_first_exit_whatever_the_others_say():
    assert job_verdict([("algo-2", 3), ("algo-1", 0)]) == ("algo-2", 3)
    assert job_verdict([("algo-1", 0), ("algo-2", 137)]) == ("algo-1", 0)
    with pytest.raises(ValueError):
        job_verdict([])


def test_docker_times_with_nanoseconds_parse():
    assert parse_docker_time("2024-05-01T10:00:00.123456789Z") == pytest.approx(1714557600.123456)
    assert parse_docker_time("2024-05-01T12:00:00+02:00") == pytest.approx(1714557600.0)
    assert parse_docker_time("0001-01-01T00:00:00Z") is None
    assert parse_docker_time("garbage") is None


def test_hosts_in_workdir_sorts_numerically_and_ignores_other_folders():
    assert hosts_in_workdir(["algo-10", "algo-2", "algo-1", "logs"]) == ("algo-1", "algo-2", "algo-10")
    with pytest.raises(UsageError):
        hosts_in_workdir(["logs"])


# -- writing the trees --------------------------------------------------------------------------------------


def test_trees_hold_sagemaker_files_code_and_channel_data(tmp_path):
    code = tmp_path / "src"
    (code / "pkg").mkdir(parents=True)
    (code / "train.py").write_text("print('hi')\n")
    (code / "pkg" / "util.py").write_text("")
    data = tmp_path / "data"
    data.mkdir()
    for index in range(3):
        (data / f"part-{index}.csv").write_text(f"{index}\n")
    single_file = tmp_path / "labels.txt"
    single_file.write_text("x\n")
    spec = tree_spec(
        code_dir=code,
        hyperparameters={"epochs": 2, "optimizer": "adam"},
        channels=(
            ChannelSource(Channel("train", content_type="text/csv"), data),
            ChannelSource(Channel("shards", s3_distribution=S3Distribution.SHARDED_BY_S3_KEY), data),
            ChannelSource(Channel("labels"), single_file),
        ),
    )
    validate_tree_inputs(spec)
    trees = write_trees(tmp_path / "work", spec)

    assert set(trees) == {"algo-1", "algo-2"}
    seen_shards = []
    for host, root in trees.items():
        config = root / "input" / "config"
        assert json.loads((config / "resourceconfig.json").read_text())["current_host"] == host
        hyperparameters = json.loads((config / "hyperparameters.json").read_text())
        assert hyperparameters["epochs"] == "2"
        assert hyperparameters["optimizer"] == '"adam"'
        assert hyperparameters["sagemaker_program"] == '"train.py"'
        assert json.loads(hyperparameters["sagemaker_submit_directory"]) == "/opt/ml/code"
        assert set(json.loads((config / "inputdataconfig.json").read_text())) == {"train", "shards", "labels"}
        assert (root / "code" / "train.py").read_text() == "print('hi')\n"
        assert (root / "code" / "pkg" / "util.py").is_file()
        assert sorted(path.name for path in (root / "input/data/train").iterdir()) == [
            "part-0.csv",
            "part-1.csv",
            "part-2.csv",
        ]
        assert (root / "input/data/labels/labels.txt").read_text() == "x\n"
        seen_shards += sorted(path.name for path in (root / "input/data/shards").iterdir())
        assert (root / "model").is_dir()
        assert (root / "output" / "data").is_dir()
    assert sorted(seen_shards) == ["part-0.csv", "part-1.csv", "part-2.csv"]


def test_missing_inputs_are_named_before_anything_runs(tmp_path):
    with pytest.raises(UsageError, match=r"--code .* is not a directory"):
        validate_tree_inputs(tree_spec(code_dir=tmp_path / "nope"))
    with pytest.raises(UsageError, match=r"--program train\.py is not in --code"):
        validate_tree_inputs(tree_spec(code_dir=tmp_path))
    with pytest.raises(UsageError, match="--channel train="):
        validate_tree_inputs(tree_spec(channels=(ChannelSource(Channel("train"), tmp_path / "absent"),)))


def test_write_only_then_from_workdir_reads_the_hosts_back(tmp_path, capsys):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("")
    workdir = tmp_path / "work"
    status = main(
        ["--image", "img", "--hosts", "3", "--code", str(code), "--program", "train.py",
         "--hp", "epochs=1", "--workdir", str(workdir), "--write-only"]
    )  # fmt: skip
    assert status == 0
    assert hosts_in_workdir(path.name for path in workdir.iterdir()) == ("algo-1", "algo-2", "algo-3")


def test_usage_errors_exit_2_with_one_line(tmp_path, capsys):
    status = main(["--image", "img", "--hosts", "2", "--hp", "epochs", "--write-only", "--workdir", "w"])
    assert status == 2
    assert capsys.readouterr().err.strip() == "local-cluster: --hp expects KEY=VALUE, got 'epochs'."


def test_examples_in_help_name_folders_that_exist():
    repo = RUNNER_PATH.parents[1]
    paths = re.findall(r"--code (\S+)|--channel \w+=(\S+)", EPILOG)
    named = [path for pair in paths for path in pair if path.startswith("examples/")]
    assert named, EPILOG
    for path in named:
        assert (repo / path).exists(), f"--help names {path}, which is not in the repository"


def test_containers_are_created_without_pulling(tmp_path):
    spec = RunSpec(image="img", hosts=("algo-1",), job_name="j")
    assert ("--pull", "never") in list(itertools.pairwise(container_create_args(spec, "algo-1", tmp_path)))


def test_checkpoints_are_mounted_at_the_jobs_checkpoint_folder_with_its_stop_timeout(tmp_path):
    spec = RunSpec(image="img", hosts=("algo-1",), job_name="j", checkpoints=tmp_path / "ckpt")
    pairs = list(itertools.pairwise(container_create_args(spec, "algo-1", tmp_path / "algo-1")))
    assert ("--mount", f"type=bind,source={tmp_path / 'ckpt'},target=/opt/ml/checkpoints") in pairs
    assert ("--stop-timeout", "10") in pairs  # SDK local mode's
    moved = replace(spec, checkpoint_dir="/opt/ml/checkpoints/run-1", stop_timeout_seconds=120)
    pairs = list(itertools.pairwise(container_create_args(moved, "algo-1", tmp_path / "algo-1")))
    assert ("--mount", f"type=bind,source={tmp_path / 'ckpt'},target=/opt/ml/checkpoints/run-1") in pairs
    assert ("--stop-timeout", "120") in pairs


@pytest.mark.parametrize(("text", "seconds"), [("0", 0), ("10", 10), ("120", 120), ("86400", 86400)])
def test_stop_timeout_is_whole_seconds(text, seconds):
    assert parse_stop_timeout(text) == seconds


@pytest.mark.parametrize("text", ["-1", "2.5", "soon", "", "86401", "1e3", "\uff11\uff10"])
def test_a_stop_timeout_that_docker_stop_cannot_take_is_refused_naming_it(text):
    with pytest.raises(UsageError) as refused:
        parse_stop_timeout(text)
    assert str(refused.value) == (
        f"--stop-timeout {text!r} must be whole seconds from 0 to 86400 (10 in SDK local mode, 120 on "
        "SageMaker)."
    )


def test_the_runners_waits_after_a_stop_follow_the_stop_timeout():
    assert wind_down_seconds(120) - wind_down_seconds(10) == 110


FAKE_DOCKER_LOG = """#!/bin/sh
# A docker CLI that notes each command it is given, and answers nothing.
echo "$@" >> "$0.log"
"""


def running_hosts(tmp_path: Path, docker_script: str, hosts: int = 2) -> tuple[ClusterRun, Path]:
    """A run of ``hosts`` hosts whose all but algo-1 are running, over a fake docker CLI that logs its
    commands to ``<docker>.log``; and that log."""
    docker = tmp_path / "docker"
    docker.write_text(docker_script)
    docker.chmod(0o755)
    names = tuple(f"algo-{index}" for index in range(1, hosts + 1))
    spec = RunSpec(image="img", hosts=names, job_name="j", stop_timeout_seconds=3)
    run = ClusterRun(spec, {}, DockerCli(str(docker)), LogPrinter(6, None))
    for host in names[1:]:
        run.statuses[host].state = HostState.STARTED
    return run, Path(f"{docker}.log")


def test_the_runner_stops_the_other_hosts_with_the_stop_timeout(tmp_path, capsys):
    run, commands = running_hosts(tmp_path, FAKE_DOCKER_LOG)
    run.events.put(("algo-2", 143))  # what `docker wait` reports once the stop took effect
    run.wind_down(0.0)
    assert "stop -t 3 j-algo-2" in commands.read_text().splitlines()
    assert "local-cluster: stopping algo-2 (docker stop -t 3)" in capsys.readouterr().out
    assert run.statuses["algo-2"].stopped_by_runner
    assert run.statuses["algo-2"].exit_code == 143


# The engine after the job's containers are gone: one other container is still on the job's network,
# which it refuses to remove until that container has been disconnected.
FAKE_DOCKER_OUTSIDER = """#!/bin/sh
echo "$@" >> "$0.log"
if [ "$1 $2" = "network inspect" ]; then
    echo "crowd-1 "
elif [ "$1 $2" = "network rm" ] && ! grep -q "^network disconnect" "$0.log"; then
    echo "error: network j-net has active endpoints" >&2
    exit 1
fi
"""


def test_a_container_the_job_did_not_make_leaves_its_network_before_the_network_is_removed(tmp_path):
    run, commands = running_hosts(tmp_path, FAKE_DOCKER_OUTSIDER)
    run.network_created = True
    run.remove()
    given = commands.read_text().splitlines()
    disconnected = given.index("network disconnect --force j-net crowd-1")
    assert "network rm j-net" in given[:disconnected] and given[-1] == "network rm j-net", given


def test_a_network_the_engine_removes_at_once_is_not_inspected(tmp_path):
    run, commands = running_hosts(tmp_path, FAKE_DOCKER_LOG)
    run.network_created = True
    run.remove()
    assert [line for line in commands.read_text().splitlines() if line.startswith("network")] == [
        "network rm j-net"
    ]


# The engine after the stop: algo-2 has exited with 143, algo-3 (if asked) still runs.
FAKE_DOCKER_AFTER_STOP = """#!/bin/sh
echo "$@" >> "$0.log"
if [ "$1" = inspect ]; then
    for name in "$@"; do
        case "$name" in
            j-algo-2) echo "/j-algo-2 false 143" ;;
            j-algo-3) echo "/j-algo-3 true 0" ;;
        esac
    done
fi
"""
ENGINE_QUESTION = "inspect --format {{.Name}} {{.State.Running}} {{.State.ExitCode}}"


def test_a_stopped_hosts_exit_comes_from_the_engine_when_its_docker_wait_has_not_reported(tmp_path):
    run, commands = running_hosts(tmp_path, FAKE_DOCKER_AFTER_STOP)
    run.wind_down(0.0)  # no `docker wait` report is queued: without the engine's answer this waits 30 s
    given = commands.read_text().splitlines()
    assert given.index("stop -t 3 j-algo-2") < given.index(f"{ENGINE_QUESTION} j-algo-2")
    assert (run.statuses["algo-2"].state, run.statuses["algo-2"].exit_code) == (HostState.EXITED, 143)


def test_a_host_the_engine_says_still_runs_waits_for_its_watcher_whose_late_word_on_another_is_ignored(
    tmp_path,
):
    run, commands = running_hosts(tmp_path, FAKE_DOCKER_AFTER_STOP, hosts=3)
    # algo-2's watcher failed (None) after the engine had said 143; algo-3's reports once it ends.
    run.events.put(("algo-2", None))
    run.events.put(("algo-3", 137))
    run.wind_down(0.0)
    assert f"{ENGINE_QUESTION} j-algo-2 j-algo-3" in commands.read_text().splitlines()
    assert run.statuses["algo-2"].exit_code == 143
    assert (run.statuses["algo-3"].state, run.statuses["algo-3"].exit_code) == (HostState.EXITED, 137)


@pytest.mark.parametrize(
    ("state", "exit_code", "said"),
    [
        (HostState.EXITED, 143, "exit 143"),
        (HostState.NEVER_STARTED, None, "never started"),
        (HostState.STARTED, None, "exit not known"),
        (HostState.EXITED, None, "exit not known"),
    ],
)
def test_the_report_says_never_started_only_of_a_host_that_never_started(state, exit_code, said):
    assert exit_text({"state": state.value, "exit_code": exit_code}) == said


# -- SageMaker's conventions written into the trees, read back with the image's readers ------------------


@pytest.mark.parametrize("flag", ["--checkpoint-local-path", "--tensorboard-local-path"])
@pytest.mark.parametrize("text", ["checkpoints", "opt/ml/checkpoints", "", "./x", "/a\0b"])
def test_a_local_path_in_the_containers_must_be_absolute(flag, text):
    with pytest.raises(UsageError) as refused:
        parse_container_folder(text, flag)
    assert (
        str(refused.value) == f"{flag} {text!r} must be an absolute folder path in the containers (from /)."
    )


@pytest.mark.parametrize(
    ("local_path", "target"),
    [
        ("/opt/ml/checkpoints", "/opt/ml/checkpoints"),
        ("/opt/ml/checkpoints/run-1/", "/opt/ml/checkpoints/run-1"),
        ("/opt/ml/checkpoints/../ckpt", "/opt/ml/ckpt"),
        ("/tmp/checkpoints", "/tmp/checkpoints"),
        ("/opt/ml/output/checkpoints", "/opt/ml/output/checkpoints"),
    ],
)
def test_checkpoints_mount_at_the_local_path(local_path, target):
    assert checkpoint_mount_target(local_path, "--checkpoint-local-path") == target


@pytest.mark.parametrize(
    ("local_path", "hidden"),
    [
        ("/", "/opt/ml/input/config"),
        ("/opt/ml", "/opt/ml/input/config"),
        ("/opt/ml/input", "/opt/ml/input/config"),
        ("/opt/ml/input/data/", "/opt/ml/input/data"),
        ("/opt/ml/code", "/opt/ml/code"),
        ("/opt/ml/model", "/opt/ml/model"),
        ("/opt/ml/output", "/opt/ml/output/data"),
        ("/opt/ml/checkpoints/..", "/opt/ml/input/config"),
    ],
)
def test_checkpoints_are_not_mounted_over_the_host_tree(local_path, hidden):
    with pytest.raises(UsageError) as refused:
        checkpoint_mount_target(local_path, "--checkpoint-local-path")
    assert str(refused.value) == (
        f"--checkpoint-local-path {local_path!r}: --checkpoints mounted there would hide {hidden} of the "
        "host tree; choose a folder such as /opt/ml/checkpoints."
    )


def test_checkpoints_are_not_mounted_at_a_path_docker_mount_cannot_carry():
    with pytest.raises(UsageError, match="cannot be mounted at a path with ','"):
        checkpoint_mount_target("/ckpt,readonly", "--checkpoint-local-path")


def write_only(tmp_path, *extra):
    """The trees written by the runner itself (--write-only), for the image's readers to read back."""
    workdir = tmp_path / "work"
    assert main([*job_flags(tmp_path, "--workdir", str(workdir), "--write-only"), *extra]) == 0
    return [workdir / "algo-1", workdir / "algo-2"]


def test_the_checkpoint_and_tensorboard_local_paths_are_what_the_image_reads(tmp_path):
    trees = write_only(
        tmp_path,
        "--checkpoint-local-path", "/opt/ml/checkpoints/run-1",
        "--tensorboard-local-path", "/opt/ml/output/tensorboard/run-1",
    )  # fmt: skip
    for tree in trees:
        paths = Paths(tree)
        assert json.loads(paths.checkpoint_config.read_text()) == {"LocalPath": "/opt/ml/checkpoints/run-1"}
        assert read_checkpoint_dir(paths) == tree / "checkpoints" / "run-1"
        assert read_tensorboard_dir(paths) == tree / "output" / "tensorboard" / "run-1"


def test_a_local_path_outside_opt_ml_is_read_as_given(tmp_path):
    (tree, _) = write_only(tmp_path, "--checkpoint-local-path", "/checkpoints")
    assert read_checkpoint_dir(Paths(tree)) == Path("/checkpoints")


def test_without_the_flags_the_job_has_no_checkpoint_or_tensorboard_config(tmp_path):
    for tree in write_only(tmp_path):
        paths = Paths(tree)
        assert not paths.checkpoint_config.exists()
        assert not paths.tensorboard_config.exists()
        assert read_tensorboard_dir(paths) is None
        assert read_checkpoint_dir(paths) == paths.checkpoint_dir


def test_the_instance_type_is_in_every_hosts_resource_config(tmp_path):
    trees = write_only(tmp_path, "--instance-type", "ml.c5.xlarge", "--instance-group", "a=1",
                       "--instance-group", "b=1")  # fmt: skip
    for tree, group in zip(trees, ("a", "b"), strict=True):
        resources = load_job_config(tree).resources
        assert resources.current_instance_type == "ml.c5.xlarge"
        assert resources.current_group_name == group
        assert {group.instance_type for group in resources.instance_groups} == {"ml.c5.xlarge"}
    (tmp_path / "default").mkdir()
    default = load_job_config(write_only(tmp_path / "default")[0]).resources
    assert default.current_instance_type == "local"


def test_a_pipe_channel_is_configured_without_data_and_fastfile_is_copied(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "part-0.csv").write_text("1,2\n")
    flags = ["--channel", f"train={data}", "--channel", f"eval={data}", "--channel", f"stream={data}",
             "--input-mode", "eval=FastFile", "--input-mode", "stream=Pipe"]  # fmt: skip
    for tree in write_only(tmp_path, *flags):
        # The image's reader checks that every File and FastFile channel has its folder.
        channels = {channel.name: channel.input_mode for channel in load_job_config(tree).channels}
        assert channels == {"train": InputMode.FILE, "eval": InputMode.FAST_FILE, "stream": InputMode.PIPE}
        data_dir = Paths(tree).data_dir
        assert (data_dir / "train" / "part-0.csv").read_text() == "1,2\n"
        assert (data_dir / "eval" / "part-0.csv").read_text() == "1,2\n"
        assert sorted(path.name for path in data_dir.iterdir()) == ["eval", "train"]


def test_the_checkpoint_folder_to_mount_is_the_jobs(tmp_path):
    def run_spec(*flags):
        args = build_parser().parse_args(["--image", "img", *flags])
        return run_spec_from_args(args, ("algo-1", "algo-2"), "j")

    ckpt = ["--checkpoints", str(tmp_path / "ckpt")]
    assert run_spec(*ckpt).checkpoint_dir == "/opt/ml/checkpoints"
    assert run_spec(*ckpt, "--checkpoint-local-path", "/opt/ml/checkpoints/run-1/").checkpoint_dir == (
        "/opt/ml/checkpoints/run-1"
    )
    # --from-workdir runs the trees as they are: the mount follows what algo-1's tree names.
    (tree, _) = write_only(tmp_path, "--checkpoint-local-path", "/opt/ml/checkpoints/run-2")
    from_workdir = ["--from-workdir", "--workdir", str(tree.parent), *ckpt]
    assert run_spec(*from_workdir).checkpoint_dir == "/opt/ml/checkpoints/run-2"
    Paths(tree).checkpoint_config.write_text('{"LocalPath": "/opt/ml"}')
    with pytest.raises(
        UsageError, match=r"checkpointconfig\.json LocalPath '/opt/ml': --checkpoints mounted"
    ):
        run_spec(*from_workdir)
    Paths(tree).checkpoint_config.write_text('{"LocalPath": "ckpt"}')
    with pytest.raises(
        UsageError, match=r"^--from-workdir: .*checkpointconfig\.json field 'LocalPath' is 'ckpt'"
    ):
        run_spec(*from_workdir)
    Paths(tree).checkpoint_config.unlink()
    assert run_spec(*from_workdir).checkpoint_dir == "/opt/ml/checkpoints"


# -- every path out: nothing written before the flags are checked, trees removed unless kept -------------


@pytest.fixture
def temp_root(tmp_path, monkeypatch):
    """Where mkdtemp puts the host trees during the test (the runner uses the tempfile module)."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def job_flags(tmp_path, *extra):
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text("")
    return ["--image", "img", "--hosts", "2", "--code", str(code), "--program", "train.py", *extra]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--start-delay", "algo-3=5"], "--start-delay names host 'algo-3'"),
        (["--start-delay", "algo-2=soon"], "seconds must be a number"),
        (["--env", "NOVALUE"], "--env expects KEY=VALUE"),
        (["--stop-timeout", "soon"], "--stop-timeout 'soon' must be whole seconds"),
        (["--instance-type", "c5.xlarge"], "--instance-type 'c5.xlarge' is not an instance type"),
        (["--checkpoint-local-path", "ckpt"], "--checkpoint-local-path 'ckpt' must be an absolute"),
        (["--tensorboard-local-path", "tb"], "--tensorboard-local-path 'tb' must be an absolute"),
        (["--checkpoint-local-path", "/opt/ml", "--checkpoints", "ckpt"], "would hide /opt/ml/input/config"),
        (["--channel", "train=.", "--input-mode", "train=Stream"], "--input-mode 'train=Stream'"),
    ],
)
def test_a_run_flag_mistake_is_reported_before_any_tree_is_written(
    tmp_path, temp_root, capsys, extra, message
):
    # The docker CLI named here does not exist: the flags must be rejected before docker is asked.
    status = main(job_flags(tmp_path, "--docker", str(tmp_path / "no-docker"), *extra))
    assert status == 2
    assert message in capsys.readouterr().err
    assert list(temp_root.iterdir()) == []


def test_a_missing_docker_cli_is_one_sentence_and_nothing_is_written(tmp_path, temp_root, capsys):
    status = main(job_flags(tmp_path, "--docker", str(tmp_path / "no-docker")))
    assert status == 125
    err = capsys.readouterr().err.strip()
    assert err == (
        f"local-cluster: the docker CLI '{tmp_path / 'no-docker'}' could not be run (No such file or "
        "directory); install Docker or pass --docker with the path of its CLI."
    )
    assert list(temp_root.iterdir()) == []


def test_a_workdir_that_is_not_empty_is_refused(tmp_path, capsys):
    workdir = tmp_path / "work"
    (workdir / "algo-1").mkdir(parents=True)
    status = main(job_flags(tmp_path, "--workdir", str(workdir), "--write-only"))
    assert status == 2
    assert f"--workdir {workdir} is not empty" in capsys.readouterr().err
    assert [path.name for path in workdir.iterdir()] == ["algo-1"]


def test_a_docker_call_that_does_not_answer_in_time_is_a_docker_error():
    # `sleep` stands in for a docker CLI that hangs: `sleep 30` with a 0.2 s limit.
    with pytest.raises(DockerError, match=r"^timed out after 0\.2 s waiting for `docker 30`; check that"):
        DockerCli("sleep").run(["30"], answer_deadline(["30"], 0.2))


def test_a_signal_outside_raising_is_recorded_and_raised_on_entry_once():
    with SignalGate() as gate:
        os.kill(os.getpid(), signal.SIGTERM)  # not raising: recorded only
        assert gate.received == [signal.SIGTERM]
        with pytest.raises(Interrupted), gate.raising():
            pass
        gate.received.clear()
        with pytest.raises(Interrupted), gate.raising():
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the handler runs between bytecodes, at the latest here
                pass
        os.kill(os.getpid(), signal.SIGINT)  # after the one raise: recorded only
        assert gate.received == [signal.SIGINT, signal.SIGINT]
    assert signal.getsignal(signal.SIGTERM) is not gate._on_signal


FAKE_DOCKER = """#!/bin/sh
# The engine as far as the runner's preflight asks: it answers and has the image; the job's names are free.
case "$1 $2" in "container inspect"|"network inspect") exit 1 ;; esac
exit 0
"""


def test_ctrl_c_while_the_trees_are_written_removes_them(tmp_path):
    docker = tmp_path / "docker"
    docker.write_text(FAKE_DOCKER)
    docker.chmod(0o755)
    data = tmp_path / "data"
    data.mkdir()
    files = 3000
    for index in range(files):
        (data / f"part-{index}.csv").write_text("1,2\n")
    temp = tmp_path / "tmp"
    temp.mkdir()
    flags = job_flags(tmp_path, "--hosts", "3", "--channel", f"train={data}", "--docker", str(docker),
                      "--output", str(tmp_path / "out"))  # fmt: skip
    runner = subprocess.Popen(
        [str(RUNNER_PATH), *flags],
        env={**os.environ, "TMPDIR": str(temp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not any(temp.iterdir()):  # the trees' folder appears as the writing begins
            assert runner.poll() is None and time.monotonic() < deadline, "no tree folder appeared"
            time.sleep(0.001)
        runner.send_signal(signal.SIGSTOP)  # hold it mid-write to see how far it got
        written = sum(1 for path in temp.rglob("part-*.csv"))
        runner.send_signal(signal.SIGINT)
        runner.send_signal(signal.SIGCONT)
        output, _ = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
    print(f"{written} of {3 * files} channel files were written when SIGINT came")
    assert written < 3 * files, "the writing had ended before the signal: make the channel larger"
    assert runner.returncode == 128 + signal.SIGINT, output
    assert "SIGINT received while writing the host trees; nothing was started" in output
    assert list(temp.iterdir()) == [], "the temporary host trees were left behind"
