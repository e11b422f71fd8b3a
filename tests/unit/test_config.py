"""Config parsing: JSON-string hyperparameters, the files' validation, channels, devices."""

import functools
import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sagetrain.config.channels import Channel, InputMode, S3Distribution
from sagetrain.config.devices import count_listed_gpus, visible_gpu_count
from sagetrain.config.hyperparameters import decode_hyperparameters, parse_settings, user_hyperparameters
from sagetrain.config.job import load_job_config
from sagetrain.config.job_files import JobFiles
from sagetrain.config.paths import Paths
from sagetrain.config.resources import InstanceGroup
from sagetrain.config.tensorboard import read_tensorboard_dir
from sagetrain.engines import Engine
from sagetrain.errors import UserError


def write_tree(root: Path, resources=None, hyperparameters=None, channels=None, raw=None):
    """A one-host tree as SageMaker writes it (config/job_files.py), then the given documents (or raw
    texts) in place of its files: the reader under test gets exactly those."""
    JobFiles(("algo-1",), {"sagemaker_program": "train.py"}).write(root, "algo-1")
    config = root / "input" / "config"
    documents = {
        "resourceconfig.json": resources,
        "hyperparameters.json": hyperparameters,
        "inputdataconfig.json": channels,
    }
    for name, value in documents.items():
        if value is not None:
            (config / name).write_text(json.dumps(value))
    for name, text in (raw or {}).items():
        (config / name).write_text(text)


def test_hyperparameters_are_json_decoded_like_the_toolkit():
    decoded = decode_hyperparameters(
        {
            "epochs": "10",
            "lr": "0.5",
            "name": '"resnet"',
            "flag": "true",
            "plain": "not json",
            "layers": "[1, 2]",
        }
    )
    assert decoded == {
        "epochs": 10,
        "lr": 0.5,
        "name": "resnet",
        "flag": True,
        "plain": "not json",
        "layers": [1, 2],
    }


def test_user_hyperparameters_exclude_sdk_toolkit_and_our_keys():
    decoded = {
        "epochs": 3,
        "sagemaker_program": "t.py",
        "sagetrain_ssh_port": 2200,
        "_tuning_objective_metric": "x",
    }
    assert user_hyperparameters(decoded) == {"epochs": 3}


def test_settings_read_sdk_names_and_our_defaults(tmp_path):
    settings = parse_settings(
        decode_hyperparameters(
            {
                "sagemaker_program": '"train.py"',
                "sagemaker_mpi_enabled": "true",
                "sagemaker_mpi_num_of_processes_per_host": "4",
                "sagemaker_mpi_custom_mpi_options": '"-x NCCL_DEBUG=INFO"',
                "sagemaker_network_interface_name": '"eth1"',
                "sagemaker_distribution_instance_groups": '["gpus"]',
                "sagetrain_coordinator_port": "7100",
            }
        ),
        tmp_path / "hyperparameters.json",
    )
    assert settings.program == "train.py"
    assert settings.enabled_engines == (Engine.HOROVOD,)
    assert settings.mpi_processes_per_host == 4
    assert settings.custom_mpi_options == ("-x", "NCCL_DEBUG=INFO")
    assert settings.network_interface_name == "eth1"
    assert settings.distribution_instance_groups == ("gpus",)
    assert settings.launch.coordinator_port == 7100
    assert settings.launch.ssh_port == 22
    assert settings.launch.worker_wait_seconds == 600.0
    assert settings.launch.launch_wait_seconds == 300.0


def test_integer_setting_that_is_not_an_integer_names_field_and_value(tmp_path):
    with pytest.raises(UserError) as error:
        parse_settings(
            decode_hyperparameters({"sagemaker_mpi_num_of_processes_per_host": '"two"'}), tmp_path / "hp.json"
        )
    assert "sagemaker_mpi_num_of_processes_per_host must be an integer" in error.value.cause
    assert "'two'" in error.value.cause


def test_custom_mpi_options_are_split_as_a_shell_splits_them(tmp_path):
    settings = parse_settings(
        decode_hyperparameters({"sagemaker_mpi_custom_mpi_options": json.dumps("-x A='b c' --verbose")}),
        tmp_path / "hp.json",
    )
    assert settings.custom_mpi_options == ("-x", "A=b c", "--verbose")


def test_custom_mpi_options_with_an_unbalanced_quote_name_file_field_and_value(tmp_path):
    source = tmp_path / "hyperparameters.json"
    with pytest.raises(UserError) as error:
        parse_settings(
            decode_hyperparameters({"sagemaker_mpi_custom_mpi_options": r'"-x FOO=\"bar"'}), source
        )
    assert error.value.cause == (
        f"{source} field sagemaker_mpi_custom_mpi_options cannot be split into mpirun arguments "
        "(No closing quotation): '-x FOO=\"bar'; close the quote or escape it with a backslash"
    )


