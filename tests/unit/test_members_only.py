"""Members-only ports and least privilege, the decisions: what every process preloads, the members file,
the names the C library is built with, sshd's settings and environment, the parameter server task's
environment and user, and the setting that turns the library off."""

from __future__ import annotations

import json
import pwd
import re
import stat
from pathlib import Path

import pytest
from sagetrain.config.hyperparameters import HyperparameterReader, LaunchSettings, parse_launch_settings
from sagetrain.contracts import (
    DEFAULT_RUN_DIR,
    IN_IMAGE_VAR,
    MEMBERS_FILE_NAME,
    MEMBERS_FILTER_LIBRARY,
    RUN_DIR_VAR,
    RunDir,
    members_filter_defines,
)
from sagetrain.errors import PlatformError
from sagetrain.launch.members import (
    chosen_filter,
    filter_env,
    members_text,
    missing_filter_warning,
    preload_value,
    write_members,
)
from sagetrain.launch.process import RunAs
from sagetrain.launch.ps_server import identity_of, parameter_server_env
from sagetrain.launch.run_dir import keep_secret_channel_private
from sagetrain.launch.sshd import SshFiles, session_env, set_env_setting, sshd_config_text, sshd_env

LIBRARY = Path("/usr/local/lib/sagetrain/libsagetrain-members-only.so")
C_SOURCE = Path(__file__).resolve().parents[2] / "container" / "members-only" / "members_only.c"


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        ("", str(LIBRARY)),
        ("/opt/jemalloc.so", f"{LIBRARY} /opt/jemalloc.so"),
        ("/a.so:/b.so", f"{LIBRARY} /a.so /b.so"),
        (f"/a.so {LIBRARY}", f"{LIBRARY} /a.so"),  # once, first
    ],
)
def test_the_library_is_preloaded_first_and_once_with_what_the_job_preloads(current, expected):
    assert preload_value(LIBRARY, current) == expected


def test_a_process_preloads_the_library_only_when_there_is_one():
    assert filter_env(None, {"LD_PRELOAD": "/opt/jemalloc.so"}) == {}
    assert filter_env(LIBRARY, {"LD_PRELOAD": "/opt/jemalloc.so"}) == {
        "LD_PRELOAD": f"{LIBRARY} /opt/jemalloc.so"
    }


@pytest.mark.parametrize(
    ("wanted", "installed", "chosen"), [(True, True, LIBRARY), (True, False, None), (False, True, None)]
)
def test_the_library_is_used_when_the_job_wants_it_and_the_image_has_it(wanted, installed, chosen):
    assert chosen_filter(wanted, LIBRARY, installed) == chosen


def test_a_job_in_the_image_without_the_library_says_its_ports_are_open_to_anyone():
    in_image = {IN_IMAGE_VAR: "1"}
    warning = missing_filter_warning(True, None, in_image)
    assert warning is not None and str(MEMBERS_FILTER_LIBRARY) in warning and "anyone" in warning
    assert missing_filter_warning(True, LIBRARY, in_image) is None
    assert missing_filter_warning(False, None, in_image) is None  # the job turned it off
    assert missing_filter_warning(True, None, {}) is None  # outside the image there is none to miss


def test_the_members_file_lists_each_address_once_in_order_without_loopback():
    text = members_text(["10.0.0.12", "10.0.0.5", "10.0.0.12", "127.0.0.1", "::1", "fd00::7"])
    assert text == "10.0.0.5\n10.0.0.12\nfd00::7\n"
    with pytest.raises(ValueError):
        members_text(["algo-2"])


def test_the_members_file_is_written_whole_and_readable_by_every_user(tmp_path):
    run_dir = RunDir(tmp_path / "run")
    assert write_members(run_dir, ["10.0.0.6"], ["127.0.0.1", "10.0.0.5"]) == ("10.0.0.5", "10.0.0.6")
    assert run_dir.members_file == tmp_path / "run" / MEMBERS_FILE_NAME
    assert run_dir.members_file.read_text() == "10.0.0.5\n10.0.0.6\n"
    assert stat.S_IMODE(run_dir.members_file.stat().st_mode) == 0o644


def test_the_library_is_built_with_the_names_the_launcher_uses():
    defines = dict(define.removeprefix("-D").split("=", 1) for define in members_filter_defines())
    assert {name: json.loads(value) for name, value in defines.items()} == {
        "RUN_DIR_VAR": RUN_DIR_VAR,
        "DEFAULT_RUN_DIR": str(DEFAULT_RUN_DIR),
        "MEMBERS_FILE_NAME": MEMBERS_FILE_NAME,
    }
    # The source refuses to build without exactly these.
    required = re.search(r"#if (!defined\(\w+\)(?: \|\| !defined\(\w+\))*)", C_SOURCE.read_text())
    assert required is not None
    assert set(re.findall(r"defined\((\w+)\)", required.group(1))) == set(defines)


