"""The bad-input matrix: configuration files, hyperparameters, channels, user code and cluster shape
gone wrong. Every case must end with exit != 0 on every host, a failure file on every host whose first
line is one clear sentence (not empty, not a traceback) — on the host that has the bad input, naming
what is wrong — and no container or network left behind. Every host must end on its own: the runner
gives the others END_GRACE_S after the first exit, then stops them as the SDK does, which fails the
case (multi-host cases wait for a missing master or worker for 15 s, sagetrain_worker_wait_seconds).

Each case writes correct host trees with the runner (--write-only), breaks one thing, and runs the trees
as they are (--from-workdir). Most cases run on one host and fail before TensorFlow is imported. The
table of cases, with what each expects, is bad_input_cases.md next to this file.
"""

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cluster import CASES, exited_on_their_own, run_workdir, write_regression_csv, write_trees

pytestmark = [pytest.mark.container, pytest.mark.timeout(240)]

BAD = CASES / "bad_input"
TABLE = Path(__file__).with_name("bad_input_cases.md")


# -- edits to a written tree ----------------------------------------------------------------------------


def config(tree: Path, name: str) -> Path:
    return tree / "input" / "config" / name


def edit_json(name: str, change: Callable[[dict], object], hosts: tuple[str, ...] = ("algo-1",)):
    def apply(workdir: Path) -> None:
        for host in hosts:
            path = config(workdir / host, name)
            value = json.loads(path.read_text())
            change(value)  # edits in place
            path.write_text(json.dumps(value))

    return apply


def write_text(relative: str, text: str, hosts: tuple[str, ...] = ("algo-1",)):
    def apply(workdir: Path) -> None:
        for host in hosts:
            path = workdir / host / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)

    return apply


def remove(relative: str):
    def apply(workdir: Path) -> None:
        (workdir / "algo-1" / relative).unlink()

    return apply


def set_hyperparameters(**values: object):
    """Hyperparameters as SageMaker writes them: each value a JSON-encoded string."""

    def change(hps: dict) -> None:
        hps.update({key: json.dumps(value) for key, value in values.items()})

    return edit_json("hyperparameters.json", change)


def each(*edits: Callable[[Path], None]):
    def apply(workdir: Path) -> None:
        for edit in edits:
            edit(workdir)

    return apply


def raw_member(name: str, key: str, json_text: str):
    """Add ``"key": json_text`` to a configuration file as written: JSON this test's Python could not
    write itself (a number longer than it converts to text)."""

    def apply(workdir: Path) -> None:
        path = config(workdir / "algo-1", name)
        text = path.read_text().strip()
        body = text[1:-1].strip()
        path.write_text("{" + body + (", " if body else "") + json.dumps(key) + ": " + json_text + "}")

    return apply


def drop_hyperparameter(key: str):
    return edit_json("hyperparameters.json", lambda hps: hps.pop(key))


def resource_field(key: str, value: object):
    return edit_json("resourceconfig.json", lambda config: config.update({key: value}))


def channel_config(name: str, **fields: str):
    return edit_json("inputdataconfig.json", lambda channels: channels.setdefault(name, {}).update(fields))


def csv_channel(text: str, name: str = "train", file: str = "train.csv"):
    return write_text(f"input/data/{name}/{file}", text)


@dataclass(frozen=True)
class Case:
    id: str
    category: str
    edit: Callable[[Path], None]
    expect: tuple[str, ...]  # words the failure sentence must contain (case-insensitive)
    program: str = "train.py"
    hosts: int = 1
    hyperparameters: dict = field(default_factory=dict)
    with_train_channel: bool = False
    bad_host: str = "algo-1"


MODULE = {"epochs": 1, "batch_size": 4, "label_column": "label"}
TWO_HOSTS = {"sagemaker_mpi_enabled": True, "sagetrain_worker_wait_seconds": 15}

RC, HP, IDC = "resourceconfig.json", "hyperparameters.json", "inputdataconfig.json"
DEEP = "[" * 100_000 + "]" * 100_000
LONG_NUMBER = "9" * 5_000  # more digits than Python converts (4,300)
END_GRACE_S = 60


def unchanged(workdir: Path) -> None:
    """The case's hyperparameters or program are the bad input; the tree stays as written."""