@pytest.mark.parametrize(
    ("options", "flag"),
    [
        ("-np 1", "-np"),
        ("-x NCCL_DEBUG=INFO -n 2", "-n"),
        ("--host algo-1:1", "--host"),
        ("-H algo-1:1,algo-2:1", "-H"),
        ("--hostfile /tmp/hosts", "--hostfile"),
        ("-npernode 1", "-npernode"),
    ],
)
def test_custom_mpi_options_that_set_ranks_or_hosts_are_refused_naming_file_field_and_value(
    tmp_path, options, flag
):
    source = tmp_path / "hyperparameters.json"
    with pytest.raises(UserError) as error:
        parse_settings(
            decode_hyperparameters({"sagemaker_mpi_custom_mpi_options": json.dumps(options)}), source
        )
    assert error.value.cause.startswith(
        f"{source} field sagemaker_mpi_custom_mpi_options sets {flag} ({options!r}), but the launcher "
        "decides how many ranks run on which hosts; remove it and set sagemaker_mpi_num_of_processes_per_host"
    )


def test_custom_mpi_options_may_carry_values_that_look_like_refused_flags(tmp_path):
    options = '-x NP=1 --bind-to core -mca plm_rsh_args "-H x"'
    settings = parse_settings(
        decode_hyperparameters({"sagemaker_mpi_custom_mpi_options": json.dumps(options)}),
        tmp_path / "hp.json",
    )
    assert settings.custom_mpi_options == ("-x", "NP=1", "--bind-to", "core", "-mca", "plm_rsh_args", "-H x")


def test_unknown_sagetrain_setting_is_refused_naming_the_one_it_likely_misspells(tmp_path):
    with pytest.raises(UserError) as refused:
        parse_settings({"sagetrain_cordinator_port": 1}, tmp_path / "hp.json")
    assert refused.value.cause == (
        f"{tmp_path}/hp.json has unknown setting sagetrain_cordinator_port; did you mean "
        "sagetrain_coordinator_port? (the README's hyperparameter table lists every setting)"
    )
    with pytest.raises(
        UserError, match=r"unknown setting sagetrain_zzz; known: sagetrain_code_archive_max_bytes, "
    ):
        parse_settings({"sagetrain_zzz": 1}, tmp_path / "hp.json")


def test_boolean_setting_accepts_json_and_text(tmp_path):
    settings = parse_settings({"sagemaker_mpi_enabled": "True"}, tmp_path / "hp.json")
    assert settings.enabled_engines == (Engine.HOROVOD,)
    with pytest.raises(UserError, match="sagemaker_mpi_enabled must be true or false"):
        parse_settings({"sagemaker_mpi_enabled": "yes please"}, tmp_path / "hp.json")


def test_the_files_written_as_sagemaker_writes_them_read_back_as_written(tmp_path):
    hosts = ("algo-1-abcde", "algo-2-abcde")
    values = {"sagemaker_program": "train.py", "epochs": 3, "layers": [64, 32], "name": "a b"}
    files = JobFiles(
        hosts=hosts,
        hyperparameters=values,
        channels=(
            Channel("train", content_type="text/csv"),
            Channel("shards", InputMode.FAST_FILE, S3Distribution.SHARDED_BY_S3_KEY),
        ),
        instance_groups=(InstanceGroup("g", "ml.p4d.24xlarge", hosts),),
    )
    paths = files.write(tmp_path, "algo-2-abcde")
    hyperparameters = json.loads(paths.hyperparameters.read_text())
    assert hyperparameters["epochs"] == "3" and hyperparameters["name"] == '"a b"'  # JSON strings
    config = load_job_config(tmp_path)
    assert config.resources.current_host == "algo-2-abcde"
    assert config.resources.hosts == hosts
    assert config.resources.instance_groups == (InstanceGroup("g", "ml.p4d.24xlarge", hosts),)
    assert config.resources.current_group_name == "g"
    assert config.hyperparameters == {
        "sagemaker_program": "train.py",
        "epochs": 3,
        "layers": [64, 32],
        "name": "a b",
    }
    assert config.settings.program == "train.py"
    assert config.channels == (
        Channel("train", InputMode.FILE, content_type="text/csv"),
        Channel("shards", InputMode.FAST_FILE, S3Distribution.SHARDED_BY_S3_KEY, None),
    )
    assert [config.paths.channel_dir(channel.name) for channel in config.channels] == [
        tmp_path / "input" / "data" / "train",
        tmp_path / "input" / "data" / "shards",
    ]


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ({"current_host": "algo-9", "hosts": ["algo-1"]}, "current_host 'algo-9' is not in hosts"),
        ({"current_host": "algo-1", "hosts": []}, "field hosts is empty"),
        ({"current_host": "algo-1"}, "field hosts must be a list"),
        ({"current_host": "algo-1", "hosts": ["algo-1", "algo-1"]}, "lists a host twice"),
        ({"hosts": ["algo-1"]}, "field current_host must be a host name"),
    ],
)
def test_bad_resource_config_names_the_field(tmp_path, resources, message):
    write_tree(tmp_path, resources=resources)
    with pytest.raises(UserError, match=message) as error:
        load_job_config(tmp_path)
    assert "resourceconfig.json" in error.value.cause


def test_garbled_json_names_file_and_position(tmp_path):
    write_tree(tmp_path, raw={"hyperparameters.json": '{"sagemaker_program": '})
    with pytest.raises(UserError, match=r"hyperparameters.json is not valid JSON \(line 1, column"):
        load_job_config(tmp_path)


