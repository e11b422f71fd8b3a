"""Bad model modules and data: one sentence naming module/function/channel in the error file, exit 1,
and no rank left waiting when only one of them fails."""

import re
import textwrap
from pathlib import Path

import pytest
from sagetrain import contracts
from sagetrain.plan.tf_config import TF_CONFIG_VAR
from trainer_cases import trainer_data as data
from trainer_cases.trainer_harness import run_trainer

MODEL = """
import keras, tensorflow as tf, os
def model(compiled=True):
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    if compiled:
        m.compile(optimizer="sgd", loss="mse")
    return m
"""

CASES = {
    "no-build-model": ("x = 1\n", r"^bad\.py defines no build_model\(hp\)"),
    "import-fails": ("import not_a_module\n", r"^importing bad\.py failed: ModuleNotFoundError"),
    "build-model-raises": (
        "def build_model(hp):\n    raise ValueError('boom')\n",
        r"^build_model in bad\.py raised: ValueError: boom\.$",
    ),
    "returns-non-model": (
        "def build_model(hp):\n    return 3\n",
        r"^build_model in bad\.py returned int, not a keras\.Model\.",
    ),
    "uncompiled-no-optimizer": (
        "def build_model(hp):\n    return model(compiled=False)\n",
        r"^build_model in bad\.py returned an uncompiled model and the hyperparameters "
        r"name no 'optimizer'",
    ),
    "input-fn-not-dataset": (
        "def build_model(hp):\n    return model()\ndef input_fn(channel, hp):\n    return [1]\n",
        r"^input_fn in bad\.py \(channel 'train'\) must return a tf\.data\.Dataset, got list",
    ),
    "input-fn-not-pairs": (
        "def build_model(hp):\n    return model()\n"
        "def input_fn(channel, hp):\n    return tf.data.Dataset.range(5)\n",
        r"^input_fn in bad\.py \(channel 'train'\) must yield \(features, label\) pairs",
    ),
    "features-do-not-fit-model": (
        "def build_model(hp):\n    return model()\n"
        "def input_fn(channel, hp):\n"
        "    return tf.data.Dataset.from_tensor_slices((tf.zeros((6, 7)), tf.zeros(6)))\n",
        r"^the model from build_model in bad\.py cannot train on the records of channel 'train' "
        r"\(features float32\[7\], label float32\[\]\): "
        r"ValueError: Input 0 .* of layer .dense. is incompatible",
    ),
}


def write_module(root: Path, body: str) -> Path:
    module = root / "code" / "bad.py"
    module.parent.mkdir(parents=True)
    module.write_text(textwrap.dedent(MODEL) + body)
    return module


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_module_is_one_named_sentence(tmp_path, case):
    body, pattern = CASES[case]
    data.write_npz(tmp_path / "input" / "data" / "train", 6, 1, features=3)

    run = run_trainer(tmp_path, write_module(tmp_path, body), {"epochs": 1, "batch_size": 2})

    assert run.returncode == 1, run.stderr[-2000:]
    error = run.error(0)
    assert error is not None, run.stderr[-2000:]
    assert error["message"].count("\n") == 0
    assert re.search(pattern, error["message"]), error["message"]
    assert error["message"] in run.stderr


def test_tfrecord_channel_without_parse_record(tmp_path):
    data.write_tfrecord(tmp_path / "input" / "data" / "train", 6, 1)
    run = run_trainer(tmp_path, write_module(tmp_path, "def build_model(hp):\n    return model()\n"), {})
    assert run.returncode == 1
    assert run.error(0)["message"].startswith(
        "channel 'train' holds TFRecord files; define parse_record(serialized, hp) in bad.py"
    )


def test_channel_with_zero_records(tmp_path):
    data.write_npz(tmp_path / "input" / "data" / "train", 0, 1)
    run = run_trainer(tmp_path, write_module(tmp_path, "def build_model(hp):\n    return model()\n"), {})
    assert run.returncode == 1
    assert run.error(0)["message"].startswith("channel 'train' has no records")


