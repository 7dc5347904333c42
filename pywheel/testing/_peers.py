"""Which of the loop's watched descriptors can hear from outside the process.

A socket whose peer is another socket of this same process (a loopback
client and server on one loop, a socketpair) cannot receive anything the
program has not sent: when ``select(0)`` finds nothing ready on it, nothing
will arrive while the loop sleeps, so jumping the virtual clock is safe.
Anything else (a pipe, a file, a tty, a socket to another process or to the
network, an address family not known here) may hear from outside, and the
loop waits ``autojump_threshold`` for it as before.

How, on Linux (anywhere else every descriptor counts as outside):

- the descriptor must be a socket (``fstat``); its family and type come from
  a ``socket`` object wrapped around it and detached again (no ``dup``,
  nothing closed);
- a connected TCP socket is inside iff ``/proc/self/net/tcp``/``tcp6`` has
  the mirror connection (local and remote addresses swapped) and that
  connection's inode is one of this process's descriptors
  (``/proc/self/fd``).  A connection the server has not accepted yet has no
  inode there: outside until it is accepted (a moment later: the listener
  is then readable, and ``select(0)`` sees it);
- a listening TCP socket bound to a loopback address is inside: only a
  program on this machine can connect to it, and the ones that may are this
  process's own children, see below; a listener on any other address is
  outside;
- a connected AF_UNIX stream socket (``socketpair``, a client of a path) is
  inside iff its peer's credentials (``SO_PEERCRED``) name this process; a
  listening AF_UNIX socket is outside (any process may connect by path);
- UDP, raw and other sockets are outside;
- while this process has a live child process (``/proc/self/task/*/children``),
  every descriptor is outside: a child may hold a copy of a socket this
  process also holds (fork, ``pass_fds``), or connect to a loopback listener.

A descriptor's classification is cached by (descriptor, inode) for the life
of the loop: a socket's peer does not change once it is connected, and a
descriptor reused for another socket has another inode.  Only the
"children?" check runs each time the loop would otherwise wait (a few small
``/proc`` reads).
"""

from __future__ import annotations

import os
import socket
import stat
import struct

_PROC = os.path.isdir("/proc/self/fd") and os.path.exists("/proc/self/net/tcp")

# /proc/net/tcp addresses: IPv4 as 8 hex digits of the address in host
# (little-endian) order, IPv6 as 32 hex digits in 4 such words.
_LOOPBACK6 = "00000000000000000000000001000000"
_MAPPED_PREFIX = "0000000000000000FFFF0000"
_LISTEN = "0A"


def _is_loopback(hexaddr: str) -> bool:
    if len(hexaddr) == 8:
        return hexaddr[6:8] == "7F"  # 127.0.0.0/8: the first octet is the last byte
    if hexaddr == _LOOPBACK6:
        return True
    return hexaddr.startswith(_MAPPED_PREFIX) and hexaddr[30:32] == "7F"


def _tcp_table() -> dict[int, tuple[str, str, str]]:
    """{inode: (local, remote, state)} for this network namespace."""
    table: dict[int, tuple[str, str, str]] = {}
    for path in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(path) as f:
                next(f, None)
                for line in f:
                    parts = line.split()
                    if len(parts) > 9:
                        table.setdefault(int(parts[9]), (parts[1], parts[2], parts[3]))
        except OSError:
            continue
    return table


def _own_socket_inodes() -> set[int]:
    inodes = set()
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return inodes
    for name in names:
        try:
            link = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(int(link[8:-1]))
    return inodes


def has_children() -> bool:
    """True if this process has a live (or unreaped) child, or if unsure."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return True
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                if f.read().strip():
                    return True
        except FileNotFoundError:
            continue  # the thread ended meanwhile
        except OSError:
            return True
    return False


def _classify(fd: int, ino: int) -> tuple[bool, bool]:
    """(inside, final): inside is True if ``fd`` (a socket with inode
    ``ino``) can hear only from this process; final is False when the
    answer may change (a connection not accepted yet)."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return False, False
    try:
        family, kind = sock.family, sock.type
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) != 0
        if family == socket.AF_UNIX:
            if listening or kind != socket.SOCK_STREAM or not hasattr(socket, "SO_PEERCRED"):
                return False, True
            cred = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            pid = struct.unpack("3i", cred)[0]
            return pid == os.getpid(), True
        if family not in (socket.AF_INET, socket.AF_INET6) or kind != socket.SOCK_STREAM:
            return False, True
    except OSError:
        return False, False
    finally:
        sock.detach()
    table = _tcp_table()
    entry = table.get(ino)
    if entry is None:
        return False, False
    local, remote, state = entry
    if listening or state == _LISTEN:
        return _is_loopback(local.split(":")[0]), True
    ours = _own_socket_inodes()
    for other, (olocal, oremote, _ostate) in table.items():
        if other and olocal == remote and oremote == local:
            return other in ours, other in ours
    return False, False  # not accepted yet (or closing): ask again next time


class Peers:
    """Per loop: which watched descriptors can hear from outside."""

    __slots__ = ("_cache",)

    def __init__(self) -> None:
        self._cache: dict[int, tuple[int, bool]] = {}

    def any_outside(self, fds) -> bool:
        """True if any of ``fds`` may receive from outside the process."""
        if not _PROC:
            return bool(fds)
        if not fds:
            return False
        cache = self._cache
        for fd in fds:
            try:
                st = os.fstat(fd)
            except OSError:
                return True
            if not stat.S_ISSOCK(st.st_mode):
                return True
            hit = cache.get(fd)
            if hit is None or hit[0] != st.st_ino:
                inside, final = _classify(fd, st.st_ino)
                if final:
                    cache[fd] = (st.st_ino, inside)
            else:
                inside = hit[1]
            if not inside:
                return True
        # Every one is inside, unless a child process could share them.
        return has_children()
