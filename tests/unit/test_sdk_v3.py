"""The SageMaker SDK v3's drivers in this image: which interpreter start is a driver's, the program its
sourcecode.json names, the ssh keys and files made for its MPI driver, and what becomes of a
SourceCode(command=...)."""

import dataclasses
import json
import os
import socket
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from sagetrain import contracts
from sagetrain.config.channels import Channel
from sagetrain.config.job import load_job_config
from sagetrain.config.job_files import JobFiles
from sagetrain.config.job_secret import SECRET_VAR, Membership
from sagetrain.config.sdk_names import DISTRIBUTED_CONFIG_VAR, HOST_COUNT_VAR, SOURCE_DIR_VAR
from sagetrain.config.sdk_source_code import read_source_code
from sagetrain.deadline import Deadline
from sagetrain.errors import PlatformError, UserError
from sagetrain.launch.sshd import SshFiles
from sagetrain.sdk import may_be_sdk_process
from sagetrain.sdk.ssh import (
    HostSshKeys,
    KeyExchange,
    exchange_keys,
    prepare_for_mpi_driver,
    public_key_problem,
    trust_of,
    write_trust,
)
from sagetrain.sdk.v3 import (
    HANDED_OVER_VAR,
    SdkDriver,
    at_interpreter_start,
    command_refusal,
    command_warning,
    crowded_mpi_ranks,
    may_run_sdk_command,
    recognise,
    withhold_our_settings,
)

DRIVERS = "/opt/ml/input/data/sm_drivers/distributed_drivers"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([f"{DRIVERS}/basic_script_driver.py"], SdkDriver.BASIC_SCRIPT),
        ([f"{DRIVERS}/mpi_driver.py"], SdkDriver.MPI),
        ([f"{DRIVERS}/../distributed_drivers/mpi_driver.py"], SdkDriver.MPI),
        ([f"{DRIVERS}/torchrun_driver.py"], None),
        (["/opt/ml/input/data/code/train.py", "--epochs", "2"], None),
        (["/tmp/sm_drivers/distributed_drivers/mpi_driver.py"], None),
        (["-c"], None),
        ([], None),
    ],
)
def test_a_driver_is_recognised_by_the_script_the_interpreter_starts_with(argv, expected):
    assert recognise(argv, {}) is expected


@pytest.mark.parametrize("launched_by", [contracts.RANK_VAR, contracts.MPI_RANK_VAR, HANDED_OVER_VAR])
def test_a_process_our_launcher_or_mpirun_started_is_never_a_driver(launched_by):
    assert recognise([f"{DRIVERS}/basic_script_driver.py"], {launched_by: "0"}) is None


def test_the_drivers_are_looked_for_under_the_job_root():
    root = {"SAGEMAKER_BASE_DIR": "/tmp/job"}
    assert (
        recognise(["/tmp/job/input/data/sm_drivers/distributed_drivers/mpi_driver.py"], root) is SdkDriver.MPI
    )
    assert recognise([f"{DRIVERS}/mpi_driver.py"], root) is None


def test_an_ordinary_interpreter_start_does_nothing():
    environ = {"PATH": "/usr/bin"}
    at_interpreter_start(["/opt/ml/code/train.py"], environ)
    assert environ == {"PATH": "/usr/bin"}


def write_job(root: Path, host: str, hyperparameters: dict, source_code: dict | None) -> Path:
    JobFiles(
        ("algo-1", "algo-2"),
        hyperparameters,
        channels=(Channel("train"), Channel("code"), Channel("sm_drivers")),
    ).write(root, host)
    if source_code is not None:
        (root / "input/data/sm_drivers/sourcecode.json").write_text(json.dumps(source_code))
    return root


SOURCE_CODE = {
    "source_dir": "/home/me/src",
    "entry_script": "train.py",
    "command": None,
    "requirements": None,
}


def test_the_sdk_entry_script_is_the_program_with_the_code_channel_as_its_folder(tmp_path):
    settings = load_job_config(write_job(tmp_path, "algo-1", {"epochs": 2}, SOURCE_CODE)).settings
    assert settings.program == "train.py"
    assert settings.submit_directory == str(tmp_path / "input/data/code")


