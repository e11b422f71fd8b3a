"""Reading what a rank printed for its failure report: the last exception, its cause behind Keras' and
TensorFlow's wrappers, terminal codes and TensorFlow's start-up lines left out; and the rank launcher's
copy of the output (tags, TensorFlow's shutdown records held back)."""

import io
import os
import subprocess
import sys
import threading

import pytest
from sagetrain.contracts import TF_LOG_LEVEL_VAR, RankPlace, tf_info_records_off
from sagetrain.launch.rank_output import LAST_LINES, RankOutput, ending_with_last_error, rank_tag
from sagetrain.report.program_output import ShutdownNoise, is_noise, last_exception, plain

# What the image's TensorFlow and Keras 3.15.1 printed for a Dense layer given the wrong input width
# (Keras colours its cause bold).
KERAS_SHAPE_ERROR = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795747046.018875      21 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to "
    "use available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with the "
    "appropriate compiler flags.",
    "Traceback (most recent call last):",
    '  File "/opt/ml/code/train.py", line 6, in <module>',
    "    model.fit(x, y, epochs=1, verbose=2)",
    '  File "/opt/venv/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 122, in '
    "error_handler",
    "    raise e.with_traceback(filtered_tb) from None",
    "ValueError: Exception encountered when calling Sequential.call().",
    "",
    "\x1b[1mInput 0 with name 'None' of layer 'dense' is incompatible with the layer: expected axis -1 of "
    "input shape to have value 4, but received input with shape (None, 3)\x1b[0m",
    "",
    "Arguments received by Sequential.call():",
    "  • inputs=tf.Tensor(shape=(None, 3), dtype=float32)",
    "  • training=True",
]

# A failed graph op: the cause follows the stack of where the op was defined.
GRAPH_ERROR = [
    "Traceback (most recent call last):",
    '  File "/c/graph.py", line 4, in <module>',
    "tensorflow.python.framework.errors_impl.InvalidArgumentError: Graph execution error:",
    "",
    "Detected at node compile_loss/SparseSoftmaxCrossEntropyWithLogits defined at (most recent call last):",
    '  File "/c/graph.py", line 4, in <module>',
    "",
    '  File "/opt/venv/lib/python3.11/site-packages/keras/src/backend/tensorflow/nn.py", line 1438, in '
    "sparse_categorical_crossentropy",
    "",
    "Received a label value of 7 which is outside the valid range of [0, 3).  Label values: 7 7 7 7",
    "\t [[{{node compile_loss/SparseSoftmaxCrossEntropyWithLogits}}]] [Op:__inference_multi_step_536]",
]

CHAINED = [
    "Traceback (most recent call last):",
    '  File "/c/chain.py", line 3, in <module>',
    "json.decoder.JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2",
    "",
    "The above exception was the direct cause of the following exception:",
    "",
    "Traceback (most recent call last):",
    '  File "/c/chain.py", line 5, in <module>',
    '    raise RuntimeError("could not read config.json:\\n  line two of the message") from e',
    "RuntimeError: could not read config.json:",
    "  line two of the message",
]


def test_a_keras_error_is_its_cause_without_terminal_codes_or_tensorflow_lines():
    raised = last_exception([plain(line) for line in KERAS_SHAPE_ERROR])
    assert raised is not None
    assert raised.sentence == (
        "ValueError: Input 0 with name 'None' of layer 'dense' is incompatible with the layer: expected axis "
        "-1 of input shape to have value 4, but received input with shape (None, 3)"
    )
    assert raised.traceback.startswith('Traceback (most recent call last):\n  File "/opt/ml/code/train.py"')
    assert "\x1b" not in raised.traceback and "cpu_feature_guard" not in raised.traceback


def test_a_failed_graph_op_is_the_message_after_where_it_was_defined():
    raised = last_exception(GRAPH_ERROR)
    assert raised is not None
    assert raised.sentence == (
        "InvalidArgumentError: Received a label value of 7 which is outside the valid range of [0, 3). "
        "Label values: 7 7 7 7"
    )


def test_the_last_of_chained_exceptions_is_the_one_named_with_its_whole_message():
    raised = last_exception(CHAINED)
    assert raised is not None
    assert raised.sentence == "RuntimeError: could not read config.json: line two of the message"
    assert raised.traceback.startswith('Traceback (most recent call last):\n  File "/c/chain.py", line 5')


def test_an_exception_without_a_message_is_its_type():
    raised = last_exception(
        ["Traceback (most recent call last):", '  File "t.py", line 1', "KeyboardInterrupt"]
    )
    assert raised is not None and raised.sentence == "KeyboardInterrupt"


