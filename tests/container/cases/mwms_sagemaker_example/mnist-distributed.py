# ruff: noqa: PTH118, UP032
"""What amazon-sagemaker-examples' MultiWorkerMirroredStrategy script
(training/distributed_training/tensorflow/multi_worker_mirrored_strategy/mnist-distributed.py) does,
rewritten here with the same calls in the same order: MNIST arrays from the `training` channel's .npy
files, MultiWorkerMirroredStrategy with NCCL communication options, a small dense model compiled in
its scope, `fit` and `evaluate` on the arrays, then Keras 2's SavedModel idiom: the chief saves to
`<SM_MODEL_DIR>/000000001` for TensorFlow Serving, every other worker to `/tmp/<task id>`."""

import argparse
import json
import os

import numpy as np
import tensorflow as tf


def model(x_train, y_train, x_test, y_test, strategy):
    with strategy.scope():
        model = tf.keras.models.Sequential(
            [
                tf.keras.layers.Flatten(),
                tf.keras.layers.Dense(1024, activation=tf.nn.relu),
                tf.keras.layers.Dropout(0.4),
                tf.keras.layers.Dense(10, activation=tf.nn.softmax),
            ]
        )
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x_train, y_train)
    model.evaluate(x_test, y_test)
    return model


def _load_training_data(base_dir):
    x_train = np.load(os.path.join(base_dir, "train_data.npy"))
    y_train = np.load(os.path.join(base_dir, "train_labels.npy"))
    return x_train, y_train


def _load_testing_data(base_dir):
    x_test = np.load(os.path.join(base_dir, "eval_data.npy"))
    y_test = np.load(os.path.join(base_dir, "eval_labels.npy"))
    return x_test, y_test


def _parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model_dir", type=str)
    parser.add_argument("--sm-model-dir", type=str, default=os.environ.get("SM_MODEL_DIR"))
    parser.add_argument("--train", type=str, default=os.environ.get("SM_CHANNEL_TRAINING"))
    parser.add_argument("--hosts", type=list, default=json.loads(os.environ.get("SM_HOSTS")))
    parser.add_argument("--current-host", type=str, default=os.environ.get("SM_CURRENT_HOST"))
    return parser.parse_known_args()


if __name__ == "__main__":
    args, unknown = _parse_args()
    train_data, train_labels = _load_training_data(args.train)
    eval_data, eval_labels = _load_testing_data(args.train)
    print("Tensorflow version: ", tf.__version__)
    print("TF_CONFIG", os.environ.get("TF_CONFIG"))
    communication_options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.NCCL
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=communication_options)
    print("Number of devices: {}".format(strategy.num_replicas_in_sync))
    mnist_classifier = model(train_data, train_labels, eval_data, eval_labels, strategy)
    task_type, task_id = (strategy.cluster_resolver.task_type, strategy.cluster_resolver.task_id)
    print("Task type: ", task_type)
    print("Task id: ", task_id)
    if strategy.cluster_resolver.task_id == 0:
        print("Saving model on chief")
        mnist_classifier.save(os.path.join(args.sm_model_dir, "000000001"))
    else:
        print("Saving model in /tmp on worker")
        mnist_classifier.save(f"/tmp/{strategy.cluster_resolver.task_id}")
