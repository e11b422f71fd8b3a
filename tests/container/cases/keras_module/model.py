"""A Keras 3 model module: a small regression on a CSV channel (`label_column` names the target).

Importing it records which host this rank runs on (each rank imports it), so a test can check that
every rank knows its own host.
"""

import json
import os
import socket
from pathlib import Path

import keras


def _record_identity() -> None:
    output = Path(os.environ.get("SM_OUTPUT_DATA_DIR", "/opt/ml/output/data"))
    output.mkdir(parents=True, exist_ok=True)
    rank = os.environ.get("SAGETRAIN_RANK", "0")
    training_env = json.loads(os.environ.get("SM_TRAINING_ENV", "{}"))
    identity = {
        "rank": int(rank),
        "local_rank": int(os.environ.get("SAGETRAIN_LOCAL_RANK", "0")),
        "size": int(os.environ.get("SAGETRAIN_SIZE", "1")),
        "sm_current_host": os.environ.get("SM_CURRENT_HOST"),
        "current_host": os.environ.get("CURRENT_HOST"),
        "training_env_current_host": training_env.get("current_host"),
        "hostname": socket.gethostname(),
    }
    (output / f"identity-rank-{rank}.json").write_text(json.dumps(identity))


_record_identity()


def build_model(hp):
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(hp.get("units", 8), activation="tanh"),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(hp.get("learning_rate", 0.05)), loss="mse")
    return model
