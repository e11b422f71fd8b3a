"""One training job through the SageMaker SDK v2's `TensorFlow` estimator in local mode, as a user writes
it (the README's example). Run by the SDK's virtualenv (tests/container/sdk_local_mode.py), not by the
test environment: it imports nothing of this repository. Its one argument is a JSON job (made by `fit`
in test_sdk_v2_local_mode.py); it exits non-zero when `fit` raises."""

from __future__ import annotations

import json
import logging
import sys

from sagemaker.local import LocalSession
from sagemaker.tensorflow import TensorFlow


def main(job: dict) -> None:
    session = LocalSession()
    session.config = {"local": {"local_code": True}}  # the source folder is mounted, not uploaded
    estimator = TensorFlow(
        image_uri=job["image"],
        entry_point=job["entry_point"],
        source_dir=job["source_dir"],
        role="arn:aws:iam::111111111111:role/SageMakerRole",  # never used in local mode
        instance_count=job["hosts"],
        instance_type="local",
        distribution=job["distribution"],
        # Checked by the SDK for some distributions (multi_worker_mirrored_strategy needs TF >= 2.9).
        framework_version=job["framework_version"],
        py_version=job["py_version"],
        hyperparameters=job["hyperparameters"],
        environment=job["environment"],
        output_path=job["output_path"],
        # The image's own log level: DEBUG shows the whole mpirun command (the tests read it).
        container_log_level=job.get("container_log_level", logging.INFO),
        base_job_name="sdk2-estimator",
        sagemaker_session=session,
    )
    estimator.fit({name: f"file://{path}" for name, path in job["channels"].items()})


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    main(json.loads(sys.argv[1]))
