"""Run the managed trainer as the launcher would: ``python -m sagetrain.trainer module.py`` on every rank,
under real ``mpirun`` with Horovod for more than one rank, or as one process per simulated host with
TF_CONFIG (MultiWorkerMirroredStrategy, workers on localhost ports), on an /opt/ml tree written as
SageMaker writes it, with the SAGETRAIN_* environment (and the host's SM_CURRENT_HOST) the launcher gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sagetrain
from keras_workers.launch import free_ports, tf_config
from sagetrain import contracts
from sagetrain.config.channels import Channel, S3Distribution
from sagetrain.config.job_files import JobFiles
from sagetrain.config.toolkit_env import CURRENT_HOST_VAR
from sagetrain.deadline import Deadline
from sagetrain.plan.tf_config import TF_CONFIG_VAR
from sagetrain.trainer.notes import PREFIX as NOTE_PREFIX

CASES = Path(__file__).resolve().parent
REPO = CASES.parents[3]
SAGETRAIN_ROOT = Path(sagetrain.__file__).resolve().parents[1]
HOST = "algo-1"
# A run that takes longer than this is hung (e.g. a rank waiting in a collective for a dead peer).
RUN_DEADLINE_SECONDS = 300


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str
    root: Path

    @property
    def report_dir(self) -> Path:
        return self.root / "report"

    def report(self, rank: int) -> dict:
        return json.loads((self.report_dir / f"rank-{rank}.json").read_text())

    def weights(self, rank: int) -> list[np.ndarray]:
        with np.load(self.report_dir / f"rank-{rank}-weights.npz") as arrays:
            return [arrays[key] for key in sorted(arrays.files, key=lambda name: int(name.split("_")[1]))]

    def error(self, rank: int) -> dict | None:
        path = self.root / "errors" / f"error-rank-{rank}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def epoch_lines(self) -> list[str]:
        return [line for line in self.stdout.splitlines() if line.startswith("epoch=")]

    def notes(self) -> list[str]:
        """The trainer's own lines on stderr, without their ``sagetrain.trainer: `` prefix."""
        return [
            line.removeprefix(NOTE_PREFIX)
            for line in self.stderr.splitlines()
            if line.startswith(NOTE_PREFIX)
        ]


def run_trainer(
    root: Path,
    module: Path,
    hyperparameters: dict,
    ranks: int = 1,
    distribution: str = "FullyReplicated",
    extra_env: dict | None = None,
    engine: str = "horovod",
) -> Run:
    """``root`` is the /opt/ml tree; its channels are the folders under ``input/data``."""
    data = root / "input" / "data"
    channels = sorted(path.name for path in data.iterdir() if path.is_dir()) if data.is_dir() else []
    JobFiles(
        hosts=(HOST,),
        hyperparameters=hyperparameters,
        channels=tuple(Channel(name, s3_distribution=S3Distribution(distribution)) for name in channels),
    ).write(root, HOST)
    (root / "errors").mkdir(parents=True, exist_ok=True)
    job_env = {
        "SAGEMAKER_BASE_DIR": str(root),
        contracts.TRAINER_REPORT_DIR_VAR: str(root / "report"),
        contracts.ENGINE_VAR: "horovod" if ranks > 1 else "single",
        CURRENT_HOST_VAR: HOST,
        # Where this process found sagetrain: the work tree on a host, the installed package in the image.
        "PYTHONPATH": os.pathsep.join(filter(None, [str(SAGETRAIN_ROOT), os.environ.get("PYTHONPATH")])),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        **(extra_env or {}),
    }
    trainer = [sys.executable, "-m", "sagetrain.trainer", str(module)]
    if ranks > 1 and engine == "multi_worker_mirrored":
        return _run_workers(root, trainer, ranks, job_env)
    if ranks == 1:
        command = trainer
        job_env.update(contracts.ONE_PROCESS.to_env())
        job_env[contracts.ERROR_FILE_VAR] = str(root / "errors" / "error-rank-0.json")
    else:
        exported = [argument for name in job_env for argument in ("-x", name)]
        command = [
            "mpirun",
            "-np",
            str(ranks),
            "--oversubscribe",
            "--bind-to",
            "none",
            *exported,
            sys.executable,
            str(CASES / "rank_env.py"),
            str(root / "errors"),
            *trainer,
        ]
    environment = {
        **os.environ,
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        **job_env,
    }
    completed = subprocess.run(
        command, env=environment, capture_output=True, text=True, timeout=RUN_DEADLINE_SECONDS, check=False
    )
    return Run(completed.returncode, completed.stdout, completed.stderr, root)


def step_ids(root: Path, rank: int) -> list[list[int]]:
    """The record ids of each training step rank ``rank`` ran, in order."""
    path = root / "ids" / f"ids-rank-{rank}.txt"
    return [[int(value) for value in line.split()] for line in path.read_text().splitlines()]


def _run_workers(root: Path, trainer: list[str], workers: int, job_env: dict[str, str]) -> Run:
    """One trainer process per simulated host, as the TF_CONFIG engine starts them; rank 0's stdout. Each
    writes to its own files (a pipe nobody reads would stall a worker, and its peers in a collective), and
    all of them share one deadline."""
    ports = free_ports(workers)
    logs = root / "worker-logs"
    logs.mkdir(parents=True, exist_ok=True)
    processes = []
    for rank in range(workers):
        environment = {
            **os.environ,
            **job_env,
            **contracts.RankPlace(rank=rank, size=workers).to_env(),
            contracts.ENGINE_VAR: "multi_worker_mirrored",
            contracts.ERROR_FILE_VAR: str(root / "errors" / f"error-rank-{rank}.json"),
            TF_CONFIG_VAR: tf_config(ports, rank),
        }
        with (logs / f"{rank}.out").open("w") as out, (logs / f"{rank}.err").open("w") as err:
            processes.append(subprocess.Popen(trainer, env=environment, stdout=out, stderr=err))
    deadline = Deadline(RUN_DEADLINE_SECONDS, "every trainer worker to exit")
    try:
        for process in processes:
            process.wait(timeout=max(deadline.remaining(), 0.0))
    finally:
        for process in processes:
            process.kill()
            process.wait()
    codes = [process.returncode for process in processes]
    returncode = next((code for code in codes if code != 0), 0)
    stderr = "\n".join((logs / f"{rank}.err").read_text(errors="replace") for rank in range(workers))
    return Run(returncode, (logs / "0.out").read_text(errors="replace"), stderr, root)
