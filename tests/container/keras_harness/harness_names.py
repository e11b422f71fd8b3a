"""The variables the test harness (sitecustomize.py, beside this file) reads, spelled once: the harness
imports this module from its own folder on PYTHONPATH, the tests as ``keras_harness.harness_names``."""

OUT_VAR = "SAGETRAIN_HARNESS_OUT"  # where it writes each worker's weights (and predictions)
MNIST_VAR = "SAGETRAIN_HARNESS_MNIST"  # the MNIST-shaped file Keras' mnist.load_data() gets
MAX_TAKE_VAR = "SAGETRAIN_HARNESS_MAX_TAKE"  # caps Dataset.take(count)
REFERENCE_VAR = "SAGETRAIN_HARNESS_REFERENCE"  # "1": the one-process reference run
PROBE_VAR = "SAGETRAIN_HARNESS_PROBE"  # a .npy of inputs whose predictions it writes
