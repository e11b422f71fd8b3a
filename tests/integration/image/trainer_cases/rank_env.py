"""Test stand-in for the rank launcher's environment: SAGETRAIN_* rank variables and a per-rank error file
from OpenMPI's OMPI_COMM_WORLD_* variables, then exec the command (``rank_env.py <error-dir> cmd…``)."""

import os
import sys
from pathlib import Path

error_dir, command = sys.argv[1], sys.argv[2:]
rank = os.environ["OMPI_COMM_WORLD_RANK"]
os.environ.update(
    SAGETRAIN_RANK=rank,
    SAGETRAIN_SIZE=os.environ["OMPI_COMM_WORLD_SIZE"],
    SAGETRAIN_LOCAL_RANK=os.environ["OMPI_COMM_WORLD_LOCAL_RANK"],
    SAGETRAIN_LOCAL_SIZE=os.environ["OMPI_COMM_WORLD_LOCAL_SIZE"],
    SAGETRAIN_ERROR_FILE=str(Path(error_dir) / f"error-rank-{rank}.json"),
)
os.execvp(command[0], command)
