"""A TensorFlow parameter server task: ``python -m sagetrain.launch.ps_server`` with TF_CONFIG set.

Runs in its own process so the entry itself never imports TensorFlow.
"""

from __future__ import annotations

import json
import os

from sagetrain.plan.tf_config import TF_CONFIG_VAR, TaskType


def main() -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # two TF processes must not share a GPU
    import tensorflow as tf

    config = json.loads(os.environ[TF_CONFIG_VAR])
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=TaskType.PS.value,
        task_index=config["task"]["index"],
        protocol="grpc",
        start=True,
    )
    server.join()


if __name__ == "__main__":
    main()
