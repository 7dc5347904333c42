"""Which sockets count as inside the process, and what finding out costs:
a connection is inside when its mirror (addresses swapped) is another socket
of this process, whatever address family each end uses (an IPv6 socket
connected to an IPv4 listener through a mapped address, IPv6 loopback), and
the loop finds out from the process's own descriptors, never from the
system-wide TCP table (``/proc/net/tcp``: its read walks the kernel's whole
connection hash, tens of milliseconds on a loaded machine, once per new
connection).  A socket that can hear from outside still counts as outside."""

import asyncio
import socket
import subprocess
import sys
import textwrap

import pytest
from helpers import child_env, needs_linux_path

from pywheel.testing import VirtualEventLoop, _peers

pytestmark = needs_linux_path()


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def _pair(listen_family, listen_host, connect_family, connect_host):
    srv = socket.socket(listen_family, socket.SOCK_STREAM)
    srv.bind((listen_host, 0))
    srv.listen()
    client = socket.socket(connect_family, socket.SOCK_STREAM)
    client.connect((connect_host, srv.getsockname()[1]))
    accepted, _ = srv.accept()
    return srv, client, accepted


def test_ipv6_client_of_an_ipv4_listener_through_a_mapped_address_is_inside():
    # The client's end reads ::ffff:127.0.0.1, the server's 127.0.0.1: the
    # same connection (the old /proc/net/tcp match compared the table's
    # spellings, which differ, and called both ends outside for ever).
    try:
        srv, client, accepted = _pair(
            socket.AF_INET, "127.0.0.1", socket.AF_INET6, "::ffff:127.0.0.1"
        )
    except OSError as exc:
        pytest.skip(f"no IPv4-mapped IPv6 here: {exc}")
    try:
        peers = _peers.Peers()
        assert not peers.any_outside([client.fileno()])
        assert not peers.any_outside([accepted.fileno()])
    finally:
        for s in (srv, client, accepted):
            s.close()


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback here")
def test_ipv6_loopback_listener_and_connection_are_inside():
    srv, client, accepted = _pair(socket.AF_INET6, "::1", socket.AF_INET6, "::1")
    try:
        peers = _peers.Peers()
        assert not peers.any_outside([srv.fileno(), client.fileno(), accepted.fileno()])
    finally:
        for s in (srv, client, accepted):
            s.close()


def test_listener_on_every_address_and_an_orphaned_end_are_outside():
    peers = _peers.Peers()
    wide = socket.create_server(("0.0.0.0", 0))  # others may connect
    srv, client, accepted = _pair(socket.AF_INET, "127.0.0.1", socket.AF_INET, "127.0.0.1")
    try:
        assert peers.any_outside([wide.fileno()])
        assert not peers.any_outside([client.fileno()])
        accepted.close()  # its peer is gone from this process: not known inside
        fresh = _peers.Peers()
        assert fresh.any_outside([client.fileno()])
    finally:
        for s in (wide, srv, client):
            s.close()


# In a child: an audit hook sees every open() of the run (the hook cannot be
# removed, so it stays out of this process).
NO_TABLE = textwrap.dedent(
    """
    import asyncio, sys
    from pywheel.testing import VirtualEventLoop

    opened = []
    def hook(event, args):
        if event == "open" and isinstance(args[0], str) and "/net/tcp" in args[0]:
            opened.append(args[0])
    sys.addaudithook(hook)

    async def main():
        async def handle(reader, writer):
            while line := await reader.readline():
                await asyncio.sleep(5)
                writer.write(line)
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        for i in range(5):  # a new connection each time, as an HTTP client may make
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"x\\n")
            assert await asyncio.wait_for(reader.readline(), 10) == b"x\\n"
            writer.close()
            await writer.wait_closed()
        server.close()
        await server.wait_closed()

    loop = VirtualEventLoop(autojump_threshold=5.0)
    loop.run_until_complete(main())
    print(loop.time(), loop._threshold_waits, opened)
    loop.close()
    """
)


def test_classifying_never_reads_the_system_tcp_table():
    proc = subprocess.run(
        [sys.executable, "-c", NO_TABLE],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
    )
    assert proc.returncode == 0, proc.stderr
    now, waits, opened = proc.stdout.split(maxsplit=2)
    assert float(now) >= 25.0
    assert int(waits) == 0
    assert opened.strip() == "[]"


def test_a_peer_in_this_process_that_never_answers_still_times_out_on_virtual_time():
    # Inside sockets let the clock jump: the timeout is reached on virtual
    # time, with no real wait (threshold 5 s would show as a counted wait).
    # The server keeps its end: from 3.12 a StreamWriter that is collected
    # closes its transport, and the client would read EOF instead.
    async def main():
        held = []
        server = await asyncio.start_server(lambda r, w: held.append(w), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.readline(), 60)
        writer.close()
        for w in held:
            w.close()
        server.close()
        await server.wait_closed()

    loop = VirtualEventLoop(autojump_threshold=5.0)
    try:
        loop.run_until_complete(main())
        assert loop.time() >= 60 and loop._threshold_waits == 0
    finally:
        loop.close()
