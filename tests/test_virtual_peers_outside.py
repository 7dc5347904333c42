"""A socket counts as inside the loop (so the virtual clock may jump while it
is quiet) only when that is proven; when unsure, it is outside and the loop
waits ``autojump_threshold`` for it, as the stock loop would wait in real
time.  A helper process that detached from this one (re-parented: not a
child any more) holding one end of a socketpair made here, or connecting to
a loopback listener, and a server running its own event loop on a thread
started before the test's loop, are all outside.  The stock loop is the
oracle: what it receives before the timeout, the virtual loop receives
too (with a threshold that covers the helper's real delay), and with the
default threshold the loop at least waits for it (counted, not timed:
``loop._threshold_waits``)."""

import asyncio
import socket
import subprocess
import sys
import threading

import pytest
from helpers import needs_linux_path

from pywheel.testing import DEFAULT_AUTOJUMP_THRESHOLD, VirtualEventLoop, _peers

# The tests that prove a socket outside run without pywheel.testing's Linux
# path too (where every socket is outside: tests/test_no_proc.py runs them so);
# those that prove one inside need it.
linux_path = needs_linux_path()

#: A helper that detaches: ``sh`` starts it as a background job and exits at
#: once (reaped by ``subprocess.run``), so the helper is re-parented and this
#: process has no child while it sleeps its 0.3 s real seconds.
DETACH = "(sleep 0.3; {}) &"


def _run(main, loop):
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def _socketpair_helper_main():
    async def main():
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        a.setblocking(False)
        try:
            # The helper writes "x" to its stdout: b, the pair's other end.
            subprocess.run(["sh", "-c", DETACH.format("printf x")], stdout=b, check=True)
            b.close()  # only the detached helper holds it now
            try:
                return await asyncio.wait_for(loop.sock_recv(a, 1), 10)
            except TimeoutError:
                return "timeout"
        finally:
            a.close()

    return main


def _listener_helper_main():
    connect = (
        f"{sys.executable} -I -S -c "
        '\'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])))'
        '.sendall(b"x")\' {port}'
    )

    async def main():
        got = asyncio.get_running_loop().create_future()

        async def handle(reader, writer):
            data = await reader.read(1)
            if not got.done():
                got.set_result(data)
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            subprocess.run(
                ["sh", "-c", DETACH.format(connect.format(port=port))],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,  # refused, once the test is over
                check=True,
            )
            try:
                return await asyncio.wait_for(got, 10)
            except TimeoutError:
                return "timeout"
        finally:
            server.close()
            await server.wait_closed()

    return main


HELPERS = {"socketpair": _socketpair_helper_main, "listener": _listener_helper_main}


@pytest.mark.parametrize("shape", sorted(HELPERS))
def test_a_detached_helper_is_waited_for_as_the_stock_loop_waits(shape):
    # The oracle: the stock loop gets the helper's byte before its timeout.
    assert _run(HELPERS[shape](), asyncio.new_event_loop()) == b"x"
    # With a threshold longer than the helper's delay, so does virtual time
    # (it used to jump to the 10 s timeout at once: the pair's SO_PEERCRED
    # names this process, and a loopback listener counted as inside).
    loop = VirtualEventLoop(autojump_threshold=3)
    assert _run(HELPERS[shape](), loop) == b"x"
    assert loop.time() < 10 and loop._threshold_waits >= 1


@pytest.mark.parametrize("shape", sorted(HELPERS))
def test_a_detached_helper_is_waited_for_the_default_threshold(shape):
    # The default 0.05 s is shorter than the helper's 0.3 s: the loop waits
    # that long for it (it did not wait at all), then jumps.
    loop = VirtualEventLoop()
    assert loop._autojump_threshold == DEFAULT_AUTOJUMP_THRESHOLD
    _run(HELPERS[shape](), loop)
    assert loop._threshold_waits >= 1


class _ThreadServer:
    """A server running its own event loop on a background thread, started
    before the test's loop (aiosmtpd's Controller, anyio's portal): it
    answers each line after ``delay`` seconds of its own loop's time."""

    def __init__(self, loop_factory, family=socket.AF_INET, delay=0.0):
        self.loop = loop_factory()
        self.delay = delay
        self.family = family
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._main, daemon=True)
        self.thread.start()
        assert self.ready.wait(30)

    def _main(self):
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._start())
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self._stop())
        self.loop.close()

    async def _start(self):
        async def handle(reader, writer):
            while line := await reader.readline():
                if self.delay:
                    await asyncio.sleep(self.delay)
                writer.write(line.upper())
                await writer.drain()
            writer.close()

        if self.family == socket.AF_UNIX:
            self.a, self.b = socket.socketpair()
            self.b_reader, self.b_writer = await asyncio.open_connection(sock=self.b)
            self.task = asyncio.ensure_future(handle(self.b_reader, self.b_writer))
            self.server = None
        else:
            self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
            self.port = self.server.sockets[0].getsockname()[1]

    async def _stop(self):
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        else:
            self.b_writer.close()

    async def connect(self):
        if self.family == socket.AF_UNIX:
            return await asyncio.open_connection(sock=self.a)
        return await asyncio.open_connection("127.0.0.1", self.port)

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


