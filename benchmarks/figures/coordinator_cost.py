"""Figure 12: what the master's coordinator costs per host when 256 hosts join at once, against the same
at 16 hosts (ratio 1: the cost per host does not grow with the job).

One container of our image per measurement, with no network but its loopback, runs
payload/coordinator_load.py: the image's own CoordinatorServer (SPAKE2 handshakes, default admission
limits) in the master's process, and 255 (or 15) real CoordinatorClients, one forked process per worker
host, each from a loopback address of its own (as every host has its own address: the admission caps
handshakes per address), released at once. Master and workers are pinned to different CPUs. Measured in
the master's process: its CPU time from the release to the last JOINED event, the SPAKE2 part of it
(the master's side of the key exchange alone, in a loop), its threads and RSS; by the workers: the
messages and bytes on their sockets (to join, and the job's verdict).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping

from benchlib.cluster import JobFailed
from benchlib.context import PAYLOAD, Context, alternating
from benchlib.report import NO_TARGET, Row
from sagetrain.deadline import Deadline

NUMBER = 12
TITLE = "coordinator cost per host: 256 hosts joining at once vs 16"
HOSTS = 256
BASELINE_HOSTS = 16
RUN_SECONDS = 600.0
MARKER = "BENCH coordinator "

# (measure, unit, value per host from the payload's result)
Result = Mapping[str, float]


def _workers(result: Result) -> float:
    return result["hosts"] - 1


MEASURES = (
    ("master CPU per joining host", "ms", lambda r: 1000 * r["master_cpu_join_seconds"] / _workers(r)),
    ("of which the master's SPAKE2 alone", "ms", lambda r: 1000 * r["master_spake2_cpu_seconds"]),
    ("the workers' own CPU per host (they share one CPU)", "ms",
     lambda r: 1000 * r["workers_cpu_seconds"] / _workers(r)),
    ("time to all joined, per host", "ms", lambda r: 1000 * r["all_joined_seconds"] / _workers(r)),
    ("time to all joined", "s", lambda r: r["all_joined_seconds"]),
    ("slowest host's join", "s", lambda r: r["max_join_seconds"]),
    ("verdict sent -> every host disconnected", "s", lambda r: r["verdict_to_disconnected_seconds"]),
    ("master threads per joined host", "threads",
     lambda r: (r["threads_joined"] - r["threads_before"]) / _workers(r)),
    ("master RSS per joined host", "KiB", lambda r: (r["rss_kb_joined"] - r["rss_kb_before"]) / _workers(r)),
    ("messages per host (join + verdict)", "messages", lambda r: r["messages"] / _workers(r)),
    ("bytes per host (join + verdict)", "bytes", lambda r: r["bytes"] / _workers(r)),
    ("connections per host", "connections", lambda r: r["connections"] / _workers(r)),
)  # fmt: skip


def result_of(output: str) -> dict[str, float]:
    """The payload's one result line. Pure."""
    for line in output.splitlines():
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER) :])
    raise JobFailed(f"the coordinator load printed no result; its output ended:\n{output[-2000:]}")


def measure(ctx: Context, hosts: int) -> dict[str, float]:
    output = ctx.created.run_container(
        f"sagetrain-bench-{secrets.token_hex(3)}",
        ["--network", "none", "--entrypoint", "python",
         "--mount", f"type=bind,source={PAYLOAD},target=/payload,readonly",
         ctx.image, "/payload/coordinator_load.py", str(hosts)],
        Deadline(RUN_SECONDS, f"the coordinator load of {hosts} hosts", "raise RUN_SECONDS in its figure"),
    )  # fmt: skip
    return result_of(output)


def samples(ctx: Context) -> list[Row]:
    pairs: list[tuple[dict[str, float], dict[str, float]]] = []
    for index, big_first in alternating(ctx.runs):
        order = [HOSTS, BASELINE_HOSTS] if big_first else [BASELINE_HOSTS, HOSTS]
        measured = {hosts: measure(ctx, hosts) for hosts in order}
        big = measured[HOSTS]
        ctx.say(
            f"[12] run {index + 1}: {HOSTS} hosts joined in {big['all_joined_seconds']:.2f} s, master CPU "
            f"{big['master_cpu_join_seconds']:.2f} s, {big['threads_joined']} threads, "
            f"{big['rss_kb_joined'] / 1024:.1f} MiB"
        )
        pairs.append((big, measured[BASELINE_HOSTS]))
    return [
        Row(NUMBER, name, f"{HOSTS} hosts", f"{BASELINE_HOSTS} hosts", unit,
            tuple((per_host(big), per_host(small)) for big, small in pairs), NO_TARGET)
        for name, unit, per_host in MEASURES
    ]  # fmt: skip
