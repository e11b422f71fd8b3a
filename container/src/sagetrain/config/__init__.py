"""Read and validate the SageMaker job configuration under a root folder (``/opt/ml`` by default): one
module per file, ``job.py`` reading them all. Importing this package imports none of them, so a module
that needs one SageMaker name (``config.paths``, ``config.sdk_source_code``) costs only that module."""
