"""sagetrain: the training entry of this image.

The folder tree is the pipeline: ``config`` (read and validate /opt/ml) → ``plan`` (pure decisions) →
``launch`` (processes, sshd, coordinator, engines) → ``run`` (user code) → ``report`` (success/failure).
Importing this package has no side effects and never imports TensorFlow.
"""