def test_the_parameter_server_engine_is_rejected_with_a_pointer_to_horovod(tmp_path):
    data.write_npz(tmp_path / "input" / "data" / "train", 6, 1)
    run = run_trainer(
        tmp_path,
        write_module(tmp_path, "def build_model(hp):\n    return model()\n"),
        {},
        extra_env={contracts.ENGINE_VAR: "parameter_server", TF_CONFIG_VAR: "{}"},
    )
    assert run.returncode == 1
    assert "does not run on the parameter_server engine" in run.error(0)["message"]


def test_fewer_records_than_ranks_fails_alike_on_every_rank(tmp_path):
    data.write_npz(tmp_path / "input" / "data" / "train", 2, 1)
    run = run_trainer(
        tmp_path,
        write_module(tmp_path, "def build_model(hp):\n    return model()\n"),
        {"batch_size": 3},
        ranks=3,
    )
    assert run.returncode == 1, run.stderr[-2000:]
    messages = {run.error(rank)["message"] for rank in range(3)}
    assert messages == {
        "channel 'train' has 2 records, too few for 3 ranks (rank 2 would get none); add records "
        "or run fewer ranks."
    }


def test_one_rank_failing_stops_all_without_hanging(tmp_path):
    data.write_npz(tmp_path / "input" / "data" / "train", 8, 1)
    body = (
        "def build_model(hp):\n    return model()\n"
        "def input_fn(channel, hp):\n"
        "    if os.environ['SAGETRAIN_RANK'] == '1':\n"
        "        raise RuntimeError('cannot open ' + channel.files[0])\n"
        "    return tf.data.Dataset.from_tensor_slices((tf.zeros((8, 4)), tf.zeros(8)))\n"
    )
    run = run_trainer(tmp_path, write_module(tmp_path, body), {"batch_size": 2}, ranks=2)

    assert run.returncode == 1, run.stderr[-2000:]
    assert run.error(1)["message"].startswith(
        "input_fn in bad.py raised for channel 'train': RuntimeError: cannot open"
    )
    assert run.error(0)["message"] == f"rank 1 failed: {run.error(1)['message']}"


def test_input_fn_returning_an_infinite_dataset(tmp_path):
    data.write_npz(tmp_path / "input" / "data" / "train", 6, 1)
    body = (
        "def build_model(hp):\n    return model()\n"
        "def input_fn(channel, hp):\n"
        "    return tf.data.Dataset.from_tensor_slices((tf.zeros((6, 4)), tf.zeros(6))).repeat()\n"
    )
    run = run_trainer(tmp_path, write_module(tmp_path, body), {"batch_size": 2})
    assert run.returncode == 1, run.stderr[-2000:]
    assert run.error(0)["message"] == (
        "input_fn in bad.py returned an infinite dataset for channel 'train' (does it end with .repeat()?); "
        "return every record once: the trainer runs the epochs itself."
    )


@pytest.mark.parametrize(
    ("full_passes", "shuffle_buffer", "failing_epoch"),
    [(1, 10_000, 1), (3, 0, 2)],
    ids=["shuffled", "unshuffled-repeated"],
)
def test_an_input_fn_that_yields_fewer_records_than_it_was_counted_with(
    tmp_path, full_passes, shuffle_buffer, failing_epoch
):
    """Its dataset yields 12 records in its first ``full_passes`` passes (of the count, the first batch,
    epoch 1 and epoch 2, in that order), then 6. A shuffled epoch runs out; unshuffled epochs are one
    repeated pipeline, whose pass with fewer batches fails at the step that misses its batch. Both say
    the same sentence."""
    data.write_npz(tmp_path / "input" / "data" / "train", 6, 1)
    body = (
        "def build_model(hp):\n    return model()\n"
        "iterations = []\n"
        "def records():\n"
        "    iterations.append(1)\n"
        f"    for _ in range(12 if len(iterations) <= {full_passes} else 6):\n"
        "        yield [0.0] * 4, 0.0\n"
        "def input_fn(channel, hp):\n"
        "    spec = (tf.TensorSpec((4,), tf.float32), tf.TensorSpec((), tf.float32))\n"
        "    return tf.data.Dataset.from_generator(records, output_signature=spec)\n"
    )
    hyperparameters = {"batch_size": 4, "epochs": 2, "shuffle_buffer": shuffle_buffer}
    run = run_trainer(tmp_path, write_module(tmp_path, body), hyperparameters)
    assert run.returncode == 1, run.stderr[-2000:]
    assert run.error(0)["message"] == (
        f"channel 'train' ran out of records on rank 0 at step 3 of epoch {failing_epoch}, though 3 steps "
        "were counted at start; input_fn must return the same records every time it is iterated."
    )


