"""The master's listening socket: a backlog that holds a burst of connections, and a filter in the kernel
that drops the packets of the addresses the admission has paused, so that an address flooding the
coordinator during its pause costs the master nothing (Linux only; where the kernel refuses the filter,
the master turns those connections away itself, at the cost of accepting them).

The filter is a classic BPF socket filter (``SO_ATTACH_FILTER``, which any process may set on its own
sockets, no privilege needed): it reads the IPv4 source address of each packet that reaches the listening
socket and drops it when it is one of the paused ones, so such an address's connection attempts go
unanswered and its client waits out its own connect timeout. The accepted connections keep the filter
they were accepted under; the admission never pauses the job's own addresses, so no member's connection
ever loses a packet to it.
"""

from __future__ import annotations

import ctypes
import ipaddress
import logging
import socket
import struct
import threading
from collections.abc import Iterable

log = logging.getLogger(__name__)

# The kernel takes at most net.core.somaxconn (4,096 by default since Linux 5.4): connections the accept
# loop has not taken yet wait there, so a burst of them (outsiders' connections, a large job's rank
# launchers reporting at once) does not make the kernel drop a member's.
LISTEN_BACKLOG = 4096
SO_ATTACH_FILTER = 26  # <asm-generic/socket.h>; Python's socket module does not name it
# A classic BPF program has at most 4,096 instructions; each paused address takes one. Beyond this many,
# the master turns the rest away itself.
MAX_DROPPED_ADDRESSES = 1024

# Classic BPF opcodes (<linux/filter.h>) and the offset at which a socket filter reads the network header.
_LOAD_WORD_ABSOLUTE = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
_JUMP_IF_EQUAL = 0x05 | 0x10 | 0x00  # BPF_JMP | BPF_JEQ | BPF_K
_RETURN = 0x06 | 0x00  # BPF_RET | BPF_K
_NETWORK_HEADER = -0x100000  # SKF_NET_OFF
_IPV4_SOURCE = 12  # the source address's offset in the IPv4 header
_KEEP_PACKET, _DROP_PACKET = 0xFFFFFFFF, 0


def _instruction(code: int, if_true: int, if_false: int, value: int) -> bytes:
    return struct.pack("=HBBI", code, if_true, if_false, value & 0xFFFFFFFF)


def drop_program(addresses: Iterable[str]) -> list[bytes]:
    """A classic BPF program (its instructions) that drops IPv4 packets from ``addresses`` and keeps every
    other packet. Pure."""
    dropped = sorted({int(ipaddress.IPv4Address(address)) for address in addresses})
    program = [_instruction(_LOAD_WORD_ABSOLUTE, 0, 0, _NETWORK_HEADER + _IPV4_SOURCE)]
    for index, address in enumerate(dropped):
        # Equal: jump over the remaining comparisons and the "keep" to the "drop".
        program.append(_instruction(_JUMP_IF_EQUAL, len(dropped) - index, 0, address))
    program.append(_instruction(_RETURN, 0, 0, _KEEP_PACKET))
    program.append(_instruction(_RETURN, 0, 0, _DROP_PACKET))
    return program


def attach_filter(sock: socket.socket, program: list[bytes]) -> None:
    """Attach ``program`` to ``sock`` (replacing its filter); OSError when the kernel refuses it."""
    code = ctypes.create_string_buffer(b"".join(program))
    # struct sock_fprog { unsigned short len; struct sock_filter *filter; }, in the platform's alignment.
    fprog = struct.pack("@HP", len(program), ctypes.addressof(code))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


class DropFilter:
    """The listening socket's filter: ``drop`` the packets of exactly these addresses from now on."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._dropped: frozenset[str] = frozenset()
        self._lock = threading.Lock()
        self._working = True

    def drop(self, addresses: frozenset[str]) -> None:
        chosen = frozenset(sorted(addresses)[:MAX_DROPPED_ADDRESSES])
        with self._lock:
            if chosen == self._dropped or not self._working:
                return
            try:
                attach_filter(self._sock, drop_program(chosen))
            except (OSError, ValueError) as error:  # ValueError: an address that is not IPv4
                self._working = False
                log.warning("the coordinator turns paused addresses away itself: %s", error)
                return
            self._dropped = chosen
