"""Which of the loop's watched descriptors can hear from outside the process.

A socket whose peer is another socket of this same process (a loopback
client and server on one loop, a socketpair) cannot receive anything the
program has not sent: when ``select(0)`` finds nothing ready on it, nothing
will arrive while the loop sleeps, so jumping the virtual clock is safe.
Anything else (a pipe, a file, a tty, a socket to another process or to the
network, an address family not known here) may hear from outside, and the
loop waits ``autojump_threshold`` for it as before.

How, on Linux (anywhere else every descriptor counts as outside):

- the descriptor must be a socket (``fstat``); its family, type and
  addresses come from a ``socket`` object wrapped around it and detached
  again (no ``dup``, nothing closed);
- a connected TCP socket is inside iff another socket of this process
  (``/proc/self/fd``) is its mirror: local and remote addresses swapped
  (an IPv4-mapped IPv6 address counts as the IPv4 one).  A TCP connection's
  two ends are unique in a network namespace, so the mirror is its peer.
  A connection the server has not accepted yet has no mirror here: outside
  until it is accepted (a moment later: the listener is then readable, and
  ``select(0)`` sees it); so is one whose peer this process has closed;
- a listening TCP socket bound to a loopback address (127.0.0.0/8, ::1, or
  mapped) is inside: only a program on this machine can connect to it, and
  the ones that may are this process's own children, see below; a listener
  on any other address is outside;
- a connected AF_UNIX stream socket (``socketpair``, a client of a path) is
  inside iff its peer's credentials (``SO_PEERCRED``) name this process; a
  listening AF_UNIX socket is outside (any process may connect by path);
- UDP, raw and other sockets are outside;
- while this process has a live child process (``/proc/self/task/*/children``),
  every descriptor is outside: a child may hold a copy of a socket this
  process also holds (fork, ``pass_fds``), or connect to a loopback listener.

What it costs: a few system calls per socket of this process, and only when
a watched descriptor is not classified yet.  The system-wide TCP table
(``/proc/net/tcp``) is never read: the kernel builds it by walking every
bucket of its connection hash, whose size follows the machine's memory, not
the connections (tens of milliseconds a read on a loaded 24 GiB machine,
paid once per new connection: more than aiohttp's functional tests spent
in their own code).

A descriptor's classification is cached by (descriptor, inode) for the life
of the loop: a socket's peer does not change once it is connected, and a
descriptor reused for another socket has another inode.  Only the
"children?" check runs each time the loop would otherwise wait (a few small
``/proc`` reads).

Not seen: a peer descriptor this process sent to another process over a
Unix socket (``SCM_RIGHTS``), and sockets of other network namespaces held
by this process; both count as inside if their addresses mirror.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import stat
import struct
import sys

_PROC = sys.platform.startswith("linux") and os.path.isdir("/proc/self/fd")

_INET = (socket.AF_INET, socket.AF_INET6)


def _endpoint(addr) -> tuple[str, int]:
    """(host, port) of a socket address, IPv4-mapped IPv6 as IPv4."""
    host, port = addr[0], addr[1]
    if host.startswith("::ffff:") and "." in host:
        host = host[7:]
    return host, port


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _describe(fd: int):
    """(family, type, listening, local, remote) of socket ``fd``; remote is
    None when not connected; None if it cannot be read."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return None
    try:
        family, kind = sock.family, sock.type
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) != 0
        local = remote = None
        if family in _INET:
            local = _endpoint(sock.getsockname())
            if not listening:
                try:
                    remote = _endpoint(sock.getpeername())
                except OSError:  # connecting, or reset
                    pass
        elif family == socket.AF_UNIX and not listening and kind == socket.SOCK_STREAM:
            if hasattr(socket, "SO_PEERCRED"):
                cred = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
                remote = struct.unpack("3i", cred)[0]  # the peer's pid
        return family, kind, listening, local, remote
    except OSError:
        return None
    finally:
        sock.detach()


def _tcp_connections() -> dict[tuple, int]:
    """{(local, remote): fd} for this process's connected TCP sockets."""
    found: dict[tuple, int] = {}
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for name in names:
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:["):
                continue
        except OSError:
            continue
        fd = int(name)
        info = _describe(fd)
        if info is None:
            continue
        family, kind, listening, local, remote = info
        if family in _INET and kind == socket.SOCK_STREAM and remote is not None:
            found[(local, remote)] = fd
    return found


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


def _classify(fd: int, connections: list) -> tuple[bool, bool]:
    """(inside, final): inside is True if ``fd`` (a socket) can hear only
    from this process; final is False when the answer may change (a
    connection not accepted yet).  ``connections``: a one-item cache of
    ``_tcp_connections()`` for this round ([] until needed)."""
    info = _describe(fd)
    if info is None:
        return False, False
    family, kind, listening, local, remote = info
    if family == socket.AF_UNIX:
        return remote == os.getpid(), True
    if family not in _INET or kind != socket.SOCK_STREAM:
        return False, True
    if listening:
        return _is_loopback(local[0]), True
    if remote is None:
        return False, False  # connecting: ask again
    if not connections:
        connections.append(_tcp_connections())
    if (remote, local) in connections[0]:
        return True, True
    return False, False  # not accepted yet (or its peer is gone): ask again


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
        connections: list = []  # this process's TCP sockets, read once if needed
        for fd in fds:
            try:
                st = os.fstat(fd)
            except OSError:
                return True
            if not stat.S_ISSOCK(st.st_mode):
                return True
            hit = cache.get(fd)
            if hit is None or hit[0] != st.st_ino:
                inside, final = _classify(fd, connections)
                if final:
                    cache[fd] = (st.st_ino, inside)
            else:
                inside = hit[1]
            if not inside:
                return True
        # Every one is inside, unless a child process could share them.
        return has_children()