CASES_TABLE = [
    # configuration files
    Case("resourceconfig-missing", "config", remove(f"input/config/{RC}"), (RC,)),
    Case("resourceconfig-garbled", "config", write_text(f"input/config/{RC}", '{"hosts": ["algo-1"'), (RC,)),
    Case("resourceconfig-no-current-host", "config", edit_json(RC, lambda c: c.pop("current_host")),
         ("current_host",)),
    Case("current-host-not-in-hosts", "config", resource_field("current_host", "algo-9"), ("algo-9",)),
    Case("hosts-empty", "config", resource_field("hosts", []), ("hosts",)),
    Case("hosts-not-a-list", "config", resource_field("hosts", "algo-1"), ("hosts",)),
    Case("hosts-duplicated", "config", resource_field("hosts", ["algo-1", "algo-1"]), ("algo-1",)),
    Case("hyperparameters-garbled", "config", write_text(f"input/config/{HP}", "{epochs: 3}"), (HP,)),
    Case("hyperparameters-not-an-object", "config", write_text(f"input/config/{HP}", "[1, 2]"), (HP,)),
    Case("inputdataconfig-garbled", "config", write_text(f"input/config/{IDC}", "{"), (IDC,)),
    Case("config-nested-too-deeply", "config",
         write_text(f"input/config/{HP}", '{"sagemaker_program": "\\"train.py\\"", "x": ' + DEEP + "}"),
         (HP, "too deeply")),
    Case("host-name-with-newline", "config", resource_field("hosts", ["algo-1", "algo-2\nx"]),
         ("hosts", "not a host name")),
    Case("resourceconfig-long-number", "config", raw_member(RC, "x", LONG_NUMBER),
         (RC, "'x'", "5,000 digits")),
    Case("inputdataconfig-long-number", "config", raw_member(IDC, "x", LONG_NUMBER),
         (IDC, "'x'", "5,000 digits")),
    Case("hyperparameters-long-number", "config", raw_member(HP, "epochs", LONG_NUMBER),
         (HP, "'epochs'", "5,000 digits")),
    # hyperparameters
    Case("program-missing", "hyperparameters", drop_hyperparameter("sagemaker_program"),
         ("sagemaker_program",)),
    Case("processes-per-host-not-int", "hyperparameters",
         set_hyperparameters(sagemaker_mpi_enabled=True, sagemaker_mpi_num_of_processes_per_host="two"),
         ("sagemaker_mpi_num_of_processes_per_host",)),
    Case("processes-per-host-a-billion", "hyperparameters",
         set_hyperparameters(
             sagemaker_mpi_enabled=True, sagemaker_mpi_num_of_processes_per_host=1_000_000_000
         ),
         ("sagemaker_mpi_num_of_processes_per_host", "1000000000", "8 processes")),
    Case("processes-per-host-zero", "hyperparameters",
         set_hyperparameters(sagemaker_mpi_enabled=True, sagemaker_mpi_num_of_processes_per_host=0),
         ("sagemaker_mpi_num_of_processes_per_host",)),
    Case("mpi-enabled-not-bool", "hyperparameters", set_hyperparameters(sagemaker_mpi_enabled="maybe"),
         ("sagemaker_mpi_enabled",)),
    Case("smddp-requested", "hyperparameters",
         set_hyperparameters(sagemaker_distributed_dataparallel_enabled=True), ("SMDDP", "Horovod")),
    Case("two-engines", "hyperparameters",
         set_hyperparameters(
             sagemaker_mpi_enabled=True, sagemaker_multi_worker_mirrored_strategy_enabled=True
         ),
         ("sagemaker_mpi_enabled", "sagemaker_multi_worker_mirrored_strategy_enabled")),
    Case("hyperparameter-lone-surrogate", "hyperparameters", set_hyperparameters(note="\ud800"),
         ("note", "not valid Unicode")),
    Case("hyperparameter-nul-in-name", "hyperparameters",
         edit_json(HP, lambda hps: hps.update({"a\x00b": '"1"'})), (HP, "NUL")),
    Case("hyperparameter-equals-in-name", "hyperparameters",
         edit_json(HP, lambda hps: hps.update({"a=b": '"1"'})), ("a=b",)),
    Case("unknown-sagetrain-setting", "hyperparameters", set_hyperparameters(sagetrain_worker_wait_secs=5),
         ("sagetrain_worker_wait_secs", "did you mean sagetrain_worker_wait_seconds?")),
    Case("worker-wait-negative", "hyperparameters", set_hyperparameters(sagetrain_worker_wait_seconds=-5),
         ("sagetrain_worker_wait_seconds",)),
    Case("port-out-of-range", "hyperparameters", set_hyperparameters(sagetrain_coordinator_port=70000),
         ("sagetrain_coordinator_port",)),
    Case("unknown-instance-group", "hyperparameters",
         set_hyperparameters(sagemaker_distribution_instance_groups=["gpu-group"]), ("gpu-group",)),
    Case("too-many-mpi-processes", "hyperparameters",
         set_hyperparameters(sagemaker_mpi_enabled=True, sagemaker_mpi_num_processes=4),
         ("sagemaker_mpi_num_processes",)),
    Case("custom-mpi-options-unbalanced-quote", "hyperparameters",
         set_hyperparameters(sagemaker_mpi_enabled=True, sagemaker_mpi_custom_mpi_options='-x FOO="bar'),
         ("sagemaker_mpi_custom_mpi_options", 'FOO="bar')),
    Case("custom-mpi-options-set-np", "hyperparameters",
         set_hyperparameters(sagemaker_mpi_enabled=True, sagemaker_mpi_custom_mpi_options="-np 1"),
         ("sagemaker_mpi_custom_mpi_options", "-np")),
    # channels
    Case("channel-name-with-equals", "channels", channel_config("a=b", TrainingInputMode="File"), ("a=b",)),
    Case("channel-folder-missing", "channels", channel_config("extra", TrainingInputMode="File"), ("extra",)),
    Case("module-without-train-channel", "channels", unchanged, ("train",), program="model.py",
         hyperparameters=MODULE),
    Case("channel-zero-records", "channels", csv_channel("a,b,c,d,label\n"), ("train",), program="model.py",
         hyperparameters=MODULE, with_train_channel=True),
    Case("label-column-absent", "channels", unchanged, ("target",), program="model.py",
         hyperparameters={**MODULE, "label_column": "target"}, with_train_channel=True),
    Case("channel-mixed-formats", "channels", write_text("input/data/train/more.npz", "not really npz"),
         ("train",), program="model.py", hyperparameters=MODULE, with_train_channel=True),
    # user code
    Case("program-file-absent", "code", set_hyperparameters(sagemaker_program="nope.py"), ("nope.py",)),
    Case("script-exits-3", "code", unchanged, ("exits3.py", "exited with code 3"), program="exits3.py"),
    Case("script-syntax-error", "code",
         each(write_text("code/syntax_error.py", "def broken(:\n    pass\n"),
              set_hyperparameters(sagemaker_program="syntax_error.py")),
         ("syntax_error.py",)),
    Case("submit-directory-missing", "code",
         set_hyperparameters(sagemaker_submit_directory="/opt/ml/nowhere.tar.gz"),
         ("/opt/ml/nowhere.tar.gz",)),
    Case("build-model-raises", "code", unchanged, ("build_model",), program="module_raises.py",
         hyperparameters=MODULE, with_train_channel=True),
    Case("build-model-not-a-model", "code", unchanged, ("build_model",), program="module_not_model.py",
         hyperparameters=MODULE, with_train_channel=True),
    # cluster shape
    Case("host-in-config-never-exists", "cluster",
         edit_json(RC, lambda c: c.update(hosts=["algo-1", "algo-2", "algo-3"]), hosts=("algo-1", "algo-2")),
         ("algo-3",), hosts=2, hyperparameters=TWO_HOSTS),
    Case("worker-config-garbled", "cluster", write_text(f"input/config/{RC}", "{", hosts=("algo-2",)),
         (RC,), hosts=2, hyperparameters=TWO_HOSTS, bad_host="algo-2"),
    Case("hosts-disagree", "cluster",
         edit_json(RC, lambda c: c.update(hosts=["algo-2", "algo-1"]), hosts=("algo-2",)),
         ("algo-2",), hosts=2, hyperparameters=TWO_HOSTS),
    Case("hosts-disagree-same-master", "cluster",
         edit_json(RC, lambda c: c.update(hosts=["algo-1", "algo-2", "algo-9"]), hosts=("algo-2",)),
         ("algo-1, algo-2, algo-9", "same \"hosts\" list"), hosts=2, hyperparameters=TWO_HOSTS),
]  # fmt: skip


