"""Which of the loop's watched descriptors can hear from outside the loop.

A socket whose peer is another socket of this same process, served by this
same loop (a loopback client and server on one loop, a socketpair) cannot
receive anything the program has not sent: when ``select(0)`` finds nothing
ready on it, nothing will arrive while the loop sleeps, so jumping the
virtual clock is safe.  Anything else (a pipe, a file, a tty, a socket to
another process, to another thread's loop or to the network, an address
family not known here) may hear from outside, and the loop waits
``autojump_threshold`` for it as before.  The rule: a socket is inside only
when that is proven; when unsure, it is outside.

How, on Linux (anywhere else every descriptor counts as outside: see
"Without the Linux path" below):

- the descriptor must be a socket (``fstat``); its family, type and
  addresses come from a ``socket`` object wrapped around it and detached
  again (no ``dup``, nothing closed);
- a connected TCP socket's peer is another socket of this process
  (``/proc/self/fd``) that is its mirror: local and remote addresses swapped
  (an IPv4-mapped IPv6 address counts as the IPv4 one).  A TCP connection's
  two ends are unique in a network namespace, so the mirror is its peer.
  A connection the server has not accepted yet has no mirror here: outside
  until it is accepted (a moment later: the listener is then readable, and
  ``select(0)`` sees it); so is one whose peer this process has closed;
- a connected AF_UNIX stream socket's peer is found by the kernel's own
  answer: one ``sock_diag`` netlink request by inode (``UNIX_DIAG_PEER``)
  names the peer socket's inode, which must be one of this process's
  descriptors (``/proc/self/fd``).  ``SO_PEERCRED`` is no proof: it names
  the process that made the pair, not the one holding the other end now (a
  helper started with it and detached).  ``/proc/net/unix`` does not name
  peers, and guessing from neighbouring inodes proves nothing, so where
  ``sock_diag`` is missing (``CONFIG_UNIX_DIAG`` off) every AF_UNIX socket
  is outside.  A listening AF_UNIX socket is outside (any process may
  connect by path);
- a peer in this process must also be *served by this loop*, or another
  thread of this process (a server running its own loop on a background
  thread, started before this loop: aiosmtpd's ``Controller``, anyio's
  ``BlockingPortal``) may write to it at any time.  Which thread uses a
  descriptor is nowhere to be read, so "this loop's" is proven from the
  loop's own side: the peer is registered in this loop's selector, or held
  by one of this loop's live transports (one paused for reading is
  registered nowhere; a closed one not collected yet names a descriptor
  that may be reused: the transport must still hold that descriptor).  A
  peer registered nowhere here is an idle socket that some code will use
  next: it counts as this loop's (the socket a coroutine is about to
  ``sock_sendall`` on) only when it is non-blocking (a blocking one is
  served by a thread blocking on it), no epoll instance of the process but
  this loop's lists it (``/proc/self/fdinfo``: another thread's stock
  asyncio, uvloop or pywheel loop), and no other virtual loop runs (on
  another thread: its socket may be a ``call_soon`` away from being
  registered, or paused) or holds it in a transport.  Threads are not
  counted here: a test run leaves idle ones behind, and a loop on a
  background thread waits for the thread that drives it anyway (see
  ``_VirtualSelector.select``).  This costs a few dictionary look-ups when
  the peer is registered here, and one read of each other epoll's
  ``fdinfo`` when it is not;
- a listening TCP socket bound to a loopback address (127.0.0.0/8, ::1, or
  mapped) is inside only while it has accepted at least one connection
  still open in this process and every such connection's peer is proven
  inside and served by this loop (its accepted sockets are found by their
  local address, the listener's); once one accepted connection is seen
  whose peer is not in this process, the listener stays outside for the
  life of the loop.  A fresh listener is outside: anything on this machine
  may connect to it (a detached helper given its port, another process).
  A listener on any other address is outside;
- UDP, raw and other sockets are outside;
- while this process has a child process, live or not yet reaped
  (``waitid(P_ALL, WNOHANG | WNOWAIT)``: one system call, every thread's
  children, no ``/proc`` file that some kernels lack), every descriptor is
  outside: a child may hold a copy of a socket this process also holds
  (fork, ``pass_fds``), or connect to a loopback listener.

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
counts as outside.  AF_UNIX delivers in the sender's own call: nothing is
ever on its way.

A descriptor's peer is cached by (descriptor, inode) for the life of the
loop (a socket's peer does not change once it is connected, and a
descriptor reused for another socket has another inode), and so is the
peer's own (descriptor, inode), checked with one ``fstat`` each round.
Which loop serves the peer, a listener's accepted connections and the
children check run each time the loop would otherwise jump.

Not seen: a copy of an inside socket that another process holds while this
process keeps its own (a ``pass_fds`` or ``fork`` child that detached, a
descriptor sent over ``SCM_RIGHTS``); a process that connects to a loopback
listener after the listener was proven inside by in-process connections;
a thread of this process that writes to a peer registered in this loop or
held by its transport (a socket shared across threads), or, for a loop on
the main thread, uses an idle non-blocking peer without an event loop (a
socket with a Python timeout, ``select``/``poll`` of its own); sockets of other
network namespaces held by this process, which count as inside if their
addresses mirror.

Without the Linux path (macOS, Windows, the BSDs, a Linux without ``/proc``
mounted, or ``PYWHEEL_TESTING_NO_PROC=1`` in the environment to try it on
Linux), every watched descriptor counts as outside: the loop waits
``autojump_threshold`` for it as the stock loop would wait in real time, and
never jumps early; only slower.  This is said once a process, the first time
it holds a jump back, as a warning on the ``pywheel.testing`` logger (not a
``warnings`` warning: a suite run with ``-W error`` or ``filterwarnings =
error`` would fail whichever test happened to meet it first, for a note;
``pytest --virtual-time`` says it in its header instead).  psutil is not used
for a portable view: it names a process's TCP connections, but not an
AF_UNIX socket's peer, not which other event loop polls a descriptor, and
not what is on its way between two loopback ends (``TCP_INFO``'s counters),
and inside needs all three proven; what it would prove (a mirror pair of
addresses) proves nothing alone.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import stat
import struct
import sys
import weakref

try:
    import fcntl
except ImportError:  # Windows: only the Linux path uses it
    fcntl = None  # type: ignore[assignment]

#: Set (to anything but "" or "0") to switch the Linux path off: every
#: watched descriptor then counts as outside, as where /proc is missing.
NO_PROC_ENV = "PYWHEEL_TESTING_NO_PROC"


def _linux_path() -> bool:
    if os.environ.get(NO_PROC_ENV, "") not in ("", "0"):
        return False
    return (
        sys.platform.startswith("linux")
        and fcntl is not None
        and os.path.isdir("/proc/self/fd")
        and os.path.isdir("/proc/self/fdinfo")
    )


#: Whether this process classifies sockets through Linux's /proc.
_PROC = _linux_path()


def without_linux_path() -> str | None:
    """Why every socket counts as outside here, or None where the Linux
    path works."""
    if _PROC:
        return None
    if os.environ.get(NO_PROC_ENV, "") not in ("", "0"):
        return f"switched off by {NO_PROC_ENV}"
    if not sys.platform.startswith("linux"):
        return f"no Linux /proc on {sys.platform}"
    if fcntl is None:
        return "no fcntl module"
    return "no /proc/self/fd or /proc/self/fdinfo"


_said = False


def _say_once() -> None:
    """The note, once a process (see the module's docstring)."""
    global _said
    if _said:
        return
    _said = True
    logging.getLogger("pywheel.testing").warning(
        "pywheel.testing: %s: every descriptor a virtual loop watches counts as "
        "outside the loop, so virtual time waits autojump_threshold for it "
        "(never earlier; slower than on Linux)",
        without_linux_path(),
    )


_INET = (socket.AF_INET, socket.AF_INET6)

#: The virtual loops of this process (see ``Peers._served``).
_LOOPS: weakref.WeakSet = weakref.WeakSet()
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
    None when not connected (and for AF_UNIX); None if it cannot be read."""
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
        return family, kind, listening, local, remote
    except OSError:
        return None
    finally:
        sock.detach()


# ---- AF_UNIX peers through sock_diag (linux/sock_diag.h, unix_diag.h) -------

_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 1
_UDIAG_SHOW_PEER = 0x04
_UNIX_DIAG_PEER = 2
_NOCOOKIE = 0xFFFFFFFF
#: None until probed; then whether this kernel answers AF_UNIX sock_diag
#: requests (without it every AF_UNIX socket is outside).
_diag_ok: bool | None = None


def _diag_request(ino: int):
    """The raw sock_diag answer about AF_UNIX socket ``ino``, or None."""
    try:
        nl = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG)
    except (OSError, AttributeError):
        return None
    try:
        # struct unix_diag_req: family, protocol, pad, states, ino, show, cookie[2]
        req = struct.pack(
            "=BBHIIIII",
            socket.AF_UNIX,
            0,
            0,
            0xFFFFFFFF,
            ino,
            _UDIAG_SHOW_PEER,
            _NOCOOKIE,
            _NOCOOKIE,
        )
        head = struct.pack("=IHHII", 16 + len(req), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0)
        nl.settimeout(1.0)
        nl.send(head + req)
        return nl.recv(65536)
    except OSError:
        return None
    finally:
        nl.close()


def _parse_peer(data, ino: int):
    """The peer inode in a sock_diag answer about ``ino`` (0: it has none),
    or None if the answer is not one."""
    if data is None or len(data) < 32:
        return None
    length, kind = struct.unpack_from("=IH", data, 0)
    if kind != _SOCK_DIAG_BY_FAMILY:
        return None  # NLMSG_ERROR: no such socket, or no unix_diag
    # struct unix_diag_msg (16 bytes) after the header, then attributes.
    (found,) = struct.unpack_from("=I", data, 20)
    if found != ino:
        return None
    pos, end = 32, min(length, len(data))
    while pos + 4 <= end:
        alen, atype = struct.unpack_from("=HH", data, pos)
        if alen < 4:
            break
        if atype == _UNIX_DIAG_PEER and alen >= 8:
            return struct.unpack_from("=I", data, pos + 4)[0]
        pos += (alen + 3) & ~3
    return 0


def _unix_peer(ino: int):
    """The inode of AF_UNIX socket ``ino``'s peer; 0 if it has none (not
    connected); None if the kernel cannot say."""
    global _diag_ok
    if _diag_ok is None:
        # Once: does it name a socketpair's peer right?
        a, b = socket.socketpair()
        try:
            ia, ib = os.fstat(a.fileno()).st_ino, os.fstat(b.fileno()).st_ino
            _diag_ok = _parse_peer(_diag_request(ia), ia) == ib
        finally:
            a.close()
            b.close()
    if not _diag_ok:
        return None
    return _parse_peer(_diag_request(ino), ino)


# ---- this process's descriptors, read once per round when needed ------------


class _Round:
    """What one classification round reads from /proc, each read at most
    once and only if needed."""

    __slots__ = ("_sockets", "_connections", "_polled", "_polled_unsure")

    def __init__(self) -> None:
        self._sockets: dict[int, int] | None = None
        self._connections: dict[tuple, int] | None = None
        self._polled: set[int] | None = None
        self._polled_unsure = False

    def sockets(self) -> dict[int, int]:
        """{inode: descriptor} of this process's sockets."""
        if self._sockets is None:
            found: dict[int, int] = {}
            try:
                names = os.listdir("/proc/self/fd")
            except OSError:
                names = []
            for name in names:
                try:
                    link = os.readlink(f"/proc/self/fd/{name}")
                except OSError:
                    continue
                if link.startswith("socket:["):
                    found.setdefault(int(link[8:-1]), int(name))
            self._sockets = found
        return self._sockets

    def connections(self) -> dict[tuple, int]:
        """{(local, remote): fd} for this process's connected TCP sockets."""
        if self._connections is None:
            found: dict[tuple, int] = {}
            for fd in self.sockets().values():
                info = _describe(fd)
                if info is None:
                    continue
                family, kind, listening, local, remote = info
                if family in _INET and kind == socket.SOCK_STREAM and remote is not None:
                    found[(local, remote)] = fd
            self._connections = found
        return self._connections

    def polled_elsewhere(self, own_poll: int) -> set[int] | None:
        """Inodes registered in an epoll instance of this process other than
        ``own_poll`` (another thread's event loop: stock asyncio, uvloop,
        pywheel); each one's ``/proc/self/fdinfo`` lists its targets.  None
        when one of them could not be read: it may list any socket."""
        if self._polled is None:
            found: set[int] = set()
            try:
                names = os.listdir("/proc/self/fd")
            except OSError:
                names = []
            for name in names:
                fd = int(name)
                if fd == own_poll:
                    continue
                try:
                    if os.readlink(f"/proc/self/fd/{name}") != "anon_inode:[eventpoll]":
                        continue
                except OSError:
                    continue  # closed meanwhile
                try:
                    with open(f"/proc/self/fdinfo/{name}") as f:
                        text = f.read()
                except FileNotFoundError:
                    continue  # closed meanwhile
                except OSError:
                    self._polled_unsure = True  # it may list any socket
                    continue
                for line in text.splitlines():
                    if line.startswith("tfd:"):
                        _, _, rest = line.partition(" ino:")
                        if rest:
                            found.add(int(rest.split()[0], 16))
            self._polled = found
        return None if self._polled_unsure else self._polled


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


