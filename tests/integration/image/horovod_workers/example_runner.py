"""Run keras_mnist_example.py's train() as a user would, then report what the test checks.

Usage: example_runner.py OUT_DIR (the example itself writes its checkpoints into the working
directory). Reports each rank's final weights and, on rank 0, whether hvd.load_model and plain
tf.keras.models.load_model restore the last checkpoint with the same weights.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf
from rank_io import RankWriter

EXAMPLE = Path(__file__).resolve().parent / "keras_mnist_example.py"


def main() -> None:
    train = runpy.run_path(str(EXAMPLE), run_name="keras_mnist_example")["train"]
    model = train()

    import horovod.tensorflow.keras as hvd  # initialised by the example

    writer = RankWriter(sys.argv[1], hvd.rank(), hvd.size())
    writer.arrays("weights", model.weights)
    writer.record["history"] = {
        name: [float(v) for v in values] for name, values in model.history.history.items()
    }
    if hvd.rank() == 0:
        for loader_name, load in (("hvd", hvd.load_model), ("plain", tf.keras.models.load_model)):
            restored = load("checkpoint-3.keras")
            writer.record[f"{loader_name}_restored_optimizer"] = type(restored.optimizer).__name__
            writer.record[f"{loader_name}_restored_weights_equal"] = all(
                np.array_equal(np.asarray(a), np.asarray(b))
                for a, b in zip(restored.weights, model.weights, strict=True)
            )
    writer.close()


if __name__ == "__main__":
    main()
