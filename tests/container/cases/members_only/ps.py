# ruff: noqa: PTH103, PTH118, PTH123
"""TF2 ParameterServerStrategy: workers and parameter servers serve, the chief schedules steps, pausing
halfway (every task has served the chief) while the test probes the ports and the parameter server."""

import json
import os

import tensorflow as tf
from pause import pause_here

resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
if resolver.task_type in ("worker", "ps"):
    print(f"serving as {resolver.task_type} {resolver.task_id}", flush=True)
    tf.distribute.Server(
        resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id, protocol="grpc"
    ).join()

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


for half in ("first", "second"):
    for _ in range(10):
        coordinator.schedule(step)
    coordinator.join()
    if half == "first":
        pause_here("chief")
os.makedirs(os.environ["SM_MODEL_DIR"], exist_ok=True)
with open(os.path.join(os.environ["SM_MODEL_DIR"], "result.json"), "w") as file:
    json.dump({"steps": int(steps_done.numpy()), "weight": float(weight.numpy())}, file)
