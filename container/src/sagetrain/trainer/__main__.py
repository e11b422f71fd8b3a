"""``python -m sagetrain.trainer <module.py>``: how the launcher runs a Keras model module on every rank."""

import os
import sys

# TensorFlow's C++ start-up chatter would bury the epoch lines; users can still raise it.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from sagetrain.trainer.run import main

sys.exit(main())