def assert_one_clear_sentence(line: str | None, expect: tuple[str, ...], where: str) -> None:
    assert line, f"{where}: no failure file or an empty first line"
    assert not line.startswith(("Traceback", "Framework Error")), f"{where}: {line!r}"
    assert len(line) <= 400, f"{where}: the first line is not one sentence: {line!r}"
    for word in expect:
        assert word.lower() in line.lower(), f"{where}: {word!r} not in {line!r}"


@pytest.mark.parametrize("case", CASES_TABLE, ids=[case.id for case in CASES_TABLE])
def test_bad_input_fails_clearly_on_every_host(tmp_path, cpu_image, case):
    channels = {}
    if case.with_train_channel:
        channels["train"] = write_regression_csv(tmp_path / "data", rows=16)
    hps = {**case.hyperparameters}
    workdir = write_trees(
        tmp_path, cpu_image, case.hosts, BAD, program=case.program, hyperparameters=hps, channels=channels
    )
    case.edit(workdir)
    result = run_workdir(
        tmp_path, cpu_image, workdir, name=case.id, timeout=180, extra=["--grace", str(END_GRACE_S)]
    )
    assert result.exit_code != 0, result.describe()
    codes = result.exit_codes()
    assert all(code not in (0, None) for code in codes.values()), result.describe()
    assert all(exited_on_their_own(result).values()), f"a host had to be stopped\n{result.describe()}"
    lines = {host: result.failure_line(host) for host in result.hosts}
    print(f"{case.id}: exit codes {codes}; failures: {lines}")
    assert sorted(lines) == [f"algo-{index}" for index in range(1, case.hosts + 1)], result.describe()
    # Every host says why it failed; the host with the bad input names what is wrong.
    for host, line in lines.items():
        expect = case.expect if host == case.bad_host else ()
        assert_one_clear_sentence(line, expect, f"{case.id} on {host}\n{result.describe()}")


def test_the_case_table_lists_every_case():
    listed = re.findall(r"^\| `([a-z0-9-]+)` \|", TABLE.read_text(), flags=re.MULTILINE)
    assert listed == [case.id for case in CASES_TABLE]
    assert len(listed) >= 25
