"""Figure 16: masking at SageMaker's limits (100 secret-named values of 2,500 characters, full of quotes
and non-ASCII): building the image's redactor and its pattern, and masking a 3 KB line, against the
former method (one regular expression alternating every form of every secret, longest first). Target:
the pattern built in at most 1 s (a job's stop window is 8 s at the least; the former method took 7.5 to
11 s). Runs payload/masking_build.py in a container of our image with no network.
"""

from __future__ import annotations

import json
import secrets

from benchlib.cluster import JobFailed
from benchlib.context import PAYLOAD, Context
from benchlib.report import NO_TARGET, Row, Target, TargetKind
from sagetrain.deadline import Deadline

NUMBER = 16
TITLE = "masking at SageMaker's limits: pattern build and a 3 KB line, vs one alternation of every form"
RUN_SECONDS = 300.0
MARKER = "BENCH masking "


def result_of(output: str) -> dict[str, float]:
    """The payload's one result line. Pure."""
    for line in output.splitlines():
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER) :])
    raise JobFailed(f"the masking payload printed no result; its output ended:\n{output[-2000:]}")


def measure(ctx: Context) -> dict[str, float]:
    output = ctx.created.run_container(
        f"sagetrain-bench-{secrets.token_hex(3)}",
        ["--network", "none", "--entrypoint", "python",
         "--mount", f"type=bind,source={PAYLOAD},target=/payload,readonly",
         ctx.image, "/payload/masking_build.py"],
        Deadline(RUN_SECONDS, "the masking payload", "raise RUN_SECONDS in its figure"),
    )  # fmt: skip
    return result_of(output)


def samples(ctx: Context) -> list[Row]:
    results = [measure(ctx) for _ in range(ctx.runs)]
    for index, result in enumerate(results):
        ctx.say(
            f"[16] run {index + 1}: pattern built in {result['build_seconds']:.3f} s "
            f"(one alternation: {result['former_build_seconds']:.1f} s)"
        )
    build = tuple((r["build_seconds"], r["former_build_seconds"]) for r in results)
    line = tuple((1000 * r["mask_line_seconds"], 1000 * r["former_mask_line_seconds"]) for r in results)
    return [
        Row(NUMBER, "masking pattern built", "tree of anchors", "one alternation", "s", build,
            Target(TargetKind.OURS_AT_MOST, 1.0)),
        Row(NUMBER, "a 3 KB line masked", "tree of anchors", "one alternation", "ms", line, NO_TARGET),
    ]  # fmt: skip
