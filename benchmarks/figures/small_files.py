"""Figure 13: a channel of many small files (up to 100,000 TFRecord files of 2 records, 1.6 KiB each), 4
ranks on 2 hosts, FullyReplicated and ShardedByS3Key: start → first batch, the listing's peak memory and
records/s through the managed trainer vs a plain tf.data read of the same files in the same containers.
How it is measured: figures/channel_scaling.py."""

from __future__ import annotations

from benchlib.context import Context
from benchlib.report import Row

from figures.channel_scaling import ChannelKind
from figures.channel_scaling import samples as channel_samples

NUMBER = 13
TITLE = "channel of small files, 4 ranks on 2 hosts: managed trainer vs plain tf.data"
KIND = ChannelKind(
    number=NUMBER,
    name="small",
    counts=(1_000, 10_000, 100_000),
    records_per_file=2,
    image_shape=(28, 28, 1),
    batch_size=4096,
    # Enough timed records at the small counts; one timed epoch and one run at 100,000 files keep the
    # figure within its share of half an hour on 2 cores.
    timed_epochs=lambda count: {1_000: 8, 10_000: 2}.get(count, 1),
    runs_cap=lambda count: 1 if count >= 100_000 else 2,
)


def samples(ctx: Context) -> list[Row]:
    return channel_samples(ctx, KIND, "small files")