def test_missing_resource_config_is_a_user_error(tmp_path):
    write_tree(tmp_path)
    (tmp_path / "input" / "config" / "resourceconfig.json").unlink()
    with pytest.raises(UserError, match=r"resourceconfig\.json is missing"):
        load_job_config(tmp_path)


def test_declared_channel_without_folder(tmp_path):
    write_tree(tmp_path, channels={"train": {"TrainingInputMode": "File"}})
    with pytest.raises(UserError, match=r"declares channel 'train' but its folder .* does not exist"):
        load_job_config(tmp_path)
    assert load_job_config(tmp_path, check_channels=False).channels[0].name == "train"


def test_pipe_channel_needs_no_folder(tmp_path):
    write_tree(tmp_path, channels={"train": {"TrainingInputMode": "Pipe"}})
    assert load_job_config(tmp_path).channels[0].input_mode.value == "Pipe"


def test_every_input_mode_has_its_traits_and_the_file_modes_have_folders_the_trainer_reads():
    traits = {
        mode.value: (mode.has_folder, mode.shardable, mode.fetched_on_open, mode.medium) for mode in InputMode
    }
    assert traits == {
        "File": (True, True, False, "a folder of files"),
        "Pipe": (False, False, False, "a FIFO"),
        "FastFile": (True, True, True, "a folder of files"),
    }


def test_the_tree_writer_makes_a_folder_for_each_channel_whose_mode_has_one(tmp_path):
    channels = tuple(Channel(mode.name.lower(), input_mode=mode) for mode in InputMode)
    paths = JobFiles(("algo-1",), channels=channels).write(tmp_path, "algo-1")
    assert sorted(path.name for path in paths.data_dir.iterdir()) == ["fast_file", "file"]
    assert [channel.input_mode for channel in load_job_config(tmp_path).channels] == list(InputMode)


@pytest.mark.parametrize(
    ("listed", "nvidia", "cuda", "expected"),
    [
        (8, None, None, 8),
        (8, "all", None, 8),
        (8, "0,1", None, 2),
        (8, None, "3", 1),
        (8, "none", None, 0),
        (8, None, "", 0),
        (8, None, "-1", 0),
        (0, "all", None, 0),
    ],
)
def test_visible_gpu_count(listed, nvidia, cuda, expected):
    assert visible_gpu_count(listed, nvidia, cuda) == expected


def test_count_listed_gpus():
    output = "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-1)\nGPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-2)\n"
    assert count_listed_gpus(output) == 2
    assert count_listed_gpus("") == 0


@pytest.mark.parametrize(
    ("gpus", "driver", "horovod", "expected"),
    [
        (8, "580.65.06", True, None),
        (8, "550.127.05", True, None),
        (8, "535.104.05", True, None),  # SageMaker's 535 branch runs TensorFlow and Horovod's kernels
        (8, "525.60.13", True, None),
        (8, "525.60.11", True, "older than 525.60.13, the oldest that runs CUDA 12 code"),
        (8, "470.256.02", True, "TensorFlow 2.21 will not see the GPUs and Horovod cannot run its GPU"),
        (8, "470.256.02", False, "older than 525.60.13"),
        (0, "470.256.02", True, None),  # the GPUs are hidden from this container
        (8, None, True, None),
        (8, "garbled", True, None),
    ],
)
def test_driver_warnings(gpus, driver, horovod, expected):
    from sagetrain.config.devices import Devices, driver_warnings

    warnings = driver_warnings(Devices(gpus=gpus, cpus=8, driver_version=driver), uses_horovod=horovod)
    if expected is None:
        assert warnings == ()
    else:
        (warning,) = warnings
        assert expected in warning and driver in warning
        assert ("Horovod" in warning) is horovod


@pytest.mark.parametrize("key", ["sagetrain_worker_wait_seconds", "sagetrain_launch_wait_seconds"])
@pytest.mark.parametrize("raw", ["Infinity", "-Infinity", "NaN", "0", "-5", '"soon"'])
def test_waits_must_be_positive_finite_numbers(tmp_path, key, raw):
    with pytest.raises(UserError, match=f"{key} must be a positive, finite number"):
        parse_settings(decode_hyperparameters({key: raw}), tmp_path / "hp.json")


@pytest.mark.parametrize("depth", [3, 600, 950])
def test_a_bad_value_nested_deep_or_long_is_named_in_one_short_sentence(tmp_path, depth):
    """JSON reads nesting deeper than the masking and quoting can walk: the sentence says so; a long value
    is quoted by its start and size. Read from a thread's fresh stack, near empty as the entry's is:
    Python's recursion limit counts the frames below the reader too, and the test runner's (more under
    pytest-xdist's workers) would take from the nesting JSON can read."""
    raw = {"sagetrain_worker_wait_seconds": "[" * depth + "]" * depth, "sagemaker_region": '"x"'}
    with ThreadPoolExecutor(max_workers=1) as fresh_stack, pytest.raises(UserError) as error:
        fresh_stack.submit(lambda: parse_settings(decode_hyperparameters(raw), tmp_path / "hp.json")).result()
    assert "sagetrain_worker_wait_seconds must be a positive, finite number" in error.value.cause
    assert ("nested too deeply" in error.value.cause) is (depth > 500)
    long = {"sagetrain_worker_wait_seconds": json.dumps("y" * 20_000)}
    with pytest.raises(UserError) as error:
        parse_settings(decode_hyperparameters(long), tmp_path / "hp.json")
    assert len(error.value.cause) < 300 and "20,000 characters" in error.value.cause