@pytest.mark.parametrize(
    "lines",
    [
        [],
        ["copying files", "cp: disk full"],
        ["Traceback (most recent call last):", '  File "t.py", line 1'],  # cut off before the exception
        ["Traceback (most recent call last):", '  File "t.py", line 1', "not an exception line!"],
    ],
)
def test_output_without_a_whole_traceback_has_no_exception(lines):
    assert last_exception(lines) is None


def test_records_after_the_exception_are_not_part_of_its_message():
    lines = [
        *CHAINED[6:],
        "E0000 00:00:1795747093.3 19 coordination_service_agent.cc:300] Coordination agent shut down",
    ]
    raised = last_exception(lines)
    assert raised is not None and raised.sentence.endswith("line two of the message")


def test_terminal_codes_and_redrawn_progress_bars_read_as_a_terminal_shows_them():
    assert plain("\x1b[1m\x1b[31mred bold\x1b[0m\n") == "red bold"
    assert plain(" 1/10 [==>....]\r 5/10 [=====>..]\r10/10 [==========] loss: 0.1\r\n") == (
        "10/10 [==========] loss: 0.1"
    )
    assert plain("\x1b]0;title\x07text") == "text"


@pytest.mark.parametrize(
    ("line", "noise"),
    [
        (KERAS_SHAPE_ERROR[0], True),
        (KERAS_SHAPE_ERROR[1], True),
        (KERAS_SHAPE_ERROR[2], True),
        ("I0000 00:00:1795747093.280214      33 coordination_service.cc:502] Waiting for 1/2 tasks", True),
        ("   ", True),
        (
            "W0000 00:00:1795747093.946413      19 dataset.cc:997] Input of GeneratorDatasetOp will not be",
            False,
        ),
        ("epoch=1 loss=0.5", False),
        ("ValueError: bad", False),
    ],
)
def test_tensorflow_start_up_lines_and_info_records_are_noise_warnings_are_not(line, noise):
    assert is_noise(line) is noise


def test_a_shutdown_record_and_its_grpc_detail_are_held_but_not_what_follows():
    lines = [
        "epoch=3 loss=0.1",
        "E0000 00:00:1685013057.934361 12 base_collective_executor.cc:249] "
        "BaseCollectiveExecutor::StartAbort UNAVAILABLE: The following tasks have crashed",
        "Additional GRPC error information from remote target /job:worker/replica:0/task:0 while calling "
        "/tensorflow.CoordinationService/PollForError:",
        ':{"created":"@1685013057.934031384","description":"Error received from peer","grpc_status":14}',
        "saved the model",
    ]
    noise = ShutdownNoise()
    assert [noise.holds(line) for line in lines] == [False, True, True, True, False]


def test_the_tag_names_host_and_rank_in_jobs_of_several_processes():
    assert rank_tag("algo-2", RankPlace(rank=3, size=4)) == "[algo-2 rank 3] "
    assert rank_tag("algo-1", RankPlace(rank=0, size=1)) == ""


def pipe_with(text: bytes) -> io.BufferedReader:
    read_end, write_end = os.pipe()

    def write() -> None:
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(text)

    threading.Thread(target=write, daemon=True).start()
    return os.fdopen(read_end, "rb")


START_ABORT = (
    b"E0000 00:00:1.5 1 base_collective_executor.cc:249] BaseCollectiveExecutor::StartAbort UNAVAILABLE\n"
    b"Additional GRPC error information from remote target /job:worker/replica:0/task:0:\n"
)


@pytest.mark.parametrize(("exit_code", "shown"), [(0, False), (1, True)])
def test_the_copy_tags_lines_and_shows_shutdown_records_only_when_the_program_failed(exit_code, shown):
    stdout, stderr = io.BytesIO(), io.BytesIO()
    output = RankOutput(
        (pipe_with(b"epoch=1 loss=0.5\n"), stdout),
        (pipe_with(b"\x1b[1mwarning\x1b[0m\n" + START_ABORT + b"done\n"), stderr),
        "[algo-2 rank 1] ",
    )
    account = output.finish(exit_code)
    assert stdout.getvalue() == b"[algo-2 rank 1] epoch=1 loss=0.5\n"
    shown_lines = [b"[algo-2 rank 1] " + line + b"\n" for line in START_ABORT.splitlines()]
    expected = b"[algo-2 rank 1] \x1b[1mwarning\x1b[0m\n[algo-2 rank 1] done\n"
    assert stderr.getvalue() == expected + (b"".join(shown_lines) if shown else b"")
    assert set(account.last_lines) >= {"epoch=1 loss=0.5", "warning", "done"}


def test_the_copy_leaves_out_absls_header_and_keeps_the_record_after_it():
    preamble = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    record = (
        b"W0000 00:00:1.5 31 dataset.cc:997] Input of GeneratorDatasetOp::Dataset will not be optimized\n"
    )
    stderr = io.BytesIO()
    output = RankOutput(
        (pipe_with(b""), io.BytesIO()), (pipe_with(preamble + record + b"x" + preamble), stderr), "[r] "
    )
    output.finish(0)
    # Only a whole line is left out: the same text inside a line the program wrote is its own.
    assert stderr.getvalue() == b"[r] " + record + b"[r] x" + preamble


