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

Inside is not yet quiet: the kernel hands loopback data to the receiving
socket in a deferred step (a softirq, or its thread when the machine is
busy), so for a moment after the peer's ``send()`` the bytes are in neither
socket, and ``select(0)`` cannot see them; a delayed ACK is a kernel timer.
So each time the loop would jump, every inside TCP connection it watches is
checked (``TCP_INFO`` on both ends: a few system calls): bytes or a FIN the
peer sent (or wrote and holds back) that this end has not received yet
make it outside for this round, and so do unacknowledged or unsent bytes of
an end watched for writing.  Where
``TCP_INFO`` lacks those counters (Linux before 4.19) every TCP connection
counts as outside.

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
_READ, _WRITE = 1, 2  # selectors.EVENT_READ, EVENT_WRITE


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


# struct tcp_info (linux/tcp.h): tcpi_state (byte 0), tcpi_unacked (u32 at
# 24), tcpi_bytes_received (u64 at 128), tcpi_notsent_bytes (u32 at 144),
# tcpi_bytes_sent and tcpi_bytes_retrans (u64 at 200 and 208, Linux 4.19+).
_TCP_INFO_LEN = 216
_FIN_SENT = frozenset({4, 5, 6, 9, 11})  # FIN_WAIT1/2, TIME_WAIT, LAST_ACK, CLOSING
_FIN_NOT_RECEIVED = frozenset({1, 4, 5})  # ESTABLISHED, FIN_WAIT1/2


def _tcp_info(fd: int):
    """(state, unacked segments, bytes received, bytes sent once, bytes
    written but not sent) of TCP socket ``fd``, or None if the kernel does
    not say."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return None
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_LEN)
    except (OSError, AttributeError):
        return None
    finally:
        sock.detach()
    if len(raw) < _TCP_INFO_LEN:
        return None
    (unacked,) = struct.unpack_from("I", raw, 24)
    (received,) = struct.unpack_from("Q", raw, 128)
    (notsent,) = struct.unpack_from("I", raw, 144)
    sent, retrans = struct.unpack_from("QQ", raw, 200)
    return raw[0], unacked, received, sent - retrans, notsent


def _quiet(fd: int, events: int, peer: tuple[int, int]) -> bool:
    """True if nothing is on its way between inside TCP socket ``fd`` and
    its peer that could make ``fd`` ready for ``events`` without the program
    acting first."""
    x = _tcp_info(fd)
    if x is None:
        return False
    state, unacked, received, _sent, notsent = x
    if events & _WRITE and (unacked or notsent):
        # An ACK or a window update on its way frees room to write (a peer
        # that stopped reading keeps it so: the loop waits, as for outside).
        return False
    if not events & _READ:
        return True
    peer_fd, peer_ino = peer
    try:
        same = os.fstat(peer_fd).st_ino == peer_ino
    except OSError:
        same = False
    if not same:
        # The peer was closed: its kernel end may still deliver what it
        # held, then a FIN; once the FIN is in, nothing more comes.
        return state == 8  # CLOSE_WAIT
    y = _tcp_info(peer_fd)
    if y is None:
        return False
    if y[3] > received or y[4]:
        return False  # bytes sent and not received yet, or held back (Nagle)
    return not (y[0] in _FIN_SENT and state in _FIN_NOT_RECEIVED)


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


def _classify(fd: int, connections: list) -> tuple:
    """(inside, final[, peer]): inside is True if ``fd`` (a socket) can hear only
    from this process; final is False when the answer may change (a
    connection not accepted yet).  ``connections``: a one-item cache of
    ``_tcp_connections()`` for this round ([] until needed); peer, for a
    TCP connection found inside: the mirror's descriptor."""
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
    peer = connections[0].get((remote, local))
    if peer is not None:
        return True, True, peer
    return False, False  # not accepted yet (or its peer is gone): ask again


class Peers:
    """Per loop: which watched descriptors can hear from outside."""

    __slots__ = ("_cache",)

    def __init__(self) -> None:
        self._cache: dict[int, tuple] = {}

    def any_outside(self, fds) -> bool:
        """True if any of ``fds`` may receive from outside the process.
        ``fds``: {descriptor: selectors events}, or descriptors (watched
        for both)."""
        if not _PROC:
            return bool(fds)
        if not fds:
            return False
        if not isinstance(fds, dict):
            fds = dict.fromkeys(fds, _READ | _WRITE)
        cache = self._cache
        connections: list = []  # this process's TCP sockets, read once if needed
        for fd, events in fds.items():
            try:
                st = os.fstat(fd)
            except OSError:
                return True
            if not stat.S_ISSOCK(st.st_mode):
                return True
            hit = cache.get(fd)
            if hit is None or hit[0] != st.st_ino:
                answer = _classify(fd, connections)
                inside, final = answer[0], answer[1]
                peer = None
                if len(answer) > 2:
                    try:
                        peer = (answer[2], os.fstat(answer[2]).st_ino)
                    except OSError:
                        inside = final = False
                if final:
                    cache[fd] = (st.st_ino, inside, peer)
            else:
                inside, peer = hit[1], hit[2]
            if not inside:
                return True
            if peer is not None and not _quiet(fd, events, peer):
                return True  # something on its way: not this round
        # Every one is inside, unless a child process could share them.
        return has_children()
