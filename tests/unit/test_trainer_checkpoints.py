"""Checkpoint files and epoch lines, with numpy only."""

import numpy as np
import pytest
from sagetrain.errors import UserError
from sagetrain.trainer.checkpoints import (
    CheckpointMeta,
    Progress,
    check_matches,
    checkpoints_in,
    latest_checkpoint,
    read_checkpoint,
    write_checkpoint,
)
from sagetrain.trainer.epochlog import epoch_line


def meta(epochs, steps=0):
    return CheckpointMeta(Progress(epochs, steps), seed=7, ranks=2, global_batch_size=16)


def test_round_trip_and_latest_by_progress(tmp_path):
    model = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array(3, dtype=np.uint32)]
    optimizer = [np.array(12, dtype=np.int64)]
    write_checkpoint(tmp_path, meta(1), model, optimizer)
    write_checkpoint(tmp_path, meta(2, 5), model, optimizer)
    write_checkpoint(tmp_path, meta(2), model, optimizer)
    latest = latest_checkpoint(tmp_path)
    assert latest is not None and latest.name == "sagetrain-epoch000002-step00000005.npz"
    checkpoint = read_checkpoint(latest)
    assert checkpoint.meta == meta(2, 5)
    assert [value.dtype for value in checkpoint.model_values] == [np.float32, np.uint32]
    np.testing.assert_array_equal(checkpoint.model_values[0], model[0])
    assert len(checkpoints_in(tmp_path)) == 2, "only the latest two are kept"
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".")], "no temporary file left"


def test_latest_of_an_empty_or_missing_folder(tmp_path):
    assert latest_checkpoint(tmp_path / "missing") is None
    (tmp_path / "unrelated.npz").write_bytes(b"")
    assert latest_checkpoint(tmp_path) is None


def test_corrupt_and_mismatched_checkpoints_are_named(tmp_path):
    path = tmp_path / "sagetrain-epoch000001-step00000000.npz"
    path.write_bytes(b"not a zip")
    with pytest.raises(UserError, match=f"checkpoint {path} cannot be read"):
        read_checkpoint(path)
    good = read_checkpoint(write_checkpoint(tmp_path, meta(3), [np.zeros((2, 3))], []))
    with pytest.raises(UserError, match="belongs to another model"):
        check_matches(good, [(3, 2)], [])
    check_matches(good, [(2, 3)], [])


def test_epoch_line():
    assert epoch_line(3, {"loss": 0.12345, "accuracy": 0.91, "val_loss": 0.00001234}) == (
        "epoch=3 loss=0.1235 accuracy=0.9100 val_loss=1.2340e-05"
    )
