"""Figure 9: samples/s of Keras `fit` on 2 hosts, MultiWorkerMirroredStrategy (the TF_CONFIG engine, the
image's patched Keras 3) vs Horovod's DistributedOptimizer (the MPI engine): the same model, TFRecord data,
shuffle buffer and global batch (payload/distributed_fit.py). Throughput is taken on algo-1 between the
first and the last epoch line by the time Docker received them, so start-up and tracing are out."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from benchlib.cluster import JobFailed, JobSpec, run_job
from benchlib.context import DATA_RECORDS, PAYLOAD, Context, alternating
from benchlib.report import NO_TARGET, Row

NUMBER = 9
TITLE = "Keras fit samples/s, 2 hosts: MultiWorkerMirroredStrategy vs Horovod"
EPOCHS = 4
HYPERPARAMETERS = {"epochs": EPOCHS, "batch_size": 128, "shuffle_buffer": 10_000, "seed": 0}
ENGINES = {
    "mwms": {"sagemaker_multi_worker_mirrored_strategy_enabled": True},
    "horovod": {"sagemaker_mpi_enabled": True},
}


def job_spec(
    ctx: Context,
    engine: str,
    extra: Mapping[str, object] | None = None,
    files: Mapping[str, Path] | None = None,
) -> JobSpec:
    """The figure's job; `extra` hyperparameters and `files` put over the image's are the lab's variants
    (benchmarks/lab/mwms_variants.py)."""
    return JobSpec(
        image=ctx.image,
        hosts=2,
        code=PAYLOAD,
        program="distributed_fit.py",
        hyperparameters={**HYPERPARAMETERS, **ENGINES[engine], **(extra or {})},
        channels={"train": ctx.data_dir() / "train"},
        files=files or {},
        timeout_seconds=900,
    )


def samples_per_second(
    ctx: Context,
    engine: str,
    extra: Mapping[str, object] | None = None,
    files: Mapping[str, Path] | None = None,
) -> float:
    spec = job_spec(ctx, engine, extra, files)
    job = run_job(ctx.created, spec, ctx.workdir).require_success()
    master = job.hosts[0]
    epochs = [line for line in master.log if "epoch=" in line.text and "loss=" in line.text]
    if len(epochs) != EPOCHS:
        raise JobFailed(
            f"{engine}: expected {EPOCHS} epoch lines on algo-1, got {len(epochs)}:\n{master.tail()}"
        )
    return DATA_RECORDS * (EPOCHS - 1) / (epochs[-1].at - epochs[0].at)


def samples(ctx: Context) -> list[Row]:
    pairs = []
    for index, mwms_first in alternating(ctx.runs):
        order = ["mwms", "horovod"] if mwms_first else ["horovod", "mwms"]
        measured = {engine: samples_per_second(ctx, engine) for engine in order}
        ctx.say(
            f"[{NUMBER}] run {index + 1}: MWMS {measured['mwms']:.0f}/s, Horovod {measured['horovod']:.0f}/s"
        )
        pairs.append((measured["mwms"], measured["horovod"]))
    note = f"{DATA_RECORDS} records, global batch 128, epochs 2-{EPOCHS} timed"
    return [Row(NUMBER, TITLE, "MWMS fit", "Horovod fit", "samples/s", tuple(pairs), NO_TARGET, note)]
