"""Figure 14: a channel of large files (up to 1,000 TFRecord files of 64 records of 64×64×4 bytes, 1 MiB
each, 1 GiB in all), 4 ranks on 2 hosts, FullyReplicated and ShardedByS3Key: start → first batch, the
listing's peak memory and records/s through the managed trainer vs a plain tf.data read of the same files
in the same containers. How it is measured: figures/channel_scaling.py."""

from __future__ import annotations

from benchlib.context import Context
from benchlib.report import Row

from figures.channel_scaling import ChannelKind
from figures.channel_scaling import samples as channel_samples

NUMBER = 14
TITLE = "channel of large files, 4 ranks on 2 hosts: managed trainer vs plain tf.data"
KIND = ChannelKind(
    number=NUMBER,
    name="large",
    counts=(10, 100, 1_000),
    records_per_file=64,
    image_shape=(64, 64, 4),
    batch_size=512,
    timed_epochs=lambda count: {10: 8, 100: 2}.get(count, 1),
    runs_cap=lambda count: 1 if count >= 1_000 else 2,
)


def samples(ctx: Context) -> list[Row]:
    return channel_samples(ctx, KIND, "large files")
