"""The trainer pins one GPU per rank (collectives._pin_gpu), which TensorFlow allows only before its devices
are initialised. No GPU here, so check the precondition instead: importing the trainer, starting the
Horovod engine and connecting to the other ranks must leave TensorFlow's eager context uninitialised (a tensor
made at import once broke every model-module job on GPU hosts)."""

import subprocess
import sys

CHECK = """
import importlib, pkgutil
import sagetrain.trainer as trainer
from tensorflow.python.eager import context
for module in pkgutil.iter_modules(trainer.__path__):
    if module.name != "__main__":
        importlib.import_module("sagetrain.trainer." + module.name)
print("after imports", context.context()._initialized)
from sagetrain.contracts import RankPlace
from sagetrain.trainer.collectives import HorovodCollectives
collectives = HorovodCollectives(RankPlace(rank=0, size=1))
print("after engine", context.context()._initialized)
collectives.connect()
print("after connect", context.context()._initialized)
"""


def test_trainer_leaves_devices_uninitialised_until_the_engine_has_pinned_the_gpu():
    # A fresh interpreter: this pytest process has initialised TensorFlow long ago.
    completed = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=300, check=False
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = [line for line in completed.stdout.splitlines() if line.startswith("after ")]
    assert lines == ["after imports False", "after engine False", "after connect False"], completed.stdout
