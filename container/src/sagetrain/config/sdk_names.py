"""The SageMaker SDK v3's names for what ``ModelTrainer`` with ``SourceCode`` puts in a job: its channels,
the folder of its driver scripts, the file describing the source code, and the variables its ``sm_train.sh``
has in its environment (its ``environment.py`` writes them to ``sm_training.env``, which the script
sources). Names as in sagemaker-train's ``sagemaker/train/constants.py`` and ``environment.py``.

Nothing is imported here: the image's interpreter-start hook (sagetrain/sdk/__init__.py) reads these names
in every Python process before it decides to import anything else.
"""

DRIVERS_CHANNEL = "sm_drivers"
CODE_CHANNEL = "code"
SOURCE_CODE_FILE = "sourcecode.json"
# The folder of the driver scripts in the drivers channel.
DRIVERS_FOLDER = "distributed_drivers"
# Set when the job has a sourcecode.json; when its distributed.json is not empty (distributed= was given);
# always.
SOURCE_DIR_VAR = "SM_SOURCE_DIR"
DISTRIBUTED_CONFIG_VAR = "SM_DISTRIBUTED_CONFIG"
HOST_COUNT_VAR = "SM_HOST_COUNT"
