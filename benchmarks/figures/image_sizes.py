"""Figure 7: image sizes, uncompressed (`docker image inspect` .Size) and compressed (`docker save |
gzip -1`, what a registry push roughly moves), against AWS's published sizes of its TF 2.21 images
(local builds: 16.5 GB GPU, 5.5 GB CPU). Sizes are deterministic: one sample each."""

from __future__ import annotations

import subprocess

from benchlib.cluster import JobFailed
from benchlib.context import Context
from benchlib.report import NO_TARGET, Row, Target, TargetKind
from localcluster.dockercli import DockerCli
from sagetrain.deadline import Deadline

NUMBER = 7
TITLE = "image sizes vs AWS TF 2.21 published sizes"
GB = 1e9
AWS_PUBLISHED = {"gpu": 16.5, "cpu": 5.5}
TARGETS = {"gpu": 6.5, "cpu": 2.2}
CHUNK = 1 << 20
SAVE_SECONDS = 30 * 60.0  # Docker writes the whole export to disk before it sends the first byte


def compressed_size(docker: DockerCli, image: str) -> int:
    hint = "raise SAVE_SECONDS in figures/image_sizes.py"
    deadline = Deadline(SAVE_SECONDS, f"`docker save {image} | gzip -1` to end", hint)
    with docker.start(["save", image], deadline, stderr_to_stdout=False) as saver:
        gzip = subprocess.Popen(["gzip", "-1"], stdin=saver.stdout, stdout=subprocess.PIPE)
        try:
            saver.stdout.close()  # gzip holds the pipe now; docker save sees SIGPIPE if gzip dies
            total = 0
            if gzip.stdout is not None:  # the watchdog's kill of docker save ends gzip's input too
                while chunk := gzip.stdout.read(CHUNK):
                    total += len(chunk)
            saved = saver.finish()
            if gzip.wait(timeout=60) != 0 or saved.returncode != 0:
                raise JobFailed(f"`docker save {image} | gzip -1` failed")
        finally:
            if gzip.poll() is None:
                gzip.kill()
                gzip.wait()
    return total


def samples(ctx: Context) -> list[Row]:
    rows = []
    for device, image in (("gpu", ctx.gpu_image), ("cpu", ctx.image)):
        size = ctx.docker.run(["image", "inspect", "--format", "{{.Size}}", image], check=False).strip()
        if not size:
            ctx.say(f"[7] {image} does not exist here: no {device.upper()} row")
            continue
        ctx.say(f"[7] measuring {image} compressed (docker save | gzip -1)")
        packed = compressed_size(ctx.docker, image)
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
