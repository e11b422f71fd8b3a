"""The job's secret: read from the file in the channel the hyperparameter names (or from its two forms the
job's description shows), one sentence for each way that channel can be wrong, the key it makes, and the
warning a multi-host job without one gives."""

import pytest
from sagetrain.config.channels import Channel, InputMode, S3Distribution
from sagetrain.config.job import load_job_config
from sagetrain.config.job_files import JobFiles
from sagetrain.config.job_secret import (
    CHANNEL_KEY,
    MAX_SECRET_BYTES,
    SECRET_VAR,
    JobSecret,
    Membership,
    missing_secret_warning,
    read_job_secret,
)
from sagetrain.errors import UserError

SECRET = b"9f2c\x00 random bytes \xff of the job\n"


SECRET_CHANNEL = Channel("secret")


def job(tmp_path, channel=SECRET_CHANNEL, files=(("key", SECRET),), hyperparameters=None, name="a"):
    hyperparameters = {CHANNEL_KEY: "secret", "epochs": 2} if hyperparameters is None else hyperparameters
    root = tmp_path / name
    paths = JobFiles(("algo-1", "algo-2"), hyperparameters, channels=(Channel("train"), channel)).write(
        root, "algo-1"
    )
    for relative, content in files:
        path = paths.channel_dir(channel.name) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return load_job_config(root)


def test_the_file_in_the_named_channel_is_the_secret_and_its_value_is_never_shown(tmp_path):
    secret = read_job_secret(job(tmp_path), {})
    assert secret.channel_file == SECRET
    assert secret.forms() == (CHANNEL_KEY,)
    assert "random" not in repr(secret)
    # One S3 object under a prefix lands in a subfolder: still the one file.
    nested = read_job_secret(job(tmp_path, files=(("deep/er/key", SECRET),), name="b"), {})
    assert nested.channel_file == SECRET


def test_every_form_counts_and_each_changes_the_key(tmp_path):
    config = job(tmp_path)
    base = Membership.of_job(config, {}, read_job_secret(config, {})).job_key
    without_file = Membership.of_job(config, {}, JobSecret()).job_key
    variable = {SECRET_VAR: "x"}
    with_variable = Membership.of_job(config, variable, read_job_secret(config, variable))
    other_file = job(tmp_path, files=(("key", b"another secret"),), name="c")
    assert len({base, without_file, with_variable.job_key}) == 3
    assert Membership.of_job(other_file, {}, read_job_secret(other_file, {})).job_key != base
    both = read_job_secret(config, {SECRET_VAR: "x"})
    assert both.forms() == (CHANNEL_KEY, SECRET_VAR)
    assert set(both.texts()) == {SECRET.decode(errors="replace").strip(), "x"}


PIPE = Channel("secret", input_mode=InputMode.PIPE)
SHARDED = Channel("secret", s3_distribution=S3Distribution.SHARDED_BY_S3_KEY)
TOO_LARGE = (("key", b"x" * (MAX_SECRET_BYTES + 1)),)


@pytest.mark.parametrize(
    ("channel", "files", "hyperparameters", "expected"),
    [
        (SECRET_CHANNEL, (), {CHANNEL_KEY: "vault"},
         "names channel 'vault', which inputdataconfig.json does not declare; add that channel or fix the "
         "name"),
        (SECRET_CHANNEL, (), None, "names channel 'secret', which holds no file; give it exactly one file"),
        (SECRET_CHANNEL, (("a", b"1"), ("b", b"2")), None, "which holds 2 files; give it exactly one file"),
        (SECRET_CHANNEL, (("key", b" \n"),), None, "which holds an empty file key; put the secret in it"),
        (SECRET_CHANNEL, TOO_LARGE, None, f"which holds key, larger than {MAX_SECRET_BYTES} bytes"),
        (PIPE, (), None, "which is a Pipe mode channel; give that channel TrainingInputMode File"),
        (SHARDED, (("key", SECRET),), None,
         "which is sharded, so only one host would have the file; give that channel S3DistributionType "
         "FullyReplicated"),
    ],
)  # fmt: skip
def test_a_secret_channel_that_cannot_hold_the_secret_is_one_sentence_naming_it(
    tmp_path, channel, files, hyperparameters, expected
):
    config = job(tmp_path, channel, files, hyperparameters)
    with pytest.raises(UserError) as raised:
        read_job_secret(config, {})
    assert expected in raised.value.cause
    assert raised.value.cause.startswith(f"hyperparameter {CHANNEL_KEY} names channel")


def test_a_link_in_the_secret_channel_is_not_followed(tmp_path):
    config = job(tmp_path, files=())
    (config.paths.channel_dir("secret") / "key").symlink_to("/etc/hostname")
    with pytest.raises(UserError, match="which is not a regular file"):
        read_job_secret(config, {})


def test_a_dry_run_without_the_channel_folder_reads_no_file_and_a_run_refuses(tmp_path):
    config = job(tmp_path, files=())
    config.paths.channel_dir("secret").rmdir()
    assert read_job_secret(config, {}, required=False).channel_file == b""
    with pytest.raises(UserError, match="has no folder"):
        read_job_secret(config, {})


def test_a_multi_host_job_without_a_secret_is_warned_about_once_saying_how_to_add_one():
    warning = missing_secret_warning(2, JobSecret())
    assert warning is not None
    assert warning.startswith("this 2-host job has no job secret")
    assert f"name that channel with the hyperparameter {CHANNEL_KEY}" in warning
    assert missing_secret_warning(1, JobSecret()) is None
    assert missing_secret_warning(2, JobSecret(channel_file=b"s")) is None
    assert missing_secret_warning(2, JobSecret(environment="s")) is None
