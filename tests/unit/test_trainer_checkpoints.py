"""Checkpoint files, their names and messages, and epoch lines, with numpy only."""

import json

import numpy as np
import pytest
from sagetrain.errors import UserError
from sagetrain.trainer.checkpoints import (
    CheckpointMeta,
    Position,
    Progress,
    check_matches,
    checkpoint_name,
    checkpoints_in,
    latest_checkpoint,
    read_checkpoint,
    stop_message,
    write_checkpoint,
    written_note,
)
from sagetrain.trainer.epochlog import epoch_line

STEPS = 5


def meta(epochs, steps=0, per_epoch=STEPS):
    return CheckpointMeta(
        Progress(epochs, steps), seed=7, ranks=2, global_batch_size=16, steps_per_epoch=per_epoch
    )


def write_as_an_older_image(directory, name, epochs, steps, marker):
    """A checkpoint as images before the 1-based names wrote it: named by epochs completed and steps into
    the next, no steps per epoch in its metadata."""
    old_meta = {"format": 1, "progress": {"epochs_completed": epochs, "steps_into_epoch": steps}, "seed": 7,
                "ranks": 2, "global_batch_size": 16}  # fmt: skip
    path = directory / name
    np.savez(path, meta=np.array(json.dumps(old_meta)), model_00000=np.array([marker], dtype=np.float32))
    return path


def test_round_trip_and_latest_by_progress(tmp_path):
    model = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array(3, dtype=np.uint32)]
    optimizer = [np.array(12, dtype=np.int64)]
    write_checkpoint(tmp_path, meta(1), model, optimizer)
    write_checkpoint(tmp_path, meta(2, 4), model, optimizer)
    write_checkpoint(tmp_path, meta(2), model, optimizer)
    latest = latest_checkpoint(tmp_path)
    assert latest is not None and latest.name == "sagetrain-epoch000003-step00000004.npz"
    checkpoint = read_checkpoint(latest)
    assert checkpoint.meta == meta(2, 4)
    assert [value.dtype for value in checkpoint.model_values] == [np.float32, np.uint32]
    np.testing.assert_array_equal(checkpoint.model_values[0], model[0])
    assert [path.name for path in checkpoints_in(tmp_path)] == [
        "sagetrain-epoch000002-step00000005.npz",
        "sagetrain-epoch000003-step00000004.npz",
    ], "only the latest two are kept"
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".")], "no temporary file left"


@pytest.mark.parametrize(
    ("progress", "steps", "name", "description"),
    [
        # Stopped after step 6 of epoch 12 (11 epochs completed, 6 steps into the next).
        (Progress(11, 6), 40, "sagetrain-epoch000012-step00000006.npz", "epoch 12, step 6 of 40"),
        # The end of epoch 11.
        (Progress(11, 0), 40, "sagetrain-epoch000011-step00000040.npz", "epoch 11, step 40 of 40"),
        (Progress(0, 1), 3, "sagetrain-epoch000001-step00000001.npz", "epoch 1, step 1 of 3"),
    ],
)
def test_names_and_messages_count_epochs_from_one_and_the_last_step_done(progress, steps, name, description):
    position = progress.position(steps)
    assert checkpoint_name(position) == name
    assert position.describe() == description
    assert Progress.after_step(position.epoch, position.step, steps) == progress


def test_the_messages_of_a_written_checkpoint():
    position = Position(epoch=2, step=6, steps=40)
    path = "/opt/ml/checkpoints/sagetrain-epoch000002-step00000006.npz"
    assert written_note(path, position) == (
        "wrote the checkpoint /opt/ml/checkpoints/sagetrain-epoch000002-step00000006.npz "
        "(epoch 2, step 6 of 40)"
    )
    assert stop_message(path, position, "algo-1") == (
        "rank 0 (host algo-1) wrote the checkpoint "
        "/opt/ml/checkpoints/sagetrain-epoch000002-step00000006.npz (epoch 2, step 6 of 40) after SIGTERM"
    )
    assert stop_message(path, position, None).startswith("rank 0 wrote the checkpoint /opt/ml/")


def test_an_older_images_checkpoint_resumes_at_the_position_its_metadata_holds(tmp_path):
    path = write_as_an_older_image(tmp_path, "sagetrain-epoch000011-step00000006.npz", 11, 6, 1.0)
    assert latest_checkpoint(tmp_path) == path
    checkpoint = read_checkpoint(path)
    assert checkpoint.meta.progress == Progress(11, 6)
    assert checkpoint.meta.steps_per_epoch is None
    assert checkpoint.meta.position.describe() == "epoch 12, step 6"
    assert Progress(11, 0).position(None).describe() == "the end of epoch 11"


def test_with_both_kinds_of_names_the_latest_is_the_latest_by_metadata(tmp_path):
    # The older image stopped in epoch 12 after step 6; its name sorts before the end of epoch 11 as named
    # now, which holds less.
    older_later = write_as_an_older_image(tmp_path, "sagetrain-epoch000011-step00000006.npz", 11, 6, 1.0)
    write_checkpoint(tmp_path, meta(11, per_epoch=40), [np.array([2.0], dtype=np.float32)], [], keep=0)
    assert latest_checkpoint(tmp_path) == older_later
    assert [path.name for path in checkpoints_in(tmp_path)] == [
        "sagetrain-epoch000011-step00000040.npz",
        "sagetrain-epoch000011-step00000006.npz",
    ]
    # The next one written goes on from there; pruning keeps the latest two by metadata, whatever the names.
    write_as_an_older_image(tmp_path, "sagetrain-epoch000010-step00000000.npz", 10, 0, 0.0)
    written = write_checkpoint(tmp_path, meta(12, per_epoch=40), [np.array([3.0], dtype=np.float32)], [])
    assert written.name == "sagetrain-epoch000012-step00000040.npz"
    assert checkpoints_in(tmp_path) == [older_later, written]


def test_the_same_position_under_both_names_prefers_this_images(tmp_path):
    write_as_an_older_image(tmp_path, "sagetrain-epoch000011-step00000000.npz", 11, 0, 1.0)
    written = write_checkpoint(tmp_path, meta(11, per_epoch=40), [np.array([2.0], dtype=np.float32)], [])
    assert latest_checkpoint(tmp_path) == written


def test_latest_of_an_empty_or_missing_folder(tmp_path):
    assert latest_checkpoint(tmp_path / "missing") is None
    (tmp_path / "unrelated.npz").write_bytes(b"")
    assert latest_checkpoint(tmp_path) is None


@pytest.mark.parametrize("content", [b"not a zip", b"PK\x03\x04truncated"])
def test_corrupt_and_mismatched_checkpoints_are_named(tmp_path, content):
    path = tmp_path / "sagetrain-epoch000001-step00000005.npz"
    path.write_bytes(content)
    with pytest.raises(UserError, match=f"checkpoint {path} cannot be read"):
        read_checkpoint(path)
    with pytest.raises(UserError, match=f"checkpoint {path} cannot be read"):
        latest_checkpoint(tmp_path)
    # Writing one more leaves the unreadable file for the next start to name.
    good = read_checkpoint(write_checkpoint(tmp_path, meta(3), [np.zeros((2, 3))], [], keep=1))
    assert path.exists()
    with pytest.raises(UserError, match="belongs to another model"):
        check_matches(good, [(3, 2)], [])
    check_matches(good, [(2, 3)], [])


def test_epoch_line():
    assert epoch_line(3, {"loss": 0.12345, "accuracy": 0.91, "val_loss": 0.00001234}) == (
        "epoch=3 loss=0.1235 accuracy=0.9100 val_loss=1.2340e-05"
    )
