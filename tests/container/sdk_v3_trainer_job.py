"""One training job through the SageMaker SDK v3's own ModelTrainer in local-container mode, as a user
writes it. Run by the SDK's virtualenv (tests/container/sdk_local_mode.py), not by the test environment:
it imports nothing of this repository. Its one argument is a JSON job (TrainerJob in
test_sdk_v3_model_trainer.py); it exits non-zero when ModelTrainer.train raises."""

from __future__ import annotations

import json
import logging
import sys

from sagemaker.train.configs import Compute, InputData, SourceCode
from sagemaker.train.distributed import MPI
from sagemaker.train.model_trainer import Mode, ModelTrainer


def main(job: dict) -> None:
    source = job["source_code"]
    trainer = ModelTrainer(
        training_image=job["image"],
        training_mode=Mode.LOCAL_CONTAINER,
        local_container_root=job["root"],
        base_job_name=job["name"],
        compute=Compute(instance_type="local_cpu", instance_count=job["hosts"]),
        source_code=SourceCode(**source) if source is not None else None,
        distributed=MPI(**job["mpi"]) if job["mpi"] is not None else None,
        hyperparameters=job["hyperparameters"],
        environment=job["environment"],
    )
    channels = [InputData(channel_name=name, data_source=path) for name, path in job["channels"].items()]
    trainer.train(input_data_config=channels)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    main(json.loads(sys.argv[1]))
