"""Failure reporting: the cause first in plain words, details after; the first failing rank named."""

import signal

import pytest
from sagetrain.config.paths import Paths
from sagetrain.launch.coordinator.wire import JobVerdict, RankFailed, decode, encode
from sagetrain.report import RankFailure, Verdict, remove_previous_report, write_report
from sagetrain.report.files import failure_text
from sagetrain.report.keras_2_code import KERAS_2_ERRORS, shows_keras_2_code


def test_failure_file_first_line_is_the_cause(tmp_path):
    paths = Paths(tmp_path)
    (tmp_path / "output").mkdir()
    (tmp_path / "output" / "data").mkdir()
    (tmp_path / "output" / "data" / "user.txt").write_text("mine")
    written = write_report(
        paths, Verdict(3, "train.py exited with code 3 on rank 1 (host algo-1)", "Traceback...")
    )
    lines = written.read_text().splitlines()
    assert written == paths.failure_file
    assert lines[0] == "train.py exited with code 3 on rank 1 (host algo-1)"
    assert lines[1] == "Traceback..."
    assert not paths.success_file.exists()
    assert (tmp_path / "output" / "data" / "user.txt").read_text() == "mine"


def test_a_failure_file_the_program_wrote_is_kept_below_our_cause(tmp_path):
    paths = Paths(tmp_path)
    paths.output_dir.mkdir()
    paths.failure_file.write_text("loss became NaN at step 412\nlearning rate too high?")
    write_report(paths, Verdict(1, "train.py exited with code 1 on rank 0 (host algo-1)", "Last lines..."))
    assert paths.failure_file.read_text().splitlines() == [
        "train.py exited with code 1 on rank 0 (host algo-1)",
        "--- the program's own failure file, as it wrote it: ---",
        "loss became NaN at step 412",
        "learning rate too high?",
        "--- details: ---",
        "Last lines...",
    ]


def test_a_failure_file_the_program_wrote_stays_when_the_job_succeeds(tmp_path):
    paths = Paths(tmp_path)
    paths.output_dir.mkdir()
    paths.failure_file.write_text("a warning the program chose to leave here\n")
    write_report(paths, Verdict(0))
    assert paths.success_file.exists()
    assert paths.failure_file.read_text() == "a warning the program chose to leave here\n"


STOPPED = Verdict(143, "the job was stopped by SIGTERM (the container was asked to stop)")


def test_our_failure_report_is_never_taken_for_the_programs_own(tmp_path):
    paths = Paths(tmp_path)
    write_report(paths, STOPPED)
    write_report(paths, Verdict(1, "train.py exited with code 1 on rank 0 (host algo-1)"))
    assert paths.failure_file.read_text() == "train.py exited with code 1 on rank 0 (host algo-1)\n"


def test_a_restart_on_the_same_tree_removes_our_last_report_before_the_job_starts(tmp_path):
    paths = Paths(tmp_path)
    write_report(paths, STOPPED)  # the first run was stopped; the restart succeeds
    remove_previous_report(paths)
    assert not paths.failure_file.exists()
    write_report(paths, Verdict(0))
    assert sorted(p.name for p in paths.output_dir.iterdir() if not p.name.startswith(".")) == ["success"]
    remove_previous_report(paths)  # and the next run starts without our success file
    assert list(p.name for p in paths.output_dir.iterdir() if not p.name.startswith(".")) == []


def test_a_failure_file_the_program_wrote_is_not_removed_at_start(tmp_path):
    paths = Paths(tmp_path)
    write_report(paths, STOPPED)
    paths.failure_file.write_text("loss became NaN\n")  # the program rewrote it after our report
    remove_previous_report(paths)
    assert paths.failure_file.read_text() == "loss became NaN\n"
    write_report(paths, Verdict(1, "train.py exited with code 1 on rank 0 (host algo-1)"))
    assert paths.failure_file.read_text().splitlines()[1:3] == [
        "--- the program's own failure file, as it wrote it: ---",
        "loss became NaN",
    ]