def _quiet(fd: int, events: int, peer: tuple[int, int], alive: bool) -> bool:
    """True if nothing is on its way between inside TCP socket ``fd`` and
    its peer that could make ``fd`` ready for ``events`` without the program
    acting first.  ``alive``: the peer descriptor still holds the peer."""
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
    if not alive:
        # The peer was closed: its kernel end may still deliver what it
        # held, then a FIN; once the FIN is in, nothing more comes.
        return state == 8  # CLOSE_WAIT
    y = _tcp_info(peer[0])
    if y is None:
        return False
    if y[3] > received or y[4]:
        return False  # bytes sent and not received yet, or held back (Nagle)
    return not (y[0] in _FIN_SENT and state in _FIN_NOT_RECEIVED)


def has_children() -> bool:
    """True if this process has a child (live, or exited and not reaped:
    any thread's), or if unsure.  ``WNOWAIT`` leaves it to be reaped by its
    owner."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    except (OSError, AttributeError):
        return True
    return True  # None (none has exited yet) or one that has: a child


# Cache entries, per descriptor: (inode, kind, ...)
_OUT = 0  # (ino, _OUT): outside for good
_CONN = 1  # (ino, _CONN, peer_fd, peer_ino, tcp): peer proven in this process
_LISTEN = 2  # (ino, _LISTEN, local): a loopback TCP listener


class Peers:
    """Per loop: which watched descriptors can hear from outside.

    ``loop``: the loop whose selector and transports serve the peers;
    None classifies for the process as a whole (any peer in this process
    counts as served: the classification's own tests)."""

    __slots__ = ("_cache", "_loop", "_tainted", "__weakref__")

    def __init__(self, loop=None) -> None:
        self._cache: dict[int, tuple] = {}
        self._loop = None if loop is None else weakref.ref(loop)
        #: (fd, inode) of listeners seen with a connection from outside.
        self._tainted: set[tuple[int, int]] = set()
        if loop is not None:
            _LOOPS.add(loop)

    # -- classification, cached ------------------------------------------------

    def _entry(self, fd: int, ino: int, rnd: _Round):
        """The cache entry of socket ``fd`` (inode ``ino``), classifying it
        if needed; None when not known yet (ask again next round)."""
        hit = self._cache.get(fd)
        if hit is not None and hit[0] == ino:
            return hit
        entry = self._classify(fd, ino, rnd)
        if entry is not None:
            self._cache[fd] = entry
        else:
            self._cache.pop(fd, None)
        return entry

    def _classify(self, fd: int, ino: int, rnd: _Round):
        info = _describe(fd)
        if info is None:
            return None
        family, kind, listening, local, remote = info
        if family == socket.AF_UNIX:
            if listening or kind != socket.SOCK_STREAM:
                return (ino, _OUT)
            peer_ino = _unix_peer(ino)
            if peer_ino is None:
                return (ino, _OUT) if not _diag_ok else None
            peer_fd = rnd.sockets().get(peer_ino) if peer_ino else None
            if peer_fd is None:
                # Not connected yet, an embryo not accepted yet, or a peer
                # held elsewhere: outside this round, ask again.
                return None
            return (ino, _CONN, peer_fd, peer_ino, False)
        if family not in _INET or kind != socket.SOCK_STREAM:
            return (ino, _OUT)
        if listening:
            return (ino, _LISTEN, local) if _is_loopback(local[0]) else (ino, _OUT)
        if remote is None:
            return None  # connecting: ask again
        peer_fd = rnd.connections().get((remote, local))
        if peer_fd is None:
            return None  # not accepted yet (or its peer is gone): ask again
        try:
            peer_ino = os.fstat(peer_fd).st_ino
        except OSError:
            return None
        return (ino, _CONN, peer_fd, peer_ino, True)

    # -- which loop serves a peer -----------------------------------------------

    def _served(self, peer_fd: int, peer_ino: int, rnd: _Round) -> bool:
        """True if peer ``peer_fd`` is proven to be this loop's to use: no
        other thread's loop may write to it while this loop sleeps."""
        ref = self._loop
        if ref is None:
            return True
        loop = ref()
        if loop is None:
            return False
        # Registered here, or held by one of this loop's live transports
        # (one paused for reading is registered nowhere): only this loop's
        # callbacks act on it.  A transport is checked to hold that very
        # descriptor still: the map is keyed by descriptor, and a closed
        # transport not collected yet names one that may be reused.
        try:
            if peer_fd in _selector_map(loop):
                return True
            transport = loop._transports.get(peer_fd)
            sock = getattr(transport, "_sock", None)
            if sock is not None and sock.fileno() == peer_fd and not transport.is_closing():
                return True
        except Exception:
            return False
        # Registered nowhere here: an idle socket (one a coroutine of this
        # loop is about to use with sock_sendall, say).  A blocking one is
        # served by a thread that blocks on it, not by an event loop.
        try:
            if not fcntl.fcntl(peer_fd, fcntl.F_GETFL) & os.O_NONBLOCK:
                return False
        except OSError:
            return False
        # A non-blocking one may be another thread's event loop's all the
        # same: registered in its epoll instance, or registered nowhere for a
        # moment (a connection made or accepted whose transport is a
        # call_soon away) or for long (a paused transport).  Outside if
        # another epoll instance of the process watches it, or while another
        # virtual loop runs (on another thread) or holds it in a transport.
        polled = rnd.polled_elsewhere(_own_poll(loop))
        if polled is None or peer_ino in polled:
            return False
        try:
            for other in list(_LOOPS):
                if other is not loop and not other.is_closed():
                    if other.is_running() or other._transports.get(peer_fd) is not None:
                        return False
        except Exception:  # changed by another thread meanwhile: unsure
            return False
        return True

    def _listener_inside(self, fd: int, ino: int, local, rnd: _Round) -> bool:
        """A loopback listener is inside while it has accepted connections
        still open here, each one's peer proven inside and this loop's."""
        if (fd, ino) in self._tainted:
            return False
        accepted = [cfd for (mine, _), cfd in rnd.connections().items() if mine == local]
        if not accepted:
            return False  # nothing proven: anything may be about to connect
        for cfd in accepted:
            try:
                cino = os.fstat(cfd).st_ino
            except OSError:
                return False
            entry = self._entry(cfd, cino, rnd)
            if entry is None or entry[1] != _CONN:
                # Its peer is not in this process (a helper, another
                # process): whoever connected may connect again.
                self._tainted.add((fd, ino))
                return False
            _, _, peer_fd, peer_ino, _ = entry
            if not _same(peer_fd, peer_ino):
                continue  # proven before, closed since: its FIN is its last word
            if not self._served(peer_fd, peer_ino, rnd):
                return False
        return True

    # -- the round ----------------------------------------------------------------

    def any_outside(self, fds) -> bool:
        """True if any of ``fds`` may receive from outside the loop.
        ``fds``: {descriptor: selectors events}, or descriptors (watched
        for both)."""
        if not fds:
            return False
        if not _PROC:
            _say_once()
            return True
        if not isinstance(fds, dict):
            fds = dict.fromkeys(fds, _READ | _WRITE)
        rnd = _Round()
        for fd, events in fds.items():
            try:
                st = os.fstat(fd)
            except OSError:
                return True
            if not stat.S_ISSOCK(st.st_mode):
                return True
            entry = self._entry(fd, st.st_ino, rnd)
            if entry is None or entry[1] == _OUT:
                return True
            if entry[1] == _LISTEN:
                if not self._listener_inside(fd, st.st_ino, entry[2], rnd):
                    return True
                continue
            _, _, peer_fd, peer_ino, tcp = entry
            alive = _same(peer_fd, peer_ino)
            if not tcp:
                if not alive:
                    # The peer left this descriptor: moved (dup) or closed.
                    # Closed makes this end ready at once (AF_UNIX delivers
                    # in the closing call); moved: look it up again.
                    self._cache.pop(fd, None)
                    entry = self._entry(fd, st.st_ino, rnd)
                    if entry is None or entry[1] != _CONN:
                        return True
                    _, _, peer_fd, peer_ino, _ = entry
                if not self._served(peer_fd, peer_ino, rnd):
                    return True
                continue
            if alive and not self._served(peer_fd, peer_ino, rnd):
                return True
            if not _quiet(fd, events, (peer_fd, peer_ino), alive):
                return True  # something on its way: not this round
        # Every one is inside, unless a child process could share them.
        return has_children()


def _own_poll(loop) -> int:
    sel = getattr(loop, "_selector", None)
    sel = getattr(sel, "_sel", sel)
    try:
        return sel.fileno()
    except Exception:
        return -1


def _selector_map(loop):
    sel = loop._selector
    sel = getattr(sel, "_sel", sel)
    return sel.get_map()


def _same(fd: int, ino: int) -> bool:
    try:
        return os.fstat(fd).st_ino == ino
    except OSError:
        return False
