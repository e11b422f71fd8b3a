"""The managed distributed trainer for Keras model modules (``python -m sagetrain.trainer module.py``).

Contract (docs/keras-module.md has the full text and an example):

- ``build_model(hp)`` (required) returns a ``keras.Model`` (tf-keras when ``TF_USE_LEGACY_KERAS=1``),
  compiled, or uncompiled with the hyperparameters ``optimizer``, ``learning_rate``, ``loss``,
  ``metrics`` naming what to compile it with.
- ``input_fn(channel, hp)`` (optional) returns an UNBATCHED ``tf.data.Dataset`` of ``(features, label)``
  read from ``channel.files`` in order, without shuffling or sharding (the trainer does both).
- ``parse_record(serialized, hp)`` (optional) turns one TFRecord record into ``(features, label)``.
- ``hp`` is a read-only mapping of the user's hyperparameters, typed from their JSON strings.

The trainer reads ``epochs``, ``batch_size`` (GLOBAL: each of N ranks takes ``batch_size // N``),
``seed``, ``steps_per_epoch``, ``checkpoint_every_epochs``, ``lr_scaling`` (none|linear),
``warmup_epochs``, ``shuffle_buffer``, ``label_column``. Every record of a channel is read by exactly one
rank per epoch and every rank runs the same number of steps (see ``sharding``).

Layout, one concern per module: ``hyperparameters`` (``hp`` and the trainer's own settings), ``job`` (the
job as this rank sees it: the launcher's configuration model and the contracts), ``sharding`` (pure
arithmetic), ``channels`` (files on disk), ``readers`` (tf.data), ``contract`` (the module),
``collectives`` (single / Horovod, as the engine registry says), ``preparation`` (before the first
collective), ``agreement`` (every rank's outcome of preparing, as plain data), ``loop`` (steps and
metrics), ``checkpoints``, ``signals``, ``export``, ``epochlog``, ``errorfile``, ``tensorboard`` (epoch
scalars), ``run`` (the sequence: a ``TrainingRun`` resumes, trains, finishes). Only ``readers``,
``collectives``, ``preparation``, ``loop``, ``tensorboard`` and ``run`` import TensorFlow; importing this
package does not.
"""