def test_success_file(tmp_path):
    assert write_report(Paths(tmp_path), Verdict(0)) == tmp_path / "output" / "success"


def test_multiline_cause_is_folded_into_one_line():
    assert failure_text(Verdict(1, "bad\nthing")).splitlines()[0] == "bad thing"


def test_rank_failure_names_rank_host_code_and_message():
    failure = RankFailure(
        1, "algo-2", 3, "train.py", message="batch_size must be even", last_lines=("a", "b")
    )
    verdict = failure.verdict()
    assert verdict.exit_code == 3
    assert verdict.cause == "train.py failed on rank 1 (host algo-2): batch_size must be even"
    assert verdict.detail.startswith("train.py on rank 1 (host algo-2) ended with exit code 3.")
    assert verdict.detail.endswith("Last lines printed by rank 1:\na\nb")


def test_a_rank_that_said_nothing_is_described_by_the_last_line_it_printed_in_quotes():
    failure = RankFailure(0, "algo-1", 3, "run.sh", last_lines=("copying", "cp: disk full"))
    assert (
        failure.cause() == "run.sh exited with code 3 on rank 0 (host algo-1); its last line: 'cp: disk full'"
    )
    assert (
        RankFailure(0, "algo-1", 3, "run.sh").cause() == "run.sh exited with code 3 on rank 0 (host algo-1)"
    )


def test_a_long_message_is_cut_to_fit_failure_reason_keeping_program_rank_type_and_hint():
    from sagetrain.report.verdict import MAX_CAUSE_CHARS

    message = "AttributeError: 'Adam' object has no attribute 'lr'" + " and more" * 400
    cause = RankFailure(2, "algo-2", 1, "train.py", message=message).cause()
    assert len(cause) <= MAX_CAUSE_CHARS < 1024
    assert cause.startswith("train.py failed on rank 2 (host algo-2): AttributeError: 'Adam' object has no")
    assert "… ; if the program was written for Keras 2" in cause.replace("…;", "… ;")
    assert cause.endswith("(or the environment variable SAGETRAIN_LEGACY_KERAS=1)")


def test_rank_killed_by_sigkill_mentions_memory():
    failure = RankFailure(0, "algo-1", 128 + signal.SIGKILL, "train.py")
    assert (
        failure.cause()
        == "train.py was killed by SIGKILL on rank 0 (host algo-1); the host may have run out of memory"
    )


def test_messages_round_trip():
    failure = RankFailure(2, "h", 1, "p", "m", "tb", ("x",))
    assert decode(encode(RankFailed(failure))) == RankFailed(failure)
    verdict = Verdict(5, "c", "d")
    assert decode(encode(JobVerdict(verdict))) == JobVerdict(verdict)


def test_root_failure_skips_ranks_that_failed_because_horovod_shut_down():
    from sagetrain.report.verdict import root_failure

    knock_on = RankFailure(
        0, "algo-1", 1, "train.py", last_lines=("horovod.common.exceptions.HorovodInternalError: ...",)
    )
    shut_down = RankFailure(3, "algo-2", 1, "train.py", message="Horovod has been shut down. This was caused")
    terminated = RankFailure(2, "algo-2", 128 + signal.SIGTERM, "train.py")
    real = RankFailure(1, "algo-1", 1, "train.py", message="ValueError: bad batch")
    assert root_failure([knock_on, shut_down, terminated, real]) is real
    assert root_failure([real, knock_on]) is real
    # Nothing but knock-ons: the first to arrive is still named rather than nothing.
    assert root_failure([terminated, knock_on]) is terminated
    assert root_failure([]) is None


def test_a_rank_killed_by_sigkill_is_a_root_cause_not_a_knock_on():
    oom = RankFailure(1, "algo-2", 128 + signal.SIGKILL, "train.py")
    assert not oom.is_knock_on()


