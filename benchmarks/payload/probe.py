"""Figures 13 and 14: who the model module's first-batch probe speaks for, set by channel_job.py for the
input-path readers and read by channel_model.py's probe. No TensorFlow: channel_job.py imports it."""

from collections.abc import Mapping

from sagetrain.contracts import MPI_RANK_VAR

PROBE_LABEL_VAR = "BENCH_PROBE_LABEL"


def probe_label(environ: Mapping[str, str]) -> str:
    """The probe's ``impl=… `` fields: the label channel_job.py gave, else a rank of the trainer
    (mpirun's rank number)."""
    return environ.get(PROBE_LABEL_VAR) or f"impl=trainer rank={environ.get(MPI_RANK_VAR, '0')}"