def _client_main(server, rounds=3):
    async def main():
        reader, writer = await server.connect()
        replies = []
        try:
            for i in range(rounds):
                writer.write(b"ping %d\n" % i)
                try:
                    replies.append(await asyncio.wait_for(reader.readline(), 1))
                except TimeoutError:
                    replies.append("timeout")
        finally:
            writer.close()
        return replies

    return main


SERVER_LOOPS = {
    "stock": asyncio.new_event_loop,
    # On virtual time too, as under --virtual-time: its client socket is
    # outside for it as well, so it waits 0.2 s real before it jumps.
    "virtual": lambda: VirtualEventLoop(autojump_threshold=0.2),
}


@pytest.mark.parametrize("family", ["tcp", "unix"])
@pytest.mark.parametrize("server_loop", sorted(SERVER_LOOPS))
@pytest.mark.parametrize("threshold", [DEFAULT_AUTOJUMP_THRESHOLD, 3.0])
def test_a_server_on_another_thread_answers_before_the_clients_timeout(
    family, server_loop, threshold
):
    # The client's peer is a socket of this process, but another thread's
    # loop serves it: outside.  It used to count as inside, and the client's
    # loop jumped to its 1 s read timeout before the thread answered.  The
    # server's loop is stock, or virtual too (as under --virtual-time).
    # With a 3 s threshold the server takes 0.2 s (its loop's time) to
    # answer: the old rule jumped first every time.  With the default 0.05 s
    # it answers at once (the virtual loop waits no longer for outside work;
    # the old rule lost this one only when the jump won the race).
    fam = socket.AF_UNIX if family == "unix" else socket.AF_INET
    delay = 0.0 if threshold == DEFAULT_AUTOJUMP_THRESHOLD else 0.2
    expected = [b"PING %d\n" % i for i in range(3)]
    server = _ThreadServer(SERVER_LOOPS[server_loop], fam, delay)
    try:
        oracle = _run(_client_main(server), asyncio.new_event_loop())
        assert oracle == expected
    finally:
        server.close()
    server = _ThreadServer(SERVER_LOOPS[server_loop], fam, delay)
    try:
        loop = VirtualEventLoop(autojump_threshold=threshold)
        assert _run(_client_main(server), loop) == expected
        assert loop.time() < 1
    finally:
        server.close()


@linux_path
def test_an_in_process_socketpair_on_one_loop_still_jumps_at_once():
    # Both ends served by this loop (one a transport, one a sock_* socket it
    # is about to use): inside, no real wait, with a 5 s threshold.
    async def main():
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        b.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=a)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.readline(), 30)
        await loop.sock_sendall(b, b"x\n")
        assert await reader.readline() == b"x\n"
        writer.close()
        b.close()

    loop = VirtualEventLoop(autojump_threshold=5.0)
    _run(main, loop)
    assert loop._threshold_waits == 0 and loop.time() >= 30


@linux_path
def test_a_blocking_peer_in_this_process_is_outside():
    # A blocking socket is served by a thread that blocks on it, not by
    # this loop: outside, whoever holds it.
    a, b = socket.socketpair()
    loop = VirtualEventLoop()
    try:
        peers = _peers.Peers(loop)
        a.setblocking(False)
        assert peers.any_outside({a.fileno(): 1})
        b.setblocking(False)
        assert not peers.any_outside({a.fileno(): 1})
    finally:
        loop.close()
        a.close()
        b.close()


@linux_path
def test_children_are_seen_without_the_proc_children_file(monkeypatch):
    # Some kernels have no /proc/<pid>/task/<tid>/children: a live child was
    # then reported as none.  Unknown must mean outside.
    import builtins

    real_open = builtins.open

    def no_children_file(path, *args, **kwargs):
        if isinstance(path, str) and path.endswith("/children"):
            raise FileNotFoundError(path)
        return real_open(path, *args, **kwargs)

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        monkeypatch.setattr(builtins, "open", no_children_file)
        assert _peers.has_children()
    finally:
        monkeypatch.undo()
        child.kill()
        child.wait()
    assert not _peers.has_children()


