"""How the image's Keras reduced a step's results across MultiWorkerMirroredStrategy workers before its
patch 0002 packed them: one collective per value. Figure 9's lab (payload/distributed_fit.py) trains
with it, and payload/step_results_bench.py times it against the image's packed reduction."""

import tensorflow as tf


def one_collective_per_value(values: object, strategy: tf.distribute.Strategy) -> object:
    """The mean of each value across all replicas, each in its own collective."""

    def mean(leaf: tf.Tensor) -> tf.Tensor:
        if not isinstance(leaf, tf.distribute.DistributedValues):
            # One replica per worker: run() gives the value itself, maybe without the device the
            # collectives need.
            with tf.device(strategy.extended.worker_devices[0]):
                leaf = tf.identity(leaf)
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, leaf, axis=None)

    return tf.nest.map_structure(mean, values)
