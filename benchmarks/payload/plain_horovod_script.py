"""Figures 18 and 19, the baseline: the Horovod script a new user would write for the job the figure gives
the managed trainer, in the manner of Horovod's published Keras examples, with the same model, optimizer,
loss, metrics and parser: those of the model module the hyperparameter ``model_module`` names (figure
18's model_module.py by default; figure 19 names channel_model). The image's ``train`` runs it as a
script on the MPI engine.

Every rank lists the channel's TFRecord files, sorted, and takes every size-th one from its rank on; its
records are parsed, shuffled (seeded; not with ``shuffle_buffer`` 0), batched (the global ``batch_size``
split over the ranks) and prefetched. Horovod's DistributedOptimizer averages the gradients and rank 0's
variables are broadcast before the first step. Each rank prints ``plain_horovod rank=R size=S files=N``
before training (the harness checks that the ranks took every file once between them); rank 0 prints
``epoch=N loss=…`` at the end of every epoch (the harness times those lines) and saves the model as a
.keras file at the end.
"""

import importlib
import json
import os
from pathlib import Path

import horovod.tensorflow.keras as hvd
import keras
import tensorflow as tf

hp = json.loads(os.environ["SM_HPS"])
seed = hp.get("seed", 0)
shuffle_buffer = hp.get("shuffle_buffer", 10_000)
model_module = importlib.import_module(hp.get("model_module", "model_module"))

hvd.init()
keras.utils.set_random_seed(seed)
files = sorted(str(path) for path in Path(os.environ["SM_CHANNEL_TRAIN"]).glob("*.tfrecord"))
rank_files = files[hvd.rank() :: hvd.size()]
print(f"plain_horovod rank={hvd.rank()} size={hvd.size()} files={len(rank_files)}", flush=True)
dataset = tf.data.TFRecordDataset(rank_files).map(
    lambda record: model_module.parse_record(record, hp), num_parallel_calls=tf.data.AUTOTUNE
)
if shuffle_buffer:
    dataset = dataset.shuffle(shuffle_buffer, seed=seed)
dataset = dataset.batch(hp["batch_size"] // hvd.size()).prefetch(tf.data.AUTOTUNE)


class EpochLine(keras.callbacks.Callback):
    """Rank 0 only: the MPI engine gathers every rank's output on algo-1, one line per epoch is enough."""

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if hvd.rank() == 0:
            print(f"epoch={epoch + 1} loss={(logs or {})['loss']:.4f}", flush=True)


model = model_module.build_model(hp)
# The published examples' recipe: the optimizer wrapped by Horovod (the image makes the wrapper work on
# Keras 3's optimizers, as figure 9's Horovod side uses it), here the module's own optimizer, loss and
# metrics, which the managed trainer trains with too. The learning rate is not scaled by the rank count,
# as the managed trainer does not scale it by default: both sides take the same steps.
compile_config = keras.saving.deserialize_keras_object(model.get_compile_config())
compile_config["optimizer"] = hvd.DistributedOptimizer(model.optimizer)
model.compile(**compile_config)
model.fit(
    dataset,
    epochs=hp["epochs"],
    verbose=0,
    callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), EpochLine()],
)
if hvd.rank() == 0:
    # What SageMaker uploads as the job's model.
    model.save(Path(os.environ["SM_MODEL_DIR"]) / "model.keras")
