"""Figure 18: a new user's job, paired. One 2-host training job (containers algo-1 and algo-2, one rank
per host), run three ways on the same channel:

- the managed trainer on Horovod: the image's ``train`` with payload/model_module.py as the program and no
  engine named (a model module on 2 hosts gets Horovod over MPI);
- the managed trainer on MultiWorkerMirroredStrategy: the same, with
  ``sagemaker_multi_worker_mirrored_strategy_enabled`` (as figure 10 sets it);
- the plain Horovod script a user would write instead (payload/plain_horovod_script.py): ``train`` runs it
  as a script on the MPI engine, with ``sagemaker_mpi_enabled`` as figure 9's Horovod side does.

The channel ``train`` (FullyReplicated): 40,000 records in 10,000 TFRecord files of 4, the 28×28×1 image
and int64 label model_module.parse_record reads, written once into the system's temp folder by figures
13-14's writer (figures/channel_scaling.py) and reused by later runs. Every side: the same model and
parser, global batch 128 (64 per rank), shuffle buffer 10,000, seed 0, 10 epochs. Each side as a new
user runs it: the trainer with its defaults (a checkpoint after every epoch, the model exported at the
end as a SavedModel and a .keras file), the script saving its model as a .keras file at the end (what
SageMaker uploads), as scripts do.

Job wall time and records/s over epochs 2-10 per side, exactly once checked on every side, and a pair's
sides in rotating order: figures/paired_job.py. At most 3 pairs: each job takes minutes on 2 cores (ten
epochs of 40,000 records).
"""

from __future__ import annotations

from benchlib.context import Context
from benchlib.report import Row

from figures.channel_scaling import ChannelKind
from figures.paired_job import SCRIPT, PairedJob, Side
from figures.paired_job import samples as paired_samples

NUMBER = 18
TITLE = "a new user's job, 2 hosts, 10 epochs: managed trainer (Horovod, MWMS) vs plain Horovod script"
FILES = 10_000
GLOBAL_BATCH = 128  # as figure 9's: 64 per rank on 2 hosts
EPOCHS = 10
MAX_PAIRS = 3

JOB = PairedJob(
    number=NUMBER,
    # The figure's channel, in the terms of the channel writer figures 13 and 14 share (its own folder: the
    # folder's name is a digest of the channel's shape).
    channel=ChannelKind(
        number=NUMBER,
        name="new-user-job",
        counts=(FILES,),
        records_per_file=4,
        image_shape=(28, 28, 1),  # model_module.IMAGE_SHAPE (the harness cannot import TensorFlow's side)
        batch_size=GLOBAL_BATCH,
        timed_epochs=lambda _count: EPOCHS - 1,
        runs_cap=lambda _count: MAX_PAIRS,
    ),
    files=FILES,
    hosts=2,
    hyperparameters={"epochs": EPOCHS, "batch_size": GLOBAL_BATCH, "shuffle_buffer": 10_000, "seed": 0},
    sides={
        "horovod": Side("trainer, Horovod", "managed trainer on Horovod", "model_module.py"),
        "mwms": Side(
            "trainer, MWMS",
            "managed trainer on MultiWorkerMirroredStrategy",
            "model_module.py",
            {"sagemaker_multi_worker_mirrored_strategy_enabled": True},
        ),
        SCRIPT: Side(
            "plain Horovod script",
            "plain Horovod script",
            "plain_horovod_script.py",
            {"sagemaker_mpi_enabled": True},
            managed=False,
        ),
    },
    max_pairs=MAX_PAIRS,
)


def samples(ctx: Context) -> list[Row]:
    return paired_samples(ctx, JOB)