PARSE_RECORD = """
def build_model(hp):
    return model()
def parse_record(serialized, hp):
    features = {{"{x}": tf.io.FixedLenFeature([{width}], tf.float32)}}
    features["y"] = tf.io.FixedLenFeature([], tf.float32)
    parsed = tf.io.parse_single_example(serialized, features)
    return tf.reshape(parsed["{x}"], (-1,))[:4], parsed["y"]
"""


@pytest.mark.parametrize(
    ("key", "width", "cause"),
    [
        ("z", 4, r"InvalidArgumentError: Feature: z \(data type: float\) is required but could not be found"),
        ("x", 7, r"InvalidArgumentError: Key: x\.\s+Can't parse serialized Example"),
    ],
    ids=["wrong-key", "wrong-shape"],
)
def test_parse_record_that_does_not_match_the_records(tmp_path, key, width, cause):
    data.write_tfrecord(tmp_path / "input" / "data" / "train", 6, 1)
    module = write_module(tmp_path, PARSE_RECORD.format(x=key, width=width))
    run = run_trainer(tmp_path, module, {"batch_size": 2})
    assert run.returncode == 1, run.stderr[-2000:]
    message = run.error(0)["message"]
    assert message.count("\n") == 0
    assert re.search(
        rf"^channel 'train': parse_record in bad\.py cannot read its records: {cause}.*; make its feature "
        r"names, types and shapes match the records\.$",
        message,
    ), message


def test_csv_with_a_value_that_is_not_a_number(tmp_path):
    train = tmp_path / "input" / "data" / "train"
    train.mkdir(parents=True)
    (train / "data.csv").write_text("a,b,c,d,label\n1,2,3,4,5\n1,abc,3,4,5\n")
    run = run_trainer(tmp_path, write_module(tmp_path, "def build_model(hp):\n    return model()\n"), {})
    assert run.returncode == 1, run.stderr[-2000:]
    assert run.error(0)["message"] == (
        "channel 'train': the CSV reader cannot read its records: InvalidArgumentError: Field 1 in record is "
        "not a valid float: abc; every value (the label too) must be a number; read other data with "
        "input_fn(channel, hp)."
    )


def test_truncated_tfrecord_file(tmp_path):
    train = tmp_path / "input" / "data" / "train"
    data.write_tfrecord(train, 6, 1)
    path = next(train.iterdir())
    path.write_bytes(path.read_bytes()[:-7])
    module = write_module(tmp_path, PARSE_RECORD.format(x="x", width=4))
    run = run_trainer(tmp_path, module, {})
    assert run.returncode == 1, run.stderr[-2000:]
    assert re.search(
        r"^channel 'train': the TFRecord reader cannot read its records: DataLossError: truncated record at "
        r"\d+.*; check that the files are complete TFRecord files\.$",
        run.error(0)["message"],
    ), run.error(0)["message"]


@pytest.mark.parametrize("channel", ["validation", "test"])
def test_evaluation_channel_with_zero_records(tmp_path, channel):
    data.write_npz(tmp_path / "input" / "data" / "train", 6, 1)
    data.write_npz(tmp_path / "input" / "data" / channel, 0, 1)
    run = run_trainer(tmp_path, write_module(tmp_path, "def build_model(hp):\n    return model()\n"), {})
    assert run.returncode == 1, run.stderr[-2000:]
    assert run.error(0)["message"] == (
        f"channel {channel!r} has no records; put data files in it or remove the channel."
    )
    assert not (tmp_path / "output" / "data" / "metrics.json").exists()


