"""How large a job's configuration may be: SageMaker's documented limits, and this image's own.

SageMaker's limits are those of the CreateTrainingJob request, as its service model states them
(botocore's ``sagemaker/2017-07-24/service-2.json``, the source of the SageMaker API Reference):

- ``HyperParameters``: a map of at most 100 entries; a key (``HyperParameterKey``) of at most 256
  characters, a value (``HyperParameterValue``) of at most 2,500 (the reference's prose still says 256
  for both; the shapes it is generated from say 2,500 for values).
- ``InputDataConfig``: 1 to 20 channels; a ``ChannelName`` of 1 to 64 characters.
- ``ResourceConfig.InstanceCount``: an integer of at least 0 and no maximum in the API; how many
  instances a job may have is an account quota, raised on request.
- A tuning job's training jobs get its ``StaticHyperParameters`` (the same 100-entry map) plus the
  hyperparameters it tunes (at most 30 ranges or 100 ``AutoParameters``, names and values of at most
  256 characters) and ``_tuning_objective_metric``: more than 100 in one hyperparameters.json.

This image's limits never refuse what SageMaker writes. Where one is higher than SageMaker's, a local
run (SageMaker local mode, our local cluster, a hand-written tree) may go up to it: the message then
says both, since such a job would not pass CreateTrainingJob. Every limit exists because what it bounds
becomes program arguments and environment variables, which Linux caps (launch/spec.py), or is read
into memory before anything else is checked.
"""

from __future__ import annotations

SAGEMAKER_MAX_HYPERPARAMETERS = 100
SAGEMAKER_MAX_HYPERPARAMETER_NAME = 256
SAGEMAKER_MAX_HYPERPARAMETER_VALUE = 2_500
SAGEMAKER_MAX_CHANNELS = 20

# 100 static + 100 auto-tuned + the objective metric fits, with room for what the SDKs add.
MAX_HYPERPARAMETERS = 256
# A name becomes ``--name`` and ``SM_HP_<NAME>``; none longer than SageMaker's serves anyone.
MAX_HYPERPARAMETER_NAME = SAGEMAKER_MAX_HYPERPARAMETER_NAME
# A value becomes one program argument, which Linux caps at 128 KiB: 16,384 characters stay within it
# even at 4 UTF-8 bytes each, with room for how the toolkit spells lists and dicts.
MAX_HYPERPARAMETER_VALUE = 16_384
# Each channel adds SM_CHANNEL_<NAME> to every process's environment; 100 is five times SageMaker's.
MAX_CHANNELS = 100
# Every host's name goes into mpirun's host list (one argument) and TF_CONFIG (one variable), each
# capped at 128 KiB by Linux; a parameter-server TF_CONFIG names every host twice, with a port. At both
# limits it is 104 KiB (tests/unit/test_config.py checks it); SageMaker's algo-1 … algo-2048 take 17,325
# characters, local mode's algo-N-xxxxx 29,613.
MAX_HOSTS = 2_048  # 16,384 GPUs on 8-GPU instances
MAX_HOST_NAME_CHARACTERS = 32_768  # all host names together
# Ranks per host (sagemaker_mpi_num_of_processes_per_host): one per GPU, or per CPU core, is usual; past a
# few per device they only contend, and mpirun tries to start however many it is given (a billion hangs it).
MAX_PROCESSES_PER_CPU_OR_GPU = 8

# The largest file SageMaker writes is a tuning job's hyperparameters.json at those limits: 100 static
# entries of 256 + 2,500 characters and 101 tuned of 256 + 256 are under 3.93 MB even if every character
# is written as the 12-byte escape of an astral one (\ud83d\ude00). A larger file is no SageMaker
# configuration, and is refused before it is read into memory.
MAX_CONFIG_FILE_BYTES = 4 * 1024 * 1024
