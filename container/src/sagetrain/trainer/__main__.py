"""``python -m sagetrain.trainer <module.py>``: how the launcher runs a Keras model module on every rank."""

import os
import sys

from sagetrain.contracts import QUIET_TF_LOG_LEVEL, TF_LOG_LEVEL_VAR

# As the launcher sets it for every program (run by hand too): TensorFlow's start-up chatter would bury
# the epoch lines; the environment can still raise it.
os.environ.setdefault(TF_LOG_LEVEL_VAR, QUIET_TF_LOG_LEVEL)

# After the variable: TensorFlow reads it when imported.
from sagetrain.trainer.run import main

sys.exit(main())