def test_waits_accept_fractions(tmp_path):
    raw = {"sagetrain_worker_wait_seconds": "2.5", "sagetrain_launch_wait_seconds": "0.5"}
    settings = parse_settings(decode_hyperparameters(raw), tmp_path / "hp.json")
    assert (settings.launch.worker_wait_seconds, settings.launch.launch_wait_seconds) == (2.5, 0.5)


@pytest.mark.parametrize(
    ("affinity", "quota", "expected"),
    [
        (8, None, 8),
        (8, "max 100000\n", 8),  # cgroup v2, no limit
        (8, "150000 100000\n", 2),  # docker --cpus 1.5
        (8, "200000 100000", 2),
        (2, "800000 100000", 2),  # the quota allows more than the cpuset has
        (4, "garbled", 4),
        (0, None, 1),
    ],
)
def test_usable_cpus_honour_affinity_and_quota(affinity, quota, expected):
    from sagetrain.config.devices import usable_cpus

    assert usable_cpus(affinity, quota) == expected


DEEP = "[" * 100_000 + "]" * 100_000
DEEP_VALUE = "[" * 5_000 + "]" * 5_000  # within the length a value may have, deeper than JSON reads
PROGRAM = '"sagemaker_program": "\\"train.py\\""'
HP = "hyperparameters.json"


@pytest.mark.parametrize(
    ("file", "text", "message"),
    [
        (HP, "{" + PROGRAM + ', "x": "\\"\\\\ud800\\""}',
         r"field 'x' holds text that is not valid Unicode \(a lone surrogate"),
        (HP, "{" + PROGRAM + ', "x": "{\\"a\\": [\\"\\\\udc00\\"]}"}',
         r"field 'x\.a\[0\]' holds text that is not valid Unicode"),
        (HP, "{" + PROGRAM + ', "x": "\\"a\\\\u0000b\\""}', r"field 'x' holds a NUL character"),
        (HP, "{" + PROGRAM + ', "a\\u0000b": "1"}', r"field 'a\\x00b' holds a NUL character"),
        (HP, "{" + PROGRAM + ', "a=b": "1"}', r"field 'a=b': a hyperparameter name .* '='"),
        (HP, "{" + PROGRAM + ', "x": ' + DEEP + "}", "nests JSON arrays or objects too deeply"),
        (HP, "{" + PROGRAM + ', "x": "' + DEEP_VALUE + '"}', r"field 'x' nests JSON too deeply"),
        ("resourceconfig.json", '{"current_host": "algo-1", "hosts": ["algo-1"], "x": ' + DEEP + "}",
         "resourceconfig.json nests JSON"),
        ("inputdataconfig.json", '{"a=b": {"TrainingInputMode": "File"}}',
         r"channel 'a=b': a channel name may hold only letters"),
        ("resourceconfig.json", json.dumps({"current_host": "algo-1", "hosts": ["algo-1", "algo-2\nx"]}),
         r"field hosts lists 'algo-2\\nx', which is not a host name"),
    ],
)  # fmt: skip
def test_text_no_environment_or_file_name_can_carry_is_refused_naming_file_and_field(
    tmp_path, file, text, message
):
    write_tree(tmp_path, raw={file: text})
    with pytest.raises(UserError, match=message) as error:
        load_job_config(tmp_path, check_channels=False)
    assert error.value.cause.startswith(str(tmp_path / "input" / "config" / file))
    assert "\n" not in error.value.cause and "\x00" not in error.value.cause


LONG = "9" * 5_000  # more digits than Python reads into an integer (sys.get_int_max_str_digits: 4,300)


@pytest.mark.parametrize(
    ("file", "text", "field"),
    [
        (HP, "{" + PROGRAM + ', "epochs": ' + LONG + "}", "'epochs'"),
        (HP, "{" + PROGRAM + ', "x": [1, {"y": -' + LONG + "}]}", "'x[1].y'"),
        ("resourceconfig.json", '{"current_host": "algo-1", "hosts": ["algo-1"], "x": ' + LONG + "}", "'x'"),
        ("inputdataconfig.json", '{"train": {"TrainingInputMode": "File", "n": ' + LONG + "}}", "'train.n'"),
    ],
)  # fmt: skip
def test_a_number_longer_than_python_reads_is_refused_naming_file_and_field(tmp_path, file, text, field):
    write_tree(tmp_path, raw={file: text})
    with pytest.raises(UserError) as error:
        load_job_config(tmp_path, check_channels=False)
    path = tmp_path / "input" / "config" / file
    assert error.value.cause == (
        f"{path} field {field} holds a number 5,000 digits long, more than the 4,300 digits Python reads; "
        "no file SageMaker writes holds one: give the value as a string, or a shorter number"
    )


def test_a_number_as_long_as_python_reads_is_read(tmp_path):
    text = '{"current_host": "algo-1", "hosts": ["algo-1"], "x": ' + "9" * 4_300 + "}"
    write_tree(tmp_path, raw={"resourceconfig.json": text})
    assert load_job_config(tmp_path, check_channels=False).resources.hosts == ("algo-1",)


