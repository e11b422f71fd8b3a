"""What every figure gets: the docker CLI, the images, a scratch folder, the number of paired runs, and
lazily made shared things (the comparison image, the TFRecord data, results two figures share)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from benchlib.docker import Docker
from benchlib.images import ensure_aws_image, say, toolkit_version

PAYLOAD = Path(__file__).resolve().parents[1] / "payload"
DATA_RECORDS = 12_000
DATA_FILES = 8

T = TypeVar("T")


@dataclass
class Context:
    docker: Docker
    image: str
    aws_image_tag: str
    gpu_image: str
    workdir: Path
    runs: int
    rebuild_aws_image: bool = False
    facts: dict[str, Any] = field(default_factory=dict)
    _memo: dict[str, Any] = field(default_factory=dict)

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
            self.run_container(
                ["--network", "none", "--entrypoint", "python",
                 "--mount", f"type=bind,source={PAYLOAD},target=/payload,readonly",
                 "--mount", f"type=bind,source={data},target=/data",
                 self.image, "/payload/make_data.py", "/data/train", str(DATA_RECORDS), str(DATA_FILES)],
                timeout=600,
            )  # fmt: skip
            return data

        (self.workdir / "data").mkdir(parents=True, exist_ok=True)
        return self.once("data", make)

    def run_container(self, args: list[str], timeout: float) -> str:
        """`docker run` of a helper container, removed afterwards whatever happens."""
        name = f"sagetrain-bench-{secrets.token_hex(3)}"
        self.docker.containers.append(name)
        try:
            return self.docker.run(["run", "--name", name, *args], timeout=timeout)
        finally:
            self.docker.remove_container(name)


def alternating(runs: int) -> Iterator[tuple[int, bool]]:
    """(run index, ours first?) — A/B order flips every run, so drift on a shared machine cancels out."""
    for index in range(runs):
        yield index, index % 2 == 0