def write_tfrecord_with_malformed_record(
    directory: Path, count: int, malformed_index: int, payload: bytes
) -> None:
    """``count`` records as trainer_data writes them, except that record ``malformed_index`` is ``payload``:
    well framed (the count reads it), but not a tf.train.Example (parse_record fails on it)."""
    import tensorflow as tf

    data.write_tfrecord(directory, count, 1)
    path = next(directory.iterdir())
    records = [bytes(record) for record in tf.data.TFRecordDataset([str(path)]).as_numpy_iterator()]
    records[malformed_index] = payload
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)


@pytest.mark.parametrize(
    ("payload", "cause"),
    [
        # Bytes that are not UTF-8 also make TensorFlow's own error unreadable (a UnicodeDecodeError).
        (b"\xff\xfebinary", r"TensorFlow error: Could not parse example input, value: '\\xff\\xfe"),
        (b"not an Example", r"InvalidArgumentError: Could not parse example input, value: 'not an Example'"),
    ],
    ids=["binary", "text"],
)
def test_malformed_record_mid_epoch_names_the_channel_and_parse_record(tmp_path, payload, cause):
    # Only the first batch goes through parse_record before training; record 50 is read by step 7
    # (8 records a step, no shuffle).
    write_tfrecord_with_malformed_record(tmp_path / "input" / "data" / "train", 64, 49, payload)
    module = write_module(tmp_path, PARSE_RECORD.format(x="x", width=4))
    run = run_trainer(tmp_path, module, {"batch_size": 8, "epochs": 1, "shuffle_buffer": 0})
    assert run.returncode == 1, run.stderr[-2000:]
    message = run.error(0)["message"]
    assert message.count("\n") == 0
    assert re.search(
        rf"^channel 'train': parse_record in bad\.py cannot read its records on rank 0 at step 7 of epoch 1: "
        rf"{cause}.*; make its feature names, types and shapes match the records\.$",
        message,
    ), message
    assert message in run.stderr
    assert run.epoch_lines() == []


def test_malformed_record_in_the_validation_channel(tmp_path):
    data.write_tfrecord(tmp_path / "input" / "data" / "train", 16, 1)
    write_tfrecord_with_malformed_record(tmp_path / "input" / "data" / "validation", 64, 49, b"\xff\xfe")
    module = write_module(tmp_path, PARSE_RECORD.format(x="x", width=4))
    run = run_trainer(tmp_path, module, {"batch_size": 8, "epochs": 1})
    assert run.returncode == 1, run.stderr[-2000:]
    assert re.search(
        r"^channel 'validation': parse_record in bad\.py cannot read its records: TensorFlow error: "
        r"Could not parse example input, value: '\\xff\\xfe'; make its feature names, types and shapes "
        r"match the records\.$",
        run.error(0)["message"],
    ), run.error(0)["message"]


def test_malformed_first_record_is_found_before_training(tmp_path):
    write_tfrecord_with_malformed_record(tmp_path / "input" / "data" / "train", 64, 0, b"\xff\xfe")
    module = write_module(tmp_path, PARSE_RECORD.format(x="x", width=4))
    run = run_trainer(tmp_path, module, {"batch_size": 8, "epochs": 1})
    assert run.returncode == 1, run.stderr[-2000:]
    assert run.error(0)["message"] == (
        "channel 'train': parse_record in bad.py cannot read its records: TensorFlow error: Could not parse "
        "example input, value: '\\xff\\xfe'; make its feature names, types and shapes match the records."
    )


def test_malformed_record_on_one_rank_mid_epoch_stops_every_rank(tmp_path):
    # Record-level sharding over 2 ranks: rank 1 reads records 33-64, so record 50 (index 49) is its 18th,
    # read in its step 5 (4 records a step).
    write_tfrecord_with_malformed_record(tmp_path / "input" / "data" / "train", 64, 49, b"\xff\xfe")
    module = write_module(tmp_path, PARSE_RECORD.format(x="x", width=4))
    run = run_trainer(tmp_path, module, {"batch_size": 8, "epochs": 1, "shuffle_buffer": 0}, ranks=2)
    assert run.returncode != 0, run.stderr[-2000:]
    assert run.error(1)["message"] == (
        "channel 'train': parse_record in bad.py cannot read its records on rank 1 at step 5 of epoch 1: "
        "TensorFlow error: Could not parse example input, value: '\\xff\\xfe'; make its feature names, types "
        "and shapes match the records."
    )
