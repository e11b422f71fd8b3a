"""Programs that tests start on every rank (under mpirun or horovodrun), or once as a reference.

Usage: python basics_workers.py allreduce|keras_tape|keras_tape_reference OUT_DIR
Each writes its results to OUT_DIR (JSON or .npz named after its rank) for the test to compare.
"""

import json
import sys
from pathlib import Path

import numpy as np

FEATURES = 4
SAMPLES_PER_RANK = 64
STEPS = 5
LEARNING_RATE = 0.05
INIT_SEED = 1234


def rank_data(rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Each rank gets different samples, so equal weights afterwards prove the gradients were shared."""
    rng = np.random.default_rng(rank)
    features = rng.normal(size=(SAMPLES_PER_RANK, FEATURES)).astype("float32")
    labels = (
        features @ np.arange(1, FEATURES + 1, dtype="float32") + rng.normal(size=SAMPLES_PER_RANK)
    ).astype("float32")
    return features, labels.reshape(-1, 1)


def build_model(seed: int):
    import keras

    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [keras.Input((FEATURES,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    )
    return model


def train(model, features: np.ndarray, labels: np.ndarray, average_gradients) -> list[float]:
    import keras
    import tensorflow as tf

    optimizer = keras.optimizers.SGD(LEARNING_RATE)
    losses = []
    for _ in range(STEPS):
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.ops.square(model(features) - labels))
        gradients = average_gradients(tape.gradient(loss, model.trainable_variables))
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        losses.append(float(loss))
    return losses


def save_weights(path: Path, model, **extra: object) -> None:
    arrays = {f"w{i}": np.asarray(v) for i, v in enumerate(model.trainable_variables)}
    np.savez(path, **arrays, **{k: np.asarray(v) for k, v in extra.items()})


def allreduce(out_dir: Path) -> None:
    import horovod.tensorflow as hvd
    import tensorflow as tf

    hvd.init()
    local = tf.fill([4], float(hvd.rank() + 1))
    result = {
        "rank": hvd.rank(),
        "size": hvd.size(),
        "mpi_enabled": hvd.mpi_enabled(),
        "gloo_enabled": hvd.gloo_enabled(),
        "sum": hvd.allreduce(local, op=hvd.Sum, name="sum").numpy().tolist(),
        "average": hvd.allreduce(local, op=hvd.Average, name="average").numpy().tolist(),
        "allgather": hvd.allgather(tf.constant([hvd.rank()]), name="gather").numpy().tolist(),
    }
    (out_dir / f"allreduce-{hvd.rank()}.json").write_text(json.dumps(result))


def keras_tape(out_dir: Path) -> None:
    import horovod.tensorflow as hvd
    import tensorflow as tf

    hvd.init()
    model = build_model(INIT_SEED + hvd.rank())
    before_broadcast = [np.asarray(v) for v in model.trainable_variables]
    for index, variable in enumerate(model.trainable_variables):
        variable.assign(hvd.broadcast(tf.convert_to_tensor(variable), root_rank=0, name=f"broadcast.{index}"))
    initial = [np.asarray(v) for v in model.trainable_variables]

    def average(gradients: list) -> list:
        return [hvd.allreduce(g, op=hvd.Average, name=f"gradient.{i}") for i, g in enumerate(gradients)]

    features, labels = rank_data(hvd.rank())
    losses = train(model, features, labels, average)
    changed_by_broadcast = any(
        not np.array_equal(a, b) for a, b in zip(before_broadcast, initial, strict=True)
    )
    save_weights(
        out_dir / f"keras_tape-{hvd.rank()}.npz",
        model,
        losses=losses,
        initial_sum=sum(float(w.sum()) for w in initial),
        changed_by_broadcast=changed_by_broadcast,
    )


def keras_tape_reference(out_dir: Path) -> None:
    """One process on the ranks' data together: with equal shards and a mean loss, its gradient is the
    average of the ranks' gradients, so Horovod's result must match it."""
    model = build_model(INIT_SEED)  # rank 0's initial weights, which the broadcast gives every rank
    shards = [rank_data(rank) for rank in range(2)]
    features = np.concatenate([f for f, _ in shards])
    labels = np.concatenate([y for _, y in shards])
    losses = train(model, features, labels, lambda gradients: gradients)
    save_weights(out_dir / "keras_tape-reference.npz", model, losses=losses)


if __name__ == "__main__":
    programs = {
        "allreduce": allreduce,
        "keras_tape": keras_tape,
        "keras_tape_reference": keras_tape_reference,
    }
    programs[sys.argv[1]](Path(sys.argv[2]))