def test_a_server_loop_on_a_thread_waits_for_a_blocking_client_of_this_process():
    # aiosmtpd's Controller checks that its server is up with a plain socket
    # (a Python timeout: non-blocking underneath) from the main thread: the
    # server's loop, on another thread, must not take it for its own idle
    # socket and jump to its 300 s idle timeout before the line comes.
    async def serve(reader, writer):
        try:
            line = await asyncio.wait_for(reader.readline(), 300)
        except TimeoutError:
            line = b"timeout\n"
        writer.write(line)
        await writer.drain()
        writer.close()

    loop = VirtualEventLoop(autojump_threshold=3)
    started = threading.Event()
    box = {}

    def run():
        async def main():
            box["server"] = await asyncio.start_server(serve, "127.0.0.1", 0)
            box["stop"] = asyncio.get_running_loop().create_future()
            started.set()
            await box["stop"]
            box["server"].close()
            await box["server"].wait_closed()

        loop.run_until_complete(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert started.wait(30)
        port = box["server"].sockets[0].getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
            threading.Event().wait(0.2)  # the client takes its time, in real time
            client.sendall(b"hello\n")
            assert client.makefile("rb").readline() == b"hello\n"
    finally:
        loop.call_soon_threadsafe(lambda: box["stop"].done() or box["stop"].set_result(None))
        thread.join(30)
        loop.close()


@linux_path
def test_a_closed_transport_does_not_vouch_for_its_reused_descriptor():
    # The loop's transports are keyed by descriptor; a closed one that is
    # not collected yet must not make a reused descriptor (another loop's
    # socket now: here registered in another epoll instance) count as this
    # loop's.
    import selectors

    class Closed:
        _sock = socket.socket()

        def is_closing(self):
            return True

    Closed._sock.close()
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    other = selectors.EpollSelector()  # the other loop's
    other.register(b, selectors.EVENT_READ)
    loop = VirtualEventLoop()
    try:
        loop._transports[b.fileno()] = Closed()
        assert _peers.Peers(loop).any_outside({a.fileno(): 1})
        other.unregister(b)  # b idle, no other loop: this loop's own
        assert not _peers.Peers(loop).any_outside({a.fileno(): 1})
    finally:
        other.close()
        loop.close()
        a.close()
        b.close()


@linux_path
@pytest.mark.parametrize("error", [PermissionError, OSError])
def test_an_epoll_whose_fdinfo_cannot_be_read_may_poll_any_socket(monkeypatch, error):
    # Another thread's epoll instance (here, one made for it) whose
    # /proc/self/fdinfo cannot be read may list the idle peer: unsure, so
    # outside.  (One closed meanwhile, FileNotFoundError, lists nothing.)
    import builtins
    import selectors

    real_open = builtins.open

    def no_fdinfo(path, *args, **kwargs):
        if isinstance(path, str) and path.startswith("/proc/self/fdinfo/"):
            raise error(path)
        return real_open(path, *args, **kwargs)

    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    other = selectors.EpollSelector()
    loop = VirtualEventLoop()
    try:
        assert not _peers.Peers(loop).any_outside({a.fileno(): 1})
        monkeypatch.setattr(builtins, "open", no_fdinfo)
        assert _peers.Peers(loop).any_outside({a.fileno(): 1})
        monkeypatch.undo()
        assert not _peers.Peers(loop).any_outside({a.fileno(): 1})
    finally:
        monkeypatch.undo()
        other.close()
        loop.close()
        a.close()
        b.close()


def test_a_loop_on_a_thread_waits_for_the_thread_that_drives_it():
    # anyio's BlockingPortal: a loop on a background thread, driven by the
    # thread that started it (known before the loop ran, so not a "new"
    # thread), which cancels a task soon after it began a 3 s sleep.  The
    # loop used to jump past the sleep at once: the task was never cancelled.
    # (A threshold long enough for this thread to call in, however loaded;
    # with the default 0.05 s the outcome is the machine's.)
    loop = VirtualEventLoop(autojump_threshold=3)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    sleeping, done = threading.Event(), threading.Event()
    tasks, outcome = [], []

    async def sleeper():
        try:
            sleeping.set()
            await asyncio.sleep(3)
            outcome.append("slept")
        except asyncio.CancelledError:
            outcome.append("cancelled")
        finally:
            done.set()

    try:
        loop.call_soon_threadsafe(lambda: tasks.append(loop.create_task(sleeper())))
        assert sleeping.wait(30)
        loop.call_soon_threadsafe(lambda: tasks[0].cancel())
        assert done.wait(30)
        assert outcome == ["cancelled"]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()