def test_a_job_without_a_tensorboard_output_config_has_no_tensorboard_folder(tmp_path):
    write_tree(tmp_path)
    assert read_tensorboard_dir(Paths(tmp_path)) is None


@pytest.mark.parametrize(
    ("local_path", "expected"),
    [
        ("/opt/ml/output/tensorboard", "output/tensorboard"),  # under the job root, wherever that is
        ("/opt/ml/output/tb-logs", "output/tb-logs"),
        ("/opt/ml/output/../output/tb", "output/tb"),
    ],
)
def test_the_tensorboard_output_config_names_the_folder(tmp_path, local_path, expected):
    JobFiles(("algo-1",), {"sagemaker_program": "train.py"}, tensorboard_local_path=local_path).write(
        tmp_path, "algo-1"
    )
    assert read_tensorboard_dir(Paths(tmp_path)) == tmp_path / expected


def test_a_tensorboard_folder_outside_the_job_root_is_taken_as_given(tmp_path):
    write_tree(tmp_path, raw={"tensorboardoutputconfig.json": json.dumps({"LocalPath": "/scratch/tb"})})
    assert read_tensorboard_dir(Paths(tmp_path)) == Path("/scratch/tb")
    escaping = {"LocalPath": "/opt/ml/../etc"}
    write_tree(tmp_path, raw={"tensorboardoutputconfig.json": json.dumps(escaping)})
    assert read_tensorboard_dir(Paths(tmp_path)) == Path("/opt/etc")  # normalised: not under /opt/ml


def test_a_tensorboard_output_config_without_a_local_path_means_sagemakers_default(tmp_path):
    write_tree(tmp_path, raw={"tensorboardoutputconfig.json": json.dumps({"S3OutputPath": "s3://b/tb"})})
    assert read_tensorboard_dir(Paths(tmp_path)) == tmp_path / "output" / "tensorboard"


@pytest.mark.parametrize("local_path", ["tensorboard", "", 3])
def test_a_local_path_that_is_not_an_absolute_folder_is_refused_naming_file_and_field(tmp_path, local_path):
    write_tree(tmp_path, raw={"tensorboardoutputconfig.json": json.dumps({"LocalPath": local_path})})
    with pytest.raises(UserError) as refused:
        read_tensorboard_dir(Paths(tmp_path))
    assert refused.value.cause.startswith(
        f"{tmp_path}/input/config/tensorboardoutputconfig.json field 'LocalPath' is {local_path!r}; it must "
        "be an absolute folder path"
    )
    # Only the managed trainer reads it: a job's configuration loads whatever it says.
    assert load_job_config(tmp_path).settings.program == "train.py"


# Inputs past SageMaker's limits (config/limits.py): at each limit the job loads; one past it ends with
# one sentence that names the file, the field and the limit.

CONFIG = "input/config"


def limit_error(tmp_path, **documents) -> str:
    write_tree(tmp_path, **documents)
    with pytest.raises(UserError) as error:
        load_job_config(tmp_path, check_channels=False)
    cause = error.value.cause
    assert "\n" not in cause and len(cause) < 600
    return cause


def padded(document: dict, size: int) -> str:
    """``document`` as JSON text of exactly ``size`` bytes (whitespace at the end)."""
    text = json.dumps(document)
    return text + " " * (size - len(text))


def test_a_config_file_of_the_limits_size_is_read(tmp_path):
    from sagetrain.config.limits import MAX_CONFIG_FILE_BYTES

    text = padded({"sagemaker_program": '"train.py"'}, MAX_CONFIG_FILE_BYTES)
    write_tree(tmp_path, raw={"hyperparameters.json": text})
    assert load_job_config(tmp_path).settings.program == "train.py"


def test_a_hyperparameters_file_past_the_size_limit_is_refused_before_it_is_read(tmp_path):
    from sagetrain.config.limits import MAX_CONFIG_FILE_BYTES

    text = padded({"sagemaker_program": '"train.py"'}, MAX_CONFIG_FILE_BYTES + 1)
    cause = limit_error(tmp_path, raw={"hyperparameters.json": text})
    assert cause == (
        f"{tmp_path / CONFIG / 'hyperparameters.json'} is 4,194,305 bytes, more than the 4,194,304 bytes "
        "(4 MiB) this image reads from a configuration file; SageMaker takes at most 100 hyperparameters, "
        "with names of up to 256 and values of up to 2,500 characters, which fit in far less: pass large "
        "settings as a file in a data channel"
    )


def test_a_config_file_whose_size_stat_cannot_tell_is_read_only_up_to_the_limit(tmp_path):
    write_tree(tmp_path)
    resources = tmp_path / CONFIG / "resourceconfig.json"
    resources.unlink()
    resources.symlink_to("/dev/zero")  # endless, and stat says 0 bytes
    cause = limit_error(tmp_path)
    assert cause == (
        f"{resources} is larger than the 4,194,304 bytes (4 MiB) this image reads from a configuration file; "
        "SageMaker writes none that large, so check what wrote the file"
    )


