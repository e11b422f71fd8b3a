"""Figures 13 and 14, what both sides share inside the container: the TFRecord image parser and the
first-batch probe (seconds since this process started, peak memory). TensorFlow only, no Keras, so the
plain reader imports no more than a user's plain tf.data script would."""

import os
import resource
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tensorflow as tf

_MEMORY: dict[str, float] = {}


def process_seconds() -> float:
    """Seconds since this process started, from the kernel's own start time (clock ticks since boot)."""
    started_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return uptime - started_ticks / os.sysconf("SC_CLK_TCK")


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def mark_before_listing() -> None:
    """Remember the peak so far and the current RSS, then reset the peak (VmHWM) to the current RSS, so
    the next reading is the peak of what follows alone."""
    _MEMORY["listing_from"] = process_seconds()
    _MEMORY["peak_before"] = _status_mb("VmHWM")
    _MEMORY["rss_before"] = _status_mb("VmRSS")
    try:
        Path("/proc/self/clear_refs").write_text("5")  # "5": reset the peak resident set size
        _MEMORY["reset"] = 1.0
    except OSError:  # without the reset the growth is an upper bound (an earlier peak counts too)
        _MEMORY["reset"] = 0.0


def first_batch_line(who: str) -> str:
    """``BENCH first_batch …``: seconds since process start and since ``mark_before_listing``, peak RSS so
    far, and the peak growth since ``mark_before_listing`` (listing, sharding and counting the channel,
    and the first batch)."""
    peak_after = _status_mb("VmHWM")
    peak = max(
        peak_after, _MEMORY.get("peak_before", 0.0), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    )
    growth = peak_after - _MEMORY.get("rss_before", 0.0)
    seconds = process_seconds()
    return (
        f"BENCH first_batch {who} seconds={seconds:.3f} "
        f"listing_s={seconds - _MEMORY.get('listing_from', 0.0):.3f} peak_mb={peak:.1f} "
        f"listing_mb={growth:.1f} peak_reset={int(_MEMORY.get('reset', 0))} at={time.time():.3f}"
    )


def image_shape(hp: Mapping[str, Any]) -> tuple[int, int, int]:
    height, width, depth = (int(value) for value in hp.get("image_shape", (28, 28, 1)))
    return height, width, depth


def parse_image_record(serialized: tf.Tensor, hp: Mapping[str, Any]) -> tuple[tf.Tensor, tf.Tensor]:
    parsed = tf.io.parse_single_example(
        serialized,
        {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)},
    )
    image = tf.reshape(tf.cast(tf.io.decode_raw(parsed["image"], tf.uint8), tf.float32), image_shape(hp))
    return image, parsed["label"]
