"""Figure 7: image sizes, uncompressed (`docker image inspect` .Size) and compressed (`docker save |
gzip -1`, what a registry push roughly moves), against AWS's published sizes of its TF 2.21 images
(local builds: 16.5 GB GPU, 5.5 GB CPU). Sizes are deterministic: one sample each."""

from __future__ import annotations

import subprocess

from benchlib.cluster import JobFailed
from benchlib.context import Context
from benchlib.report import NO_TARGET, Row, Target, TargetKind

NUMBER = 7
TITLE = "image sizes vs AWS TF 2.21 published sizes"
GB = 1e9
AWS_PUBLISHED = {"gpu": 16.5, "cpu": 5.5}
TARGETS = {"gpu": 6.0, "cpu": 2.7}
CHUNK = 1 << 20


def compressed_size(docker: str, image: str) -> int:
    saver = subprocess.Popen([docker, "save", image], stdout=subprocess.PIPE)
    gzip = subprocess.Popen(["gzip", "-1"], stdin=saver.stdout, stdout=subprocess.PIPE)
    if saver.stdout is not None:
        saver.stdout.close()  # gzip holds the pipe now; docker save sees SIGPIPE if gzip dies
    total = 0
    if gzip.stdout is not None:
        while chunk := gzip.stdout.read(CHUNK):
            total += len(chunk)
    if gzip.wait(timeout=60) != 0 or saver.wait(timeout=60) != 0:
        raise JobFailed(f"`docker save {image} | gzip -1` failed")
    return total


def samples(ctx: Context) -> list[Row]:
    rows = []
    for device, image in (("gpu", ctx.gpu_image), ("cpu", ctx.image)):
        size = ctx.docker.run(["image", "inspect", "--format", "{{.Size}}", image], check=False).strip()
        if not size:
            ctx.say(f"[7] {image} does not exist here: no {device.upper()} row")
            continue
        ctx.say(f"[7] measuring {image} compressed (docker save | gzip -1)")
        packed = compressed_size(ctx.docker.executable, image)
        published = AWS_PUBLISHED[device]
        rows.append(
            Row(NUMBER, f"{device.upper()} image size, uncompressed", image, f"AWS TF 2.21 {device.upper()}",
                "GB", ((int(size) / GB, published),), Target(TargetKind.OURS_AT_MOST, TARGETS[device]))
        )  # fmt: skip
        rows.append(
            Row(NUMBER, f"{device.upper()} image size, docker save | gzip -1", image,
                f"AWS TF 2.21 {device.upper()} uncompressed", "GB", ((packed / GB, published),), NO_TARGET,
                "AWS publishes no compressed size; the ratio is against its uncompressed size")
        )  # fmt: skip
    return rows