def test_sshd_forces_the_library_and_its_run_folder_on_every_session_and_allows_nothing_but_a_command():
    run_dir = RunDir(Path("/run/sagetrain"))
    session = session_env(LIBRARY, run_dir)
    assert session == {"LD_PRELOAD": str(LIBRARY), RUN_DIR_VAR: "/run/sagetrain"}
    assert session_env(None, run_dir) == {}
    lines = sshd_config_text(SshFiles.in_folder(Path("/run/sagetrain/ssh")), 22, session).splitlines()
    assert f'SetEnv "LD_PRELOAD={LIBRARY}" "{RUN_DIR_VAR}=/run/sagetrain"' in lines
    for setting in (
        "DisableForwarding yes",
        "PermitTunnel no",
        "PermitUserRC no",
        "PermitUserEnvironment no",
    ):
        assert setting in lines
    assert not any(
        line.startswith("SetEnv")
        for line in sshd_config_text(SshFiles.in_folder(Path("/s")), 22, {}).splitlines()
    )


def test_a_value_sshd_config_cannot_hold_is_refused():
    with pytest.raises(PlatformError, match="cannot be written in sshd's configuration"):
        set_env_setting({RUN_DIR_VAR: '/run/a "quoted" folder'})


def test_sshd_runs_without_the_jobs_credentials_or_secrets():
    environ = {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "AWS_SECRET_ACCESS_KEY": "x" * 20,
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/credentials/abc",
        "SAGETRAIN_JOB_SECRET": "s" * 20,
        "SM_HPS": "{}",
    }
    assert sshd_env(environ, {"LD_PRELOAD": str(LIBRARY)}) == {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "LD_PRELOAD": str(LIBRARY),
    }


JOB_ENV = {
    "PATH": "/usr/local/bin:/usr/bin",
    "LANG": "C.UTF-8",
    "PYTHONUNBUFFERED": "1",
    "VIRTUAL_ENV": "/opt/venv",
    "LD_PRELOAD": f"{LIBRARY} /opt/jemalloc.so",
    RUN_DIR_VAR: "/run/sagetrain",
    "TF_CPP_MIN_LOG_LEVEL": "1",
    "GRPC_VERBOSITY": "ERROR",
    "OMP_NUM_THREADS": "4",
    "AWS_ACCESS_KEY_ID": "AKIA0000000000000000",
    "AWS_SECRET_ACCESS_KEY": "secret-key-0000",
    "AWS_SESSION_TOKEN": "token-0000",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/credentials/abc",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://169.254.170.2/v2/credentials/abc",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN": "auth-0000",
    "AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/token",
    "TF_AUTH_TOKEN": "a token a user named like TensorFlow's settings",
    "SM_HPS": '{"db_password": "hunter2"}',
    "SM_TRAINING_ENV": "{}",
    "SAGETRAIN_COORDINATOR": "algo-1:7077",
    "HOME": "/root",
}


def test_the_parameter_server_task_keeps_what_serving_needs_and_nothing_that_stays_on_a_host():
    env = parameter_server_env(JOB_ENV, '{"task": {"type": "ps", "index": 0}}', Path("/run/sagetrain/ps"))
    assert env == {
        "PATH": "/usr/local/bin:/usr/bin",
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "VIRTUAL_ENV": "/opt/venv",
        "LD_PRELOAD": f"{LIBRARY} /opt/jemalloc.so",
        RUN_DIR_VAR: "/run/sagetrain",
        "TF_CPP_MIN_LOG_LEVEL": "1",
        "GRPC_VERBOSITY": "ERROR",
        "OMP_NUM_THREADS": "4",
        "TF_CONFIG": '{"task": {"type": "ps", "index": 0}}',
        "HOME": "/run/sagetrain/ps",
        "TMPDIR": "/run/sagetrain/ps",
    }


def entry(uid: int, gid: int) -> pwd.struct_passwd:
    return pwd.struct_passwd(("sagetrain-ps", "x", uid, gid, "", "/nonexistent", "/usr/sbin/nologin"))


def test_the_parameter_server_task_runs_as_its_own_user_when_the_launcher_can_make_it_so():
    assert identity_of(0, entry(999, 999)) == RunAs(999, 999)
    assert identity_of(1000, entry(999, 999)) is None  # a launcher that is not root cannot
    assert identity_of(0, None) is None  # an image without the user


def test_the_secret_channel_becomes_its_owners_alone(tmp_path):
    folder = tmp_path / "secret"
    folder.mkdir(mode=0o755)
    (folder / "job-secret").write_text("s")
    keep_secret_channel_private(folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_members_only_ports_are_on_unless_the_job_turns_them_off(tmp_path):
    source = tmp_path / "hyperparameters.json"
    assert LaunchSettings().members_only_ports is True
    assert parse_launch_settings(HyperparameterReader({}, source)).members_only_ports is True
    settings = parse_launch_settings(HyperparameterReader({"sagetrain_members_only_ports": "false"}, source))
    assert settings.members_only_ports is False