def hyperparameters(count: int, **extra: str) -> dict[str, str]:
    """``count`` hyperparameters as SageMaker writes them, ``extra`` among them."""
    values = {"sagemaker_program": '"train.py"', **extra}
    values.update({f"hp_{index:03d}": '"x"' for index in range(count - len(values))})
    return values


def test_hyperparameters_up_to_the_limit_load(tmp_path):
    from sagetrain.config.limits import MAX_HYPERPARAMETER_NAME, MAX_HYPERPARAMETER_VALUE, MAX_HYPERPARAMETERS

    name, value = "n" * MAX_HYPERPARAMETER_NAME, json.dumps("v" * (MAX_HYPERPARAMETER_VALUE - 2))
    write_tree(tmp_path, hyperparameters=hyperparameters(MAX_HYPERPARAMETERS, **{name: value}))
    config = load_job_config(tmp_path)
    assert len(config.hyperparameters) == MAX_HYPERPARAMETERS == 256
    assert config.hyperparameters[name] == "v" * (MAX_HYPERPARAMETER_VALUE - 2)


def test_one_hyperparameter_more_than_the_limit_is_refused_naming_both_limits(tmp_path):
    cause = limit_error(tmp_path, hyperparameters=hyperparameters(257))
    assert cause == (
        f"{tmp_path / CONFIG / 'hyperparameters.json'} holds 257 hyperparameters, more than the 256 this "
        "image takes (SageMaker takes 100 in a training job, more only in a tuning job's); pass the rest as "
        "a file in a data channel"
    )


def test_a_hyperparameter_name_past_sagemakers_limit_is_refused_quoting_its_start(tmp_path):
    name = "n" * 257
    cause = limit_error(tmp_path, hyperparameters=hyperparameters(2, **{name: "1"}))
    assert cause == (
        f"{tmp_path / CONFIG / 'hyperparameters.json'} field {repr(name)[:80]}… (257 characters): a "
        "hyperparameter name may be at most 256 characters long (SageMaker's limit); shorten it"
    )


def test_a_hyperparameter_value_past_the_limit_is_refused_naming_both_limits(tmp_path):
    value = json.dumps("v" * 16_383)  # the JSON text SageMaker was given: 16,385 characters
    cause = limit_error(tmp_path, hyperparameters=hyperparameters(2, config=value))
    assert cause == (
        f"{tmp_path / CONFIG / 'hyperparameters.json'} field 'config' has a value of 16,385 characters, more "
        "than the 16,384 this image takes (SageMaker takes 2,500); put the value in a file in a data channel "
        "and pass its path instead"
    )


def test_a_value_written_as_json_rather_than_a_string_is_measured_as_its_text(tmp_path):
    write_tree(tmp_path, raw={"hyperparameters.json": json.dumps({"layers": list(range(3000))})})
    with pytest.raises(UserError, match=r"field 'layers' has a value of 1[0-9,]+ characters"):
        load_job_config(tmp_path)


def channels(count: int) -> dict[str, dict[str, str]]:
    return {f"channel-{index:03d}": {"TrainingInputMode": "File"} for index in range(count)}


def test_channels_up_to_the_limit_load(tmp_path):
    write_tree(tmp_path, channels=channels(100))
    assert len(load_job_config(tmp_path, check_channels=False).channels) == 100


def test_one_channel_more_than_the_limit_is_refused_naming_both_limits(tmp_path):
    cause = limit_error(tmp_path, channels=channels(101))
    assert cause == (
        f"{tmp_path / CONFIG / 'inputdataconfig.json'} declares 101 channels, more than the 100 this image "
        "takes (SageMaker takes 20 in a training job); put related data in one channel, a folder each"
    )


def sagemaker_hosts(count: int, width: int = 0) -> list[str]:
    """SageMaker's host names algo-1 …, each padded to ``width`` characters."""
    return [f"algo-{index}".ljust(width, "x") for index in range(1, count + 1)]


def test_hosts_up_to_the_limit_load(tmp_path):
    hosts = sagemaker_hosts(2048)
    write_tree(tmp_path, resources={"current_host": "algo-2048", "hosts": hosts})
    assert load_job_config(tmp_path).resources.hosts == tuple(hosts)


def test_one_host_more_than_the_limit_is_refused(tmp_path):
    cause = limit_error(tmp_path, resources={"current_host": "algo-1", "hosts": sagemaker_hosts(2049)})
    assert cause == (
        f"{tmp_path / CONFIG / 'resourceconfig.json'} field hosts lists 2,049 hosts, more than the 2,048 "
        "this image runs (SageMaker's own limit is your account's instance quota); run the job on fewer "
        "instances"
    )


def test_host_names_past_the_characters_that_fit_are_refused(tmp_path):
    hosts = sagemaker_hosts(2048, width=16)  # 32,768 characters: at the limit
    write_tree(tmp_path, resources={"current_host": hosts[0], "hosts": hosts})
    assert len(load_job_config(tmp_path).resources.hosts) == 2048
    hosts[0] += "x"
    cause = limit_error(tmp_path, resources={"current_host": hosts[1], "hosts": hosts})
    assert cause == (
        f"{tmp_path / CONFIG / 'resourceconfig.json'} field hosts names its hosts in 32,769 characters, more "
        "than the 32,768 that fit in mpirun's host list and TF_CONFIG (SageMaker's names, algo-1, algo-2…, "
        "take far less); use shorter host names"
    )


