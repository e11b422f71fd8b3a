# ruff: noqa: PTH103, PTH118, PTH123
"""TF2 ParameterServerStrategy as TensorFlow documents it: the chief coordinates, workers serve until
the job ends (they never return from `server.join()` by themselves), parameter servers hold variables."""

import json
import os

import tensorflow as tf

resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
if resolver.task_type in ("worker", "ps"):
    print(f"serving as {resolver.task_type} {resolver.task_id}", flush=True)
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=resolver.task_type,
        task_index=resolver.task_id,
        protocol=resolver.rpc_layer or "grpc",
        start=True,
    )
    server.join()
else:
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        weight = tf.Variable(0.0)
        steps_done = tf.Variable(0, dtype=tf.int64)

    @tf.function
    def step():
        weight.assign_add(1.0)
        steps_done.assign_add(1)
        return steps_done.read_value()

    for _ in range(20):
        coordinator.schedule(step)
    coordinator.join()
    print(f"chief done: steps={int(steps_done.numpy())} weight={float(weight.numpy())}", flush=True)
    os.makedirs(os.environ["SM_MODEL_DIR"], exist_ok=True)
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "result.json"), "w") as file:
        json.dump({"steps": int(steps_done.numpy()), "weight": float(weight.numpy())}, file)