def test_hyperparameters_naming_the_program_win_over_the_sdk_source_code(tmp_path):
    hyperparameters = {"sagemaker_program": "other.py", "sagemaker_submit_directory": "/opt/ml/x"}
    settings = load_job_config(write_job(tmp_path, "algo-1", hyperparameters, SOURCE_CODE)).settings
    assert (settings.program, settings.submit_directory) == ("other.py", "/opt/ml/x")


@pytest.mark.parametrize(
    "source_code",
    [None, {"source_dir": "/src", "entry_script": None, "command": "python a.py"}],
)
def test_without_an_sdk_entry_script_nothing_is_added(tmp_path, source_code):
    settings = load_job_config(write_job(tmp_path, "algo-1", {}, source_code)).settings
    assert (settings.program, settings.submit_directory) == (None, None)


def test_an_entry_script_without_source_dir_keeps_the_default_code_folder(tmp_path):
    source_code = {"source_dir": None, "entry_script": "train.py", "command": None}
    settings = load_job_config(write_job(tmp_path, "algo-1", {}, source_code)).settings
    assert (settings.program, settings.submit_directory) == ("train.py", None)


def generated(tmp_path: Path, name: str) -> tuple[HostSshKeys, SshFiles]:
    layout = SshFiles.system(tmp_path / name / "etc", tmp_path / name / "home/.ssh")
    return HostSshKeys.generate(layout), layout