def test_an_instance_group_is_checked_against_the_hosts_once_each(tmp_path):
    # Each of many groups listing every host: checked against a set, so this loads at once.
    hosts = sagemaker_hosts(2048)
    groups = [{"instance_group_name": f"g{index}", "hosts": hosts} for index in range(30)]
    write_tree(tmp_path, resources={"current_host": "algo-1", "hosts": hosts, "instance_groups": groups})
    assert len(load_job_config(tmp_path).resources.instance_groups) == 30


def test_at_the_host_limits_mpiruns_host_list_and_tf_config_fit_in_one_argument_or_variable(tmp_path):
    from sagetrain.config.resources import parse_resource_config
    from sagetrain.launch.spec import MAX_ENV_STRING_BYTES
    from sagetrain.plan import make_plan
    from sagetrain.plan.mpi_command import host_list
    from sagetrain.plan.tf_config import TF_CONFIG_VAR, TaskType, tf_config

    hosts = sagemaker_hosts(2048, width=16)  # at both limits
    resources = parse_resource_config({"current_host": hosts[-1], "hosts": hosts}, tmp_path / "rc.json")
    ports = {"sagetrain_tf_config_port": 65535, "sagetrain_ps_port": 65534}
    ps = parse_settings({"sagemaker_parameter_server_enabled": True, **ports}, tmp_path / "hp.json")
    plan = make_plan(resources, ps, gpus_per_host=8)
    for task in (None, TaskType.PS):
        variable = f"{TF_CONFIG_VAR}={json.dumps(tf_config(plan, hosts[-1], task))}"
        assert len(variable.encode()) < MAX_ENV_STRING_BYTES
    horovod = {"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 99_999}
    plan = make_plan(resources, parse_settings(horovod, tmp_path / "hp.json"), gpus_per_host=8)
    assert len(host_list(plan).encode()) < MAX_ENV_STRING_BYTES


def described_spec(root: Path, values: dict[str, str]):
    """The launch spec a one-host job with these hyperparameters (as SageMaker writes them) describes."""
    from sagetrain.preparation import Preparation, launch_spec, prepare_job

    write_tree(root, hyperparameters={"sagemaker_program": '"train.py"', **values})
    environ = {"SAGEMAKER_BASE_DIR": str(root), "SAGETRAIN_RUN_DIR": str(root / "run")}
    job = prepare_job(environ, Preparation.DESCRIBE, root=root, gpus=0, cpus=2)
    return launch_spec(job, environ, Preparation.DESCRIBE, cpus=2)


def sagemaker_sized(value: str) -> dict[str, str]:
    """99 hyperparameters (the program is the 100th) at SageMaker's limits: 256-character names, values of
    2,500 characters of JSON text."""
    return {f"{index:02d}".ljust(256, "名"): value for index in range(99)}


def test_a_job_at_sagemakers_limits_in_cjk_text_starts_within_linuxs_limits(tmp_path):
    from sagetrain.launch.spec import MAX_EXEC_BYTES, exec_bytes

    spec = described_spec(tmp_path, sagemaker_sized(json.dumps("字" * 2498, ensure_ascii=False)))
    size = exec_bytes([*spec.rank_argv, *spec.args_file_arguments], spec.env)
    assert 1_500_000 < size < MAX_EXEC_BYTES


def test_hyperparameters_linux_could_not_start_a_program_with_are_refused_naming_the_limit(tmp_path):
    # Within SageMaker's limits, yet 2.4 MB: a list's text is passed as it is (3 bytes a character) and
    # as the toolkit's JSON in SM_HP_* (\uXXXX, 6 bytes).
    with pytest.raises(UserError) as error:
        described_spec(tmp_path, sagemaker_sized(json.dumps(["字" * 2494], ensure_ascii=False)))
    assert re.fullmatch(
        f"{re.escape(str(tmp_path / CONFIG / 'hyperparameters.json'))} holds hyperparameters that, passed "
        r"as --name value and as SM_HP_<NAME>, make the program's arguments and environment "
        r"2,[0-9]{3},[0-9]{3} bytes, more than the 1,835,008 that fit under Linux's 2 MiB for starting a "
        r"program with room for the launchers; shorten the longest or pass them as a file in a data channel",
        error.value.cause,
    )


def test_the_longest_value_the_image_takes_is_one_argument_linux_can_carry():
    from sagetrain.config.hyperparameters import decode_value
    from sagetrain.config.limits import MAX_HYPERPARAMETER_VALUE
    from sagetrain.launch.spec import MAX_ENV_STRING_BYTES
    from sagetrain.mapping_compat import to_cmd_args

    widest = "\U0001f600"  # 4 bytes in UTF-8, one character of JSON text
    as_text = functools.partial(json.dumps, ensure_ascii=False)
    for text in (as_text(widest * (MAX_HYPERPARAMETER_VALUE - 2)),
                 as_text({"k": [widest * (MAX_HYPERPARAMETER_VALUE - 11)]})):  # fmt: skip
        assert len(text) == MAX_HYPERPARAMETER_VALUE
        (_, argument) = to_cmd_args({"x": decode_value(text)})
        assert len(argument.encode()) + 1 < MAX_ENV_STRING_BYTES


def test_a_huge_value_is_quoted_by_its_start_and_its_size():
    from sagetrain.config.files import quoted

    assert quoted("algo-1") == "'algo-1'"
    assert quoted("x" * 100) == "'" + "x" * 79 + "… (100 characters)"
    assert quoted(["algo"] * 1000).endswith("… (1,000 items)")
    assert quoted(10**100).endswith("… (101 characters written out)")


def test_a_host_list_that_is_not_a_list_of_names_is_quoted_by_its_start(tmp_path):
    cause = limit_error(tmp_path, resources={"current_host": "algo-1", "hosts": ["algo-1", 2] * 100_000})
    assert cause.endswith("must be a list of host names, got ['algo-1', 2, 'algo-1', 2, 'algo-1', 2, "
                          "'algo-1', 2, 'algo-1', 2, 'algo-1', 2, '… (200,000 items)")  # fmt: skip


def test_a_derived_images_program_comes_from_its_environment_and_the_hyperparameter_wins(tmp_path):
    write_tree(tmp_path, hyperparameters={})
    environ = {"SAGEMAKER_PROGRAM": "train.py"}
    config = load_job_config(tmp_path, environ=environ)
    assert config.settings.program == "train.py"
    # What sagemaker_training builds SM_USER_ENTRY_POINT from says the same.
    assert config.toolkit_hyperparameters["sagemaker_program"] == "train.py"
    write_tree(tmp_path, hyperparameters={"sagemaker_program": '"other.py"'})
    assert load_job_config(tmp_path, environ=environ).settings.program == "other.py"
    write_tree(tmp_path, hyperparameters={})
    assert load_job_config(tmp_path).settings.program is None


@pytest.mark.parametrize(
    ("value", "level"),
    [("40", 40), ('"ERROR"', 40), ('"debug"', 10), ("20.0", 20), ("0", 0)],
)
def test_the_container_log_level_is_a_logging_level_by_number_or_name(tmp_path, value, level):
    write_tree(
        tmp_path, hyperparameters={"sagemaker_program": '"train.py"', "sagemaker_container_log_level": value}
    )
    config = load_job_config(tmp_path, environ={"SAGEMAKER_CONTAINER_LOG_LEVEL": "10"})
    assert config.settings.log_level == level  # the hyperparameter wins over the environment
    assert config.toolkit_hyperparameters["sagemaker_container_log_level"] == level


def test_the_log_level_comes_from_the_environment_when_no_hyperparameter_sets_it(tmp_path):
    write_tree(tmp_path)
    assert load_job_config(tmp_path).settings.log_level is None
    assert (
        load_job_config(tmp_path, environ={"SAGEMAKER_CONTAINER_LOG_LEVEL": "WARNING"}).settings.log_level
        == 30
    )


@pytest.mark.parametrize("value", ['"loud"', "60", "-1", "true"])
def test_a_log_level_that_is_no_level_is_refused_naming_the_field(tmp_path, value):
    write_tree(
        tmp_path, hyperparameters={"sagemaker_program": '"train.py"', "sagemaker_container_log_level": value}
    )
    with pytest.raises(
        UserError, match=r"field sagemaker_container_log_level must be a logging level \(a number"
    ):
        load_job_config(tmp_path)


def test_a_log_level_variable_that_is_no_level_is_refused_naming_the_variable(tmp_path):
    write_tree(tmp_path)
    with pytest.raises(UserError) as refused:
        load_job_config(tmp_path, environ={"SAGEMAKER_CONTAINER_LOG_LEVEL": "verbose"})
    assert refused.value.cause.startswith(
        "environment variable SAGEMAKER_CONTAINER_LOG_LEVEL is 'verbose'; set it to a logging level"
    )


@pytest.mark.parametrize(
    ("local_path", "expected"),
    [
        (None, "checkpoints"),  # no checkpoint configuration: SageMaker's default folder
        ("/opt/ml/checkpoints", "checkpoints"),
        ("/opt/ml/checkpoints/run-2", "checkpoints/run-2"),
        ("/opt/ml/spot", "spot"),
    ],
)
def test_the_checkpoint_configuration_names_the_checkpoint_folder(tmp_path, local_path, expected):
    from sagetrain.config.checkpoints import read_checkpoint_dir

    JobFiles(("algo-1",), {"sagemaker_program": "train.py"}, checkpoint_local_path=local_path).write(
        tmp_path, "algo-1"
    )
    assert read_checkpoint_dir(Paths(tmp_path)) == tmp_path / expected


def test_a_checkpoint_local_path_that_is_not_absolute_is_refused_naming_file_and_field(tmp_path):
    from sagetrain.config.checkpoints import read_checkpoint_dir

    write_tree(
        tmp_path, raw={"checkpointconfig.json": json.dumps({"LocalPath": "ckpt", "S3Uri": "s3://b/c"})}
    )
    with pytest.raises(UserError) as refused:
        read_checkpoint_dir(Paths(tmp_path))
    assert refused.value.cause == (
        f"{tmp_path}/input/config/checkpointconfig.json field 'LocalPath' is 'ckpt'; it must be an absolute "
        "folder path such as /opt/ml/checkpoints (the configuration's local path)"
    )
