"""Read and validate the SageMaker job configuration under a root folder (``/opt/ml`` by default)."""

from sagetrain.config.job import JobConfig, load_job_config
from sagetrain.config.paths import Paths, root_from_environ

__all__ = ["JobConfig", "Paths", "load_job_config", "root_from_environ"]