ONEDNN_RECORD = (
    b"I0000 00:00:1795847220.684623      24 port.cc:153] oneDNN custom operations are on. You may see "
    b"slightly different numerical results due to floating-point round-off errors.\n"
)


@pytest.mark.parametrize("info_records_off", [True, False])
def test_the_copy_leaves_out_info_records_when_the_log_level_does(info_records_off):
    """TensorFlow 2.21 logs oneDNN's INFO record before it applies TF_CPP_MIN_LOG_LEVEL (on CPUs where
    oneDNN is on by default), so the copy leaves it out when the job's level says so; warnings stay, and
    so do the program's own INFO lines through absl-py's logging, which look alike but carry a date."""
    preamble = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    warning = (
        b"W0000 00:00:1.5 31 dataset.cc:997] Input of GeneratorDatasetOp::Dataset will not be optimized\n"
    )
    programs_own = b"I1128 06:43:52.123456 140234 train.py:42] step 100 loss 0.25\n"
    stderr = io.BytesIO()
    output = RankOutput(
        (pipe_with(b""), io.BytesIO()),
        (pipe_with(preamble + ONEDNN_RECORD + warning + programs_own + b"x" + ONEDNN_RECORD), stderr),
        "[r] ",
        info_records_off=info_records_off,
    )
    output.finish(0)
    shown = b"" if info_records_off else b"[r] " + ONEDNN_RECORD
    # A record inside a line the program wrote is the program's own text.
    kept = b"[r] " + warning + b"[r] " + programs_own + b"[r] x" + ONEDNN_RECORD
    assert stderr.getvalue() == shown + kept


@pytest.mark.parametrize(("level", "shown"), [("0", True), ("1", False)])
def test_a_programs_output_is_copied_to_ours_at_the_log_level_of_its_environment(capfdbinary, level, shown):
    program = (
        f"import sys; sys.stdout.write('epoch=1\\n'); sys.stderr.buffer.write({ONEDNN_RECORD!r} + b'done\\n')"
    )
    env = {**os.environ, TF_LOG_LEVEL_VAR: level}
    with subprocess.Popen(
        [sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    ) as popen:
        output = RankOutput.of_program(popen, "[r] ", env)
        account = output.finish(popen.wait())
    captured = capfdbinary.readouterr()
    assert account.last_lines[-1] == "done"  # the program's stderr read as its stderr
    assert captured.out == b"[r] epoch=1\n"
    assert captured.err == (b"[r] " + ONEDNN_RECORD if shown else b"") + b"[r] done\n"


@pytest.mark.parametrize(
    ("level", "off"), [(None, False), ("0", False), ("1", True), ("3", True), ("quiet", False), ("", False)]
)
def test_info_records_are_off_from_tensorflow_log_level_1(level, off):
    environ = {} if level is None else {TF_LOG_LEVEL_VAR: level}
    assert tf_info_records_off(environ) is off


@pytest.mark.parametrize(
    ("said", "errors", "expected"),
    [
        # stdout's line taken after the error it came before: the error ends the account
        (
            ["rank 1 started", "giving up", "epoch 3"],
            ["giving up"],
            ["rank 1 started", "epoch 3", "giving up"],
        ),
        (["a", "giving up"], ["giving up"], ["a", "giving up"]),  # in order already
        (["a", "b"], [], ["a", "b"]),  # nothing on stderr: as the copiers took them
        (["b", "c"], ["z"], ["b", "c", "z"]),  # an error line kept out by the line limit comes back
    ],
)
def test_the_account_ends_with_the_last_line_on_stderr(said, errors, expected):
    assert ending_with_last_error(said, errors) == expected


def test_the_account_ends_within_its_line_limit():
    said = [f"line {n}" for n in range(LAST_LINES)]
    ended = ending_with_last_error(said, ["the error"])
    assert len(ended) == LAST_LINES and ended[-1] == "the error" and ended[0] == "line 1"


def test_the_account_keeps_the_last_lines_without_noise_and_finds_the_traceback():
    noise = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    said = b"".join(f"line {n}\n".encode() for n in range(50))
    traceback = "\n".join(CHAINED).encode() + b"\n"
    output = RankOutput((pipe_with(said), io.BytesIO()), (pipe_with(noise + traceback), io.BytesIO()), "")
    account = output.finish(1)
    assert len(account.last_lines) == LAST_LINES
    assert not any("absl::InitializeLog" in line for line in account.last_lines)
    assert account.raised is not None
    assert account.raised.sentence == "RuntimeError: could not read config.json: line two of the message"
