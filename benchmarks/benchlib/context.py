"""What every figure gets: the docker CLI and the record of what it creates, the images, a scratch folder,
the number of paired runs, and lazily made shared things (the comparison image, the TFRecord data,
results two figures share)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from localcluster.dockercli import DockerCli
from sagetrain.deadline import Deadline

from benchlib.created import Created
from benchlib.images import ensure_aws_image, say, toolkit_version

PAYLOAD = Path(__file__).resolve().parents[1] / "payload"
DATA_RECORDS = 12_000
DATA_FILES = 8
DATA_SECONDS = 600.0

T = TypeVar("T")


@dataclass
class Context:
    docker: DockerCli
    image: str
    aws_image_tag: str
    gpu_image: str
    workdir: Path
    runs: int
    rebuild_aws_image: bool = False
    plots_dir: Path = Path("benchmarks/plots")  # the scaling figures' PNGs (docs/performance.md shows them)
    facts: dict[str, Any] = field(default_factory=dict)
    _memo: dict[str, Any] = field(default_factory=dict)
    created: Created = field(init=False)  # what a run creates, removed by created.remove_all()

    def __post_init__(self) -> None:
        self.created = Created(self.docker)

    def say(self, text: str) -> None:
        say(text)

    def once(self, key: str, make: Callable[[], T]) -> T:
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def aws_image(self) -> str:
        def build() -> str:
            tag = ensure_aws_image(self.docker, self.image, self.aws_image_tag, self.rebuild_aws_image)
            self.facts["aws_toolkit"] = f"sagemaker-tensorflow-training {toolkit_version(self.docker, tag)}"
            self.facts["aws_image_id"] = self.docker.image_id(tag)
            return tag

        return self.once("aws_image", build)

    def data_dir(self) -> Path:
        """TFRecord files for figures 5 and 6: <data>/train/part-NN.tfrecord."""

        def make() -> Path:
            data = self.workdir / "data"
            self.say(f"writing {DATA_RECORDS} TFRecord records in {DATA_FILES} files")
            self.created.run_container(
                f"sagetrain-bench-{secrets.token_hex(3)}",
                ["--network", "none", "--entrypoint", "python",
                 "--mount", f"type=bind,source={PAYLOAD},target=/payload,readonly",
                 "--mount", f"type=bind,source={data},target=/data",
                 self.image, "/payload/make_data.py", "/data/train", str(DATA_RECORDS), str(DATA_FILES)],
                Deadline(DATA_SECONDS, "the TFRecord data to be written", "raise DATA_SECONDS in benchlib"),
            )  # fmt: skip
            return data

        (self.workdir / "data").mkdir(parents=True, exist_ok=True)
        return self.once("data", make)


def alternating(runs: int) -> Iterator[tuple[int, bool]]:
    """(run index, ours first?) — A/B order flips every run, so drift on a shared machine cancels out."""
    for index in range(runs):
        yield index, index % 2 == 0