@pytest.mark.parametrize("entry", KERAS_2_ERRORS, ids=lambda entry: entry.spelling)
def test_each_keras_2_error_keras_3_prints_gets_the_legacy_keras_switch_named(entry):
    # As the rank launcher reports it: the exception's line as the message, the traceback printed.
    said = entry.example.splitlines()[-1]
    failure = RankFailure(
        0,
        "algo-1",
        1,
        "train.py",
        message=said,
        traceback=f"Traceback (most recent call last):\n{entry.example}",
    )
    assert failure.cause() == (
        f"train.py failed on rank 0 (host algo-1): {said}; if the program was written for Keras 2, run it "
        "with tf-keras as both keras and tf.keras: set the hyperparameter sagetrain_legacy_keras=true (or "
        "the environment variable SAGETRAIN_LEGACY_KERAS=1)"
    )


@pytest.mark.parametrize(
    "keras_3_said",
    [
        "AttributeError: module 'keras.api.backend' has no attribute 'get_value'",
        "ModuleNotFoundError: No module named 'keras.preprocessing.text'",
        "ModuleNotFoundError: No module named 'keras._tf_keras.keras.callbacks.experimental'",
        "AttributeError: 'Functional' object has no attribute 'predict_generator'",
        "ValueError: Arguments not recognized: {'workers': 2}",  # evaluate(..., workers=2)
        "TypeError: TensorFlowTrainer.predict() got an unexpected keyword argument 'use_multiprocessing'",
        "ValueError: When using `save_weights_only=True` in `ModelCheckpoint`, the filepath provided must "
        "end in `.weights.h5` (Keras weights format). Received: filepath=/tmp/ckpt_{epoch}",
        "ValueError: The following argument(s) are not supported: ['signatures']",
    ],
)
def test_other_spellings_of_the_same_keras_2_errors_are_recognised(keras_3_said):
    assert shows_keras_2_code([keras_3_said])


@pytest.mark.parametrize(
    "other_said",
    [
        "ValueError: bad batch",
        "ModuleNotFoundError: No module named 'keras'",
        # Under the switch the modules are tf_keras': its errors are not Keras 3's.
        "AttributeError: module 'tf_keras.backend' has no attribute 'nothing'",
        # What tf-keras 2.21 raises too, so the switch would not help: TensorFlow 1 APIs, modules and
        # methods Keras 2 had already dropped, other packages named keras_*.
        "AttributeError: module 'keras.backend' has no attribute 'set_session'",
        "AttributeError: module 'tensorflow' has no attribute 'ConfigProto'",
        "ModuleNotFoundError: No module named 'keras.utils.np_utils'",
        "ModuleNotFoundError: No module named 'keras.layers.core'",
        "ModuleNotFoundError: No module named 'keras.wrappers.scikit_learn'",
        "AttributeError: module 'keras.mixed_precision' has no attribute 'experimental'",
        "AttributeError: 'Sequential' object has no attribute 'predict_classes'",
        "AttributeError: 'Adam' object has no attribute 'get_gradients'",
        "ImportError: cannot import name 'Tokenizer' from 'keras_nlp.layers'",
        "AttributeError: 'Trainer' object has no attribute 'lr'",
        # Keras 3 spellings Keras 3 itself refuses: not Keras 2 code.
        "ValueError: Invalid filepath extension for saving. Please add either a `.keras` extension for the",
        "ValueError: Argument(s) not recognized: {'beta_3': 0.5}",
        # TensorFlow's own, raised by a program that drives ParameterServerStrategy without Keras.
        "ValueError: To use this dataset, you need to pass this dataset to "
        "ClusterCoordinator.create_per_worker_dataset.",
        # A 'str' has no 'name' anywhere else.
        'File "/opt/ml/code/train.py", line 3, in <module>\n'
        "AttributeError: 'str' object has no attribute 'name'",
    ],
)
def test_other_failures_get_no_keras_hint(other_said):
    failure = RankFailure(0, "algo-1", 1, "train.py", message=other_said)
    assert failure.cause() == f"train.py failed on rank 0 (host algo-1): {other_said}"
