"""Figure 19: figure 14's large files with training on both sides. Figure 14 compares the managed trainer,
whose ranks train in lockstep, with plain tf.data readers that only read; this figure gives the same
channel, model and layout to the plain Horovod script a user would write instead, so both sides train.

One job per side and pair on figure 14's channel of 100 TFRecord files of 64 records of 64×64×4 bytes
(1 MiB each; FullyReplicated, written once by figures/channel_scaling.py and shared with figure 14),
2 hosts of 2 ranks (figure 14's layout), global batch 512, no shuffle and no checkpoints (as in figure
14), seed 0, 20 epochs (13 steps each), figure 14's model module (payload/channel_model.py: average
pooling and one dense layer, so a step costs next to nothing beside its collective):

- the managed trainer on Horovod: the image's ``train`` with channel_model.py as the program;
- the plain Horovod script (payload/plain_horovod_script.py, with channel_model's model and parser):
  ``train`` runs it as a script on the MPI engine.

MultiWorkerMirroredStrategy is not a side: it runs one worker per host. At most 4 pairs, so that each side
goes first as often. Job wall time and records/s over epochs 2-20, exactly once on both sides, and the
rotating order: figures/paired_job.py.
"""

from __future__ import annotations

from benchlib.context import Context
from benchlib.report import Row

from figures.channel_scaling import HOSTS, job_hyperparameters
from figures.large_files import KIND as FIGURE_14_CHANNEL
from figures.paired_job import SCRIPT, PairedJob, Side
from figures.paired_job import samples as paired_samples

NUMBER = 19
TITLE = "figure 14's 100 large files, both sides training, 2x2 ranks: managed trainer vs plain Horovod script"
EPOCHS = 20
FILES = 100  # one of figure 14's channels

JOB = PairedJob(
    number=NUMBER,
    channel=FIGURE_14_CHANNEL,
    files=FILES,
    hosts=HOSTS,
    hyperparameters=job_hyperparameters(FIGURE_14_CHANNEL, EPOCHS),
    sides={
        "horovod": Side("trainer, Horovod", "managed trainer on Horovod", "channel_model.py"),
        SCRIPT: Side(
            "plain Horovod script",
            "plain Horovod script",
            "plain_horovod_script.py",
            {"model_module": "channel_model"},
            managed=False,
        ),
    },
    max_pairs=4,  # with an even number of pairs (--runs 2 or 4) each side goes first as often
)


def samples(ctx: Context) -> list[Row]:
    return paired_samples(ctx, JOB)