def test_each_host_makes_random_keys_whose_halves_match(tmp_path):
    keys, layout = generated(tmp_path, "a")
    again, _ = generated(tmp_path, "b")
    assert len({keys.host, keys.client, again.host, again.client}) == 4
    for line, private_file in ((keys.host, layout.host_key), (keys.client, layout.client_key)):
        assert public_key_problem(line) is None
        private = serialization.load_ssh_private_key(private_file.read_bytes(), password=None)
        public = private.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        assert line.split()[:2] == public.decode().split()
        assert stat.S_IMODE(private_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(layout.client_key.parent.stat().st_mode) == 0o700


@pytest.mark.parametrize(
    "line",
    [
        "",
        "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ host",
        'command="sh" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK7ZbY1Gq1sQ0vYQx8ZbYy1Gq1sQ0vYQx8ZbYy1Gq1sQ x',
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK7ZbY1Gq1sQ0vYQx8ZbYy1Gq1sQ0vYQx8ZbYy1Gq1sQ x\nssh-rsa AAAA",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK7ZbY1Gq1sQ0vYQx8ZbYy1Gq1sQ0vYQx8ZbYy1Gq1sQ host two",
    ],
)
def test_a_peer_key_that_is_not_one_plain_ed25519_line_is_refused(line):
    assert public_key_problem(line) is not None


def test_the_trust_lists_each_host_with_its_own_host_key_and_admits_every_client_key(tmp_path):
    one, _ = generated(tmp_path, "one")
    two, layout = generated(tmp_path, "two")
    trust = trust_of({"algo-2": two, "algo-1": one})
    assert trust.known_hosts.splitlines() == [
        f"algo-1 {' '.join(one.host.split()[:2])}",
        f"algo-2 {' '.join(two.host.split()[:2])}",
    ]
    assert trust.authorized_keys.splitlines() == [one.client, two.client]
    layout.authorized_keys.write_text("ssh-ed25519 AAAAother someone-else\n")
    write_trust(trust, layout, {"LD_PRELOAD": "/lib/members.so", "SAGETRAIN_RUN_DIR": "/run/job"})
    assert layout.authorized_keys.read_text() == trust.authorized_keys
    assert layout.known_hosts.read_text() == trust.known_hosts
    drop_in = layout.sshd_config.read_text().splitlines()
    assert f"HostKey {layout.host_key}" in drop_in
    assert "PasswordAuthentication no" in drop_in
    assert f"AuthorizedKeysFile {layout.authorized_keys}" in drop_in
    assert "DisableForwarding yes" in drop_in
    # Every session (orted, the ranks it starts) preloads the members-only library.
    assert 'SetEnv "LD_PRELOAD=/lib/members.so" "SAGETRAIN_RUN_DIR=/run/job"' in drop_in
    for private in (layout.authorized_keys, layout.known_hosts):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600


def exchange(host: str, membership: Membership, port: int) -> KeyExchange:
    # The master's name must resolve here: the loopback address is the master, "localhost" the worker.
    hosts = ("127.0.0.1", "localhost")
    return KeyExchange(hosts, "127.0.0.1", host, port, membership, Deadline(20, "the other host"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_hosts_exchange_their_keys_through_the_coordinator_and_trust_the_same_set(tmp_path):
    port, job = free_port(), Membership(b"j" * 32)
    master_keys, _ = generated(tmp_path, "master")
    worker_keys, _ = generated(tmp_path, "worker")
    with ThreadPoolExecutor(2) as pool:
        on_master = pool.submit(exchange_keys, exchange("127.0.0.1", job, port), master_keys)
        on_worker = pool.submit(exchange_keys, exchange("localhost", job, port), worker_keys)
        trusts = on_master.result(30), on_worker.result(30)
    # With the keys, the address each host proved membership from: loopback's, here.
    expected = trust_of({"127.0.0.1": master_keys, "localhost": worker_keys}, ("127.0.0.1",))
    assert trusts[0] == trusts[1] == expected


def test_a_worker_without_the_jobs_key_gets_no_keys_and_the_master_trusts_none_of_its(tmp_path):
    port = free_port()
    master_keys, _ = generated(tmp_path, "master")
    rogue_keys, _ = generated(tmp_path, "rogue")
    master_exchange = dataclasses.replace(exchange("127.0.0.1", Membership(b"j" * 32), port))
    master_exchange = dataclasses.replace(master_exchange, deadline=Deadline(3, "the worker"))
    with ThreadPoolExecutor(2) as pool:
        on_master = pool.submit(exchange_keys, master_exchange, master_keys)
        on_rogue = pool.submit(exchange_keys, exchange("localhost", Membership(b"r" * 32), port), rogue_keys)
        with pytest.raises(PlatformError, match="did not accept this host's proof of membership"):
            on_rogue.result(30)
        # It came from the address its name (localhost) resolves to: the master takes it for that host
        # given another secret and fails at once saying so, instead of waiting out its wait.
        with pytest.raises(UserError, match=r"host localhost \(127\.0\.0\.1\) refused this host's proof"):
            on_master.result(30)


def prepared(root: Path, environ: dict) -> SshFiles:
    layout = SshFiles.system(root / "etc-ssh", root / "root-ssh")
    prepare_for_mpi_driver({"SAGEMAKER_BASE_DIR": str(root), **environ}, layout)
    return layout


def test_on_one_host_the_driver_gets_its_own_random_keys_and_no_warning(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("sagetrain.sdk.ssh.PRIVILEGE_SEPARATION_DIR", tmp_path / "run-sshd")
    root = tmp_path / "a"
    JobFiles(("algo-1",), {"epochs": 2}, channels=(Channel("code"), Channel("sm_drivers"))).write(
        root, "algo-1"
    )
    first = prepared(root, {})
    host_key = first.host_key.read_bytes()
    assert first.authorized_keys.read_text() == first.client_key.with_suffix(".pub").read_text()
    assert first.known_hosts.read_text().startswith("algo-1 ssh-ed25519 ")
    assert prepared(root, {}).host_key.read_bytes() != host_key  # made anew for each job
    assert "WARNING" not in capsys.readouterr().err


def test_the_mpi_driver_is_prepared_once_though_its_interpreter_runs_the_hook_twice(tmp_path, monkeypatch):
    """Debian's Python runs a virtualenv's .pth files twice at start: the second call in the driver's
    interpreter (and its own Python processes, which inherit its environment) exchange no keys again."""
    prepared_in: list[str] = []
    monkeypatch.setattr(
        "sagetrain.sdk.ssh.prepare_for_mpi_driver", lambda environ: prepared_in.append(environ["PATH"])
    )
    driver = [str(tmp_path / "input/data/sm_drivers/distributed_drivers/mpi_driver.py")]
    environ = {
        "SAGEMAKER_BASE_DIR": str(tmp_path),
        contracts.RUN_DIR_VAR: str(tmp_path / "run"),
        "PATH": "/usr/bin",
    }
    at_interpreter_start(driver, environ, ["python3", *driver])
    path_after_first = environ["PATH"]
    at_interpreter_start(driver, environ, ["python3", *driver])
    assert prepared_in == ["/usr/bin"]
    assert environ["PATH"] == path_after_first  # our mpirun put first once
    assert environ[HANDED_OVER_VAR] == "mpi"


def test_the_driver_environment_loses_our_settings_and_the_secret_and_keeps_the_rest():
    hyperparameters = {"epochs": 2, "sagetrain_job_secret": "s3cr3t'\"x", "sagetrain_legacy_keras": True}
    environ = {
        "SM_HPS": json.dumps(hyperparameters),
        "SM_HP_EPOCHS": "2",
        "SM_HP_SAGETRAIN_JOB_SECRET": "s3cr3t'\"x",
        "SM_HP_SAGETRAIN_LEGACY_KERAS": "true",
        "SM_TRAINING_ENV": json.dumps({"hyperparameters": hyperparameters, "current_host": "algo-1"}),
        SECRET_VAR: "another",
        "PATH": "/usr/bin",
    }
    kept = dict(environ)
    withhold_our_settings(kept, secret_too=False)
    assert kept[SECRET_VAR] == "another"
    withhold_our_settings(environ, secret_too=True)
    assert json.loads(environ["SM_HPS"]) == {"epochs": 2}
    assert json.loads(environ["SM_TRAINING_ENV"]) == {
        "hyperparameters": {"epochs": 2},
        "current_host": "algo-1",
    }
    assert {name for name in environ if name.startswith("SM_HP_")} == {"SM_HP_EPOCHS"}
    assert SECRET_VAR not in environ and environ["PATH"] == "/usr/bin"
    assert "s3cr3t" not in json.dumps(environ) and "another" not in json.dumps(environ)


def mpi_rank(size: int, local_size: int, hosts: int, **extra: str) -> dict[str, str]:
    return {
        DISTRIBUTED_CONFIG_VAR: '{"process_count_per_node": 2}',
        HOST_COUNT_VAR: str(hosts),
        contracts.MPI_SIZE_VAR: str(size),
        contracts.MPI_LOCAL_SIZE_VAR: str(local_size),
        **extra,
    }


def test_a_rank_of_the_sdk_mpi_driver_that_sees_every_rank_on_its_host_of_several_says_what_to_do():
    cause = crowded_mpi_ranks(mpi_rank(size=2, local_size=2, hosts=2))
    assert cause is not None
    assert cause.startswith("the SageMaker SDK's MPI driver started all 2 ranks on one of the job's 2 hosts")
    assert "sagemaker_mpi_num_of_processes_per_host" in cause and "ppr:" in cause


@pytest.mark.parametrize(
    "environ",
    [
        mpi_rank(size=4, local_size=2, hosts=2),  # spread over the hosts
        mpi_rank(size=2, local_size=2, hosts=1),  # one host: nowhere else to go
        mpi_rank(size=2, local_size=2, hosts=2, SAGETRAIN_RANK="0"),  # our launcher's rank
        {k: v for k, v in mpi_rank(size=2, local_size=2, hosts=2).items() if k != DISTRIBUTED_CONFIG_VAR},
        {DISTRIBUTED_CONFIG_VAR: "{}", HOST_COUNT_VAR: "2"},  # not an MPI rank
    ],
)
def test_other_processes_are_not_crowded_ranks(environ):
    assert crowded_mpi_ranks(environ) is None


COMMAND = {"source_dir": "/home/me/src", "entry_script": None, "command": "python train.py --epochs 2"}
SDK_SHELL = {SOURCE_DIR_VAR: "/opt/ml/input/data/code"}  # what sm_train.sh's environment has


@pytest.mark.parametrize(
    ("hyperparameters", "environ", "asked"),
    [
        ({"sagemaker_mpi_enabled": True}, {}, "sagemaker_mpi_enabled"),
        (
            {"sagemaker_multi_worker_mirrored_strategy_enabled": "true"},
            {},
            "sagemaker_multi_worker_mirrored_strategy_enabled",
        ),
        ({}, {DISTRIBUTED_CONFIG_VAR: '{"process_count_per_node": 2}'}, "distributed="),
    ],
)
def test_a_command_in_a_job_asking_for_a_distribution_is_refused_naming_what_asked(
    tmp_path, hyperparameters, environ, asked
):
    config = load_job_config(write_job(tmp_path, "algo-1", hyperparameters, COMMAND))
    refusal = command_refusal(read_source_code(config.paths), config.settings, environ)
    assert refusal is not None
    assert refusal.startswith("SourceCode(command=...) runs its command once on each host")
    assert f"({asked})" in refusal and "entry_script=" in refusal


@pytest.mark.parametrize(
    ("source_code", "hyperparameters"),
    [(COMMAND, {"epochs": 2}), (SOURCE_CODE, {"sagemaker_mpi_enabled": True})],
)
def test_a_command_asking_for_no_distribution_and_an_entry_script_are_not_refused(
    tmp_path, source_code, hyperparameters
):
    config = load_job_config(write_job(tmp_path, "algo-1", hyperparameters, source_code))
    assert command_refusal(read_source_code(config.paths), config.settings, {}) is None


def test_a_command_on_several_hosts_is_warned_about_and_on_one_host_not(tmp_path):
    source = read_source_code(load_job_config(write_job(tmp_path, "algo-1", {}, COMMAND)).paths)
    warning = command_warning(source, 2)
    assert warning is not None and "once on each of the job's 2 hosts" in warning
    assert command_warning(source, 1) is None
    entry_script = read_source_code(load_job_config(write_job(tmp_path, "algo-1", {}, SOURCE_CODE)).paths)
    assert command_warning(entry_script, 2) is None


@pytest.mark.parametrize(
    ("argv", "orig_argv", "environ", "expected"),
    [
        (["train.py", "-e"], ["python", "train.py", "-e"], SDK_SHELL, True),
        (["-c"], ["python", "-c", "import a"], SDK_SHELL, True),
        (["-m"], ["python", "-m", "mypackage.train"], SDK_SHELL, True),
        (["train.py"], ["python", "train.py"], {}, False),  # not under the SDK's sm_train.sh
        (["train.py"], ["python", "train.py"], {**SDK_SHELL, contracts.RANK_VAR: "0"}, False),  # our rank
        (["train.py"], ["python", "train.py"], {**SDK_SHELL, HANDED_OVER_VAR: "command"}, False),
        (["-m", "train"], ["python", "-m", "sagetrain", "train"], SDK_SHELL, False),  # our launcher
        (
            ["/opt/ml/input/data/sm_drivers/scripts/install_requirements.py", "requirements.txt"],
            ["python3", "/opt/ml/input/data/sm_drivers/scripts/install_requirements.py", "requirements.txt"],
            SDK_SHELL,
            False,
        ),
    ],
)
def test_which_interpreter_may_be_the_sdk_command(argv, orig_argv, environ, expected):
    assert may_run_sdk_command(argv, orig_argv, environ) is expected


def command_environ(root: Path) -> dict[str, str]:
    return {"SAGEMAKER_BASE_DIR": str(root), **SDK_SHELL}


def test_the_hook_warns_once_about_a_command_on_several_hosts(tmp_path, capsys):
    environ = command_environ(write_job(tmp_path, "algo-1", {"epochs": 2}, COMMAND))
    at_interpreter_start(["train.py"], environ, ["python", "train.py"])
    assert "sagetrain: SourceCode(command=...) runs its command once on each of" in capsys.readouterr().err
    assert environ[HANDED_OVER_VAR] == "command"
    at_interpreter_start(["train.py"], environ, ["python", "train.py"])  # the command's next Python
    assert capsys.readouterr().err == ""


def test_the_hook_refuses_a_command_asking_for_mpi_with_one_sentence_and_exit_1(tmp_path):
    root = write_job(tmp_path, "algo-1", {"sagemaker_mpi_enabled": True}, COMMAND)
    source = Path(__file__).resolve().parents[2] / "container" / "src"
    hook = "import os; from sagetrain.sdk import v3; v3.at_interpreter_start(['train.py'], os.environ)"
    completed = subprocess.run(
        [sys.executable, "-c", f"{hook}; print('the command ran')"],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(source), **command_environ(root)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    failure = (root / "output" / "failure").read_text()
    assert completed.returncode == 1, completed.stderr
    assert "the command ran" not in completed.stdout
    assert failure.startswith("SourceCode(command=...) runs its command once on each host")
    assert failure.count("\n") == 1
    assert completed.stderr.strip() == f"sagetrain: {failure.strip()}"


def test_a_failure_the_hook_writes_masks_the_jobs_secrets(tmp_path):
    secret, nested, env_secret = "it's a secret", "nested'pw", "env-secret$"
    root = write_job(tmp_path, "algo-1", {"api_token": secret, "db": {"password": nested}}, COMMAND)
    source = Path(__file__).resolve().parents[2] / "container" / "src"
    cause = f"cannot prepare: {ValueError(secret, nested, env_secret)!r} {[secret]}"
    hook = f"import os; from sagetrain.sdk import v3; v3.fail_at_once({cause!r}, 2, os.environ)"
    completed = subprocess.run(
        [sys.executable, "-c", hook],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(source), "DB_PASSWORD": env_secret,
             **command_environ(root)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    failure = (root / "output" / "failure").read_text()
    assert completed.returncode == 2, completed.stderr
    assert failure == 'cannot prepare: ValueError("***", "***", \'***\') ["***"]\n'
    assert completed.stderr == f"sagetrain: {failure}"


def test_the_own_python_of_an_entry_script_job_is_left_alone(tmp_path):
    """E.g. the pip that installs SourceCode(requirements=...): no command, nothing decided or marked."""
    environ = command_environ(write_job(tmp_path, "algo-1", {"sagemaker_mpi_enabled": True}, SOURCE_CODE))
    before = dict(environ)
    at_interpreter_start(["-m", "pip"], environ, ["python", "-m", "pip", "install", "-r", "requirements.txt"])
    assert environ == before


def test_a_command_job_our_launcher_could_not_read_still_runs_its_command(tmp_path, capsys):
    """Our rules for hyperparameters (an unknown sagetrain_* key) are the launcher's, not the command's."""
    environ = command_environ(write_job(tmp_path, "algo-1", {"sagetrain_no_such_setting": 1}, COMMAND))
    at_interpreter_start(["train.py"], environ, ["python", "train.py"])
    assert not (tmp_path / "output" / "failure").exists()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("argv", "orig_argv", "environ"),
    [
        ([f"{DRIVERS}/basic_script_driver.py"], [], {}),
        ([f"{DRIVERS}/../distributed_drivers/mpi_driver.py"], [], {}),
        (["train.py"], ["python", "train.py"], mpi_rank(size=2, local_size=2, hosts=2)),
        (["train.py"], ["python", "train.py"], SDK_SHELL),
        (["-c"], ["python", "-c", "pass"], SDK_SHELL),
    ],
)
def test_every_driver_path_shows_a_sign_the_interpreter_start_hook_looks_for(argv, orig_argv, environ):
    """The hook imports the registry only where one of these signs is: every path it holds has one."""
    assert any(driver.entry.recognises(argv, orig_argv, environ) for driver in SdkDriver)
    assert may_be_sdk_process(argv, environ)


@pytest.mark.parametrize(
    ("argv", "environ"),
    [(["/opt/ml/code/train.py"], {}), (["-c"], {contracts.RANK_VAR: "0"}), ([], {"PATH": "/usr/bin"})],
)
def test_an_ordinary_interpreter_shows_no_sign_of_the_sdk(argv, environ):
    assert not may_be_sdk_process(argv, environ)
    assert not any(driver.entry.recognises(argv, argv, environ) for driver in SdkDriver)


def test_the_image_hooks_import_nothing_more_in_an_ordinary_interpreter():
    """What the image's two .pth lines do in every Python process: with the legacy-Keras switch off and no
    sign of the SDK, they load the package's few name-only modules and nothing of the standard library
    (typing, dataclasses, json, importlib.abc... each costs every process milliseconds)."""
    source = Path(__file__).resolve().parents[2] / "container" / "src"
    hooks = (  # site has loaded os and sys before it reads a .pth file
        "import os, sys; before = set(sys.modules); import sagetrain.legacy_keras, sagetrain.sdk; "
        "sagetrain.legacy_keras.install_if_requested(os.environ, sys.meta_path); "
        "sagetrain.sdk.at_interpreter_start(sys.argv, os.environ, sys.orig_argv); "
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    completed = subprocess.run(
        [sys.executable, "-S", "-c", hooks],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(source)},
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    loaded = set(completed.stdout.split())
    ours = {
        "sagetrain",
        "sagetrain.legacy_keras",
        "sagetrain.sdk",
        "sagetrain.config",
        "sagetrain.config.sdk_names",
    }
    assert loaded - {"__future__"} == ours
