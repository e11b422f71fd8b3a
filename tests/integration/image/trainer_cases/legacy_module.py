"""A tf-keras (Keras 2) model module, run with TF_USE_LEGACY_KERAS=1; left uncompiled so the trainer
compiles it from the hyperparameters optimizer/learning_rate/loss/metrics."""

import tf_keras


def build_model(hp):
    return tf_keras.Sequential(
        [
            tf_keras.Input((hp.get("features", 3) + 1,)),
            tf_keras.layers.Dense(8, activation="tanh"),
            tf_keras.layers.Dense(1),
        ]
    )
