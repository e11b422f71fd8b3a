"""Figure 17: what the members-only library (every process of a job preloads it: README, Security) adds to
accepting one connection, against the C library's accept() alone; nothing else of a connection goes
through it, so this is all it costs.

One container of our image on an internal network of its own runs payload/accept_cost.py: one listening
socket, the two accept functions called alternately on batches of connections waiting in its queue. A
member's connection (from the container's own network address, listed last of 256 in the members file:
the whole list walked) and a loopback one (passed without looking at the list), in nanoseconds per
accept of the quietest of 40 batches of 500 (other processes only ever slow a batch down).
"""

from __future__ import annotations

import json
import secrets

from benchlib.cluster import JobFailed
from benchlib.context import PAYLOAD, Context
from benchlib.report import NO_TARGET, Row
from sagetrain.deadline import Deadline

NUMBER = 17
TITLE = "accept() with the members-only library vs the C library's alone"
RUN_SECONDS = 300.0
MARKER = "BENCH accept "
PATHS = {"member": "a member's connection (256 listed)", "loopback": "a loopback connection"}


def result_of(output: str) -> dict[str, float]:
    """The payload's nanoseconds per accept, by "<ours|theirs> <path>". Pure."""
    for line in output.splitlines():
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER) :])["ns_per_accept"]
    raise JobFailed(f"the accept benchmark printed no result; its output ended:\n{output[-2000:]}")


def measure(ctx: Context, network: str) -> dict[str, float]:
    output = ctx.created.run_container(
        f"sagetrain-bench-{secrets.token_hex(3)}",
        ["--network", network, "--entrypoint", "python",
         "--mount", f"type=bind,source={PAYLOAD},target=/payload,readonly",
         ctx.image, "/payload/accept_cost.py"],
        Deadline(RUN_SECONDS, "the accept benchmark", "raise RUN_SECONDS in its figure"),
    )  # fmt: skip
    return result_of(output)


def samples(ctx: Context) -> list[Row]:
    network = f"sagetrain-bench-{secrets.token_hex(3)}"
    ctx.created.create_network(network)
    try:
        runs = [measure(ctx, network) for _ in range(ctx.runs)]
    finally:
        ctx.created.remove_network(network)
    for index, run in enumerate(runs):
        added = run["ours member"] - run["theirs member"]
        ctx.say(f"[{NUMBER}] run {index + 1}: a member's accept {added:+.0f} ns with the library")
    return [
        Row(NUMBER, f"accept(), {what}", "with the library", "C library alone", "ns",
            tuple((run[f"ours {path}"], run[f"theirs {path}"]) for run in runs), NO_TARGET)
        for path, what in PATHS.items()
    ]  # fmt: skip
