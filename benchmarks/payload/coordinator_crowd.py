"""Figure 15: an outsider on a job's network with many addresses, in one container (CAP_NET_ADMIN).

    python coordinator_crowd.py MASTER PORT PREFIX SILENT_ADDRESSES MALFORMED_ADDRESSES CONNECTIONS

It adds the addresses (comma-separated, in the job network's subnet of PREFIX bits) to its interface, as
``ip addr add`` does, then, until stopped (SIGTERM): from each silent address it holds CONNECTIONS
connections to the master's coordinator open without a word (a new one for each the master closes), and
from each malformed address it sends SPAKE2 starts with a wrong side byte, one connection after another.
Prints ``CROWD READY`` once every address has connected, and at its end one line: BENCH crowd {json}.
The tests' outsider (tests/container/cases/attacker/attack.py, ``crowd``) does the same.
"""

from __future__ import annotations

import json
import os
import resource
import selectors
import signal
import socket
import struct
import sys
import threading

RTM_NEWADDR = 20
NLM_F_REQUEST, NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE = 0x1, 0x4, 0x200, 0x400
IFA_ADDRESS, IFA_LOCAL = 1, 2
NLMSG_HEADER_BYTES = 16
# The coordinator's first message with the SPAKE2 side byte "X" (base64 "WA…"): well-formed JSON and
# base64, no peer's message.
WRONG_SIDE = b'{"host":"algo-2","pake":"WA' + b"A" * 42 + b'","type":"pake_start"}\n'
CONNECT_SECONDS = 1.0


def add_addresses(addresses: list[str], prefix: int, interface: str = "eth0") -> None:
    index = socket.if_nametoindex(interface)
    flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as netlink:
        for sequence, address in enumerate(addresses, 1):
            packed = socket.inet_aton(address)
            attributes = b"".join(struct.pack("=HH", 8, kind) + packed for kind in (IFA_LOCAL, IFA_ADDRESS))
            body = struct.pack("=BBBBI", socket.AF_INET, prefix, 0, 0, index) + attributes
            header = struct.pack("=IHHII", NLMSG_HEADER_BYTES + len(body), RTM_NEWADDR, flags, sequence, 0)
            netlink.send(header + body)
            error = struct.unpack_from("=i", netlink.recv(65536), NLMSG_HEADER_BYTES)[0]
            if error:
                raise OSError(-error, f"adding {address} to {interface}: {os.strerror(-error)}")


class Crowd:
    def __init__(self, master: tuple[str, int], connections: int) -> None:
        self.master = master
        self.connections = connections
        self.stopped = threading.Event()
        self.lock = threading.Lock()
        self.connected: set[str] = set()
        self.counts = {"opened": 0, "unanswered": 0, "starts_sent": 0, "answered_bytes": 0}

    def count(self, name: str, amount: int = 1) -> None:
        with self.lock:
            self.counts[name] += amount

    def connect(self, source: str) -> socket.socket | None:
        try:
            sock = socket.create_connection(self.master, timeout=CONNECT_SECONDS, source_address=(source, 0))
        except OSError:
            self.count("unanswered")
            return None
        self.count("opened")
        with self.lock:
            self.connected.add(source)
        return sock

    def hold(self, source: str) -> None:
        held = selectors.DefaultSelector()
        while not self.stopped.is_set():
            while len(held.get_map()) < self.connections and not self.stopped.is_set():
                sock = self.connect(source)
                if sock is None:
                    break
                held.register(sock, selectors.EVENT_READ)
            for key, _ in held.select(0.5):  # closed by the master: open another
                held.unregister(key.fileobj)
                key.fileobj.close()  # type: ignore[union-attr]
        for key in list(held.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]

    def malformed(self, source: str) -> None:
        while not self.stopped.is_set():
            sock = self.connect(source)
            if sock is None:
                continue
            with sock:
                try:
                    sock.sendall(WRONG_SIDE)
                    self.count("starts_sent")
                    sock.settimeout(15)
                    while data := sock.recv(4096):
                        self.count("answered_bytes", len(data))
                except OSError:
                    pass


def main(argv: list[str]) -> None:
    master, port, prefix, silent, malformed, connections = argv
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    sources, bad = silent.split(","), malformed.split(",")
    add_addresses(sources + bad, int(prefix))
    crowd = Crowd((master, int(port)), int(connections))
    signal.signal(signal.SIGTERM, lambda number, frame: crowd.stopped.set())
    threads = [threading.Thread(target=crowd.hold, args=(source,)) for source in sources]
    threads += [threading.Thread(target=crowd.malformed, args=(source,)) for source in bad]
    for thread in threads:
        thread.start()
    announced = False
    while not crowd.stopped.wait(0.2):
        if not announced and len(crowd.connected) == len(sources) + len(bad):
            announced = True
            print("CROWD READY", flush=True)
    for thread in threads:
        thread.join(30)
    print("BENCH crowd " + json.dumps(crowd.counts), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
