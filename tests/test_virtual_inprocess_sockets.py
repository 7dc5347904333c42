"""Sockets whose peer is in this same process (a loopback client and server
on one loop, a socketpair) cannot receive what the program has not sent, so
the virtual clock jumps past them without waiting ``autojump_threshold``;
a socket to another process still makes the loop wait.  Counted, not
timed: ``loop._threshold_waits`` counts the real waits for outstanding I/O."""

import asyncio
import socket
import subprocess
import sys
import textwrap

import pytest
from helpers import needs_linux_path

from pywheel.testing import VirtualEventLoop, _peers

# Inside needs pywheel.testing's Linux path; the tests that a socket is still
# waited for run without it too (tests/test_no_proc.py runs them so).
linux_path = needs_linux_path()


def _run(main, **kwargs):
    loop = VirtualEventLoop(**kwargs)
    try:
        return loop, loop.run_until_complete(main())
    finally:
        loop.close()


@linux_path
def test_loopback_server_and_client_on_one_loop_never_wait():
    async def main():
        async def handle(reader, writer):
            while line := await reader.readline():
                writer.write(line.upper())
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        replies = []
        for i in range(10):
            await asyncio.sleep(30)  # the connection and listener stay open
            writer.write(b"ping %d\n" % i)
            replies.append(await reader.readline())
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        return replies

    # 5 s a wait: on the old rule (every watched fd outstanding) this run
    # waited 10 times; now the counter says none.
    loop, replies = _run(main, autojump_threshold=5.0)
    assert replies == [b"PING %d\n" % i for i in range(10)]
    assert loop._threshold_waits == 0
    assert loop.time() >= 300


@linux_path
def test_socketpair_never_waits():
    async def main():
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(loop.sock_recv(b, 4), 30)
        await loop.sock_sendall(a, b"ping")
        assert await loop.sock_recv(b, 4) == b"ping"
        a.close()
        b.close()

    loop, _ = _run(main, autojump_threshold=5.0)
    # the 30 s timeout, and the iterations (10 µs each) of the exchange
    assert loop._threshold_waits == 0 and 30.0 < loop.time() < 30.0 + 20e-5


def test_pipe_still_waits():
    async def main():
        import os

        loop = asyncio.get_running_loop()
        r, w = os.pipe()
        loop.add_reader(r, lambda: None)
        await asyncio.sleep(1)
        loop.remove_reader(r)
        os.close(r)
        os.close(w)

    loop, _ = _run(main, autojump_threshold=0.01)
    assert loop._threshold_waits >= 1


# A server in a grandchild (its parent exits at once, so this process has no
# child: the socket's peer alone must make the loop wait).
SERVER = textwrap.dedent(
    """
    import os, socket, sys
    srv = socket.create_server(("127.0.0.1", 0))
    print(srv.getsockname()[1], flush=True)
    if os.fork():
        os._exit(0)
    srv.settimeout(60)
    conn, _ = srv.accept()
    conn.settimeout(60)
    conn.recv(1)
    """
)


def test_socket_to_another_process_still_waits():
    proc = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline())
    proc.wait(timeout=60)  # the intermediate parent is gone

    async def main():
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.sleep(1)
        writer.write(b"x")  # lets the server end
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    loop, _ = _run(main, autojump_threshold=0.01)
    assert loop._threshold_waits >= 1


def test_a_live_child_makes_every_socket_outside():
    async def main():
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        b.setblocking(False)
        reader = loop.create_task(loop.sock_recv(b, 1))
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            await asyncio.sleep(1)
        finally:
            child.kill()
            child.wait()
        reader.cancel()
        a.close()
        b.close()

    loop, _ = _run(main, autojump_threshold=0.01)
    assert loop._threshold_waits >= 1


@linux_path
def test_classification():
    peers = _peers.Peers()
    a, b = socket.socketpair()
    srv = socket.create_server(("127.0.0.1", 0))
    c = socket.create_connection(srv.getsockname())
    try:
        assert not peers.any_outside([a.fileno(), b.fileno()])
        # A loopback listener with no connection accepted: anything on the
        # machine may be about to connect (a detached helper given its port).
        assert peers.any_outside([srv.fileno()])
        assert peers.any_outside([c.fileno()])  # not accepted yet: unsure
        s, _ = srv.accept()
        assert not peers.any_outside([c.fileno(), s.fileno()])  # asked again
        # Its one connection's peer is this process's: inside.
        assert not peers.any_outside([srv.fileno()])
        s.close()
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        assert peers.any_outside([udp.fileno()])
        udp.close()
    finally:
        for x in (a, b, srv, c):
            x.close()
