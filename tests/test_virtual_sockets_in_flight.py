"""A connection inside the process is quiet only when nothing is on its way:
bytes or a FIN its peer sent that have not reached it yet (the kernel hands
loopback data over in a deferred step, invisible to ``select(0)``), or, for
an end watched for writing, bytes not yet acknowledged or not yet sent (an
ACK or a window update is coming, or a peer that stopped reading holds
them).  Then the loop counts it as outside for that round and waits for it,
as for a socket to another process; a quiet connection still lets the clock
jump at once."""

import asyncio
import selectors
import socket

import pytest
from helpers import needs_linux_path

from pywheel.testing import VirtualEventLoop, _peers

# Inside needs pywheel.testing's Linux path (TCP_INFO's counters); the blocked
# writer is outside, and runs without it too (tests/test_no_proc.py).
linux_path = needs_linux_path()

READ, WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE


@pytest.fixture
def pair():
    srv = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(srv.getsockname())
    accepted, _ = srv.accept()
    srv.close()
    yield client, accepted
    client.close()
    accepted.close()


def _needs_counters(sock):
    if _peers._tcp_info(sock.fileno()) is None:
        pytest.skip("TCP_INFO has no byte counters here (Linux < 4.19)")


@linux_path
def test_a_quiet_connection_is_inside(pair):
    client, accepted = pair
    _needs_counters(client)
    client.sendall(b"ping")
    assert accepted.recv(4) == b"ping"
    accepted.sendall(b"pong")  # carries the ACK of the ping
    assert client.recv(4) == b"pong"
    peers = _peers.Peers()
    assert not peers.any_outside({client.fileno(): READ | WRITE, accepted.fileno(): READ})


@linux_path
def test_a_writer_whose_peer_stopped_reading_is_outside(pair):
    client, accepted = pair
    _needs_counters(client)
    client.setblocking(False)
    with pytest.raises(BlockingIOError):
        while True:  # until both buffers are full: the peer does not read
            client.send(b"x" * 65536)
    peers = _peers.Peers()
    assert peers.any_outside({client.fileno(): WRITE})
    assert not peers.any_outside({client.fileno(): READ})  # nothing comes its way


def _fake_info(monkeypatch, table):
    real = _peers._tcp_info

    def info(fd):
        got = real(fd)
        return table.get(fd, got) if got is not None else None

    monkeypatch.setattr(_peers, "_tcp_info", info)


@linux_path
def test_bytes_on_their_way_make_the_reader_outside(pair, monkeypatch):
    client, accepted = pair
    _needs_counters(client)
    peers = _peers.Peers()
    assert not peers.any_outside({client.fileno(): READ})
    # The peer has sent 5 bytes the client has not received: as the kernel
    # shows it between the peer's send() and the deferred delivery.
    state, unacked, received, sent, notsent = _peers._tcp_info(accepted.fileno())
    _fake_info(monkeypatch, {accepted.fileno(): (state, 1, received, sent + 5, notsent)})
    assert peers.any_outside({client.fileno(): READ})
    assert not peers.any_outside({client.fileno(): WRITE})


@linux_path
def test_a_fin_on_its_way_makes_the_reader_outside(pair, monkeypatch):
    client, accepted = pair
    _needs_counters(client)
    peers = _peers.Peers()
    assert not peers.any_outside({client.fileno(): READ})
    state, unacked, received, sent, notsent = _peers._tcp_info(accepted.fileno())
    _fake_info(monkeypatch, {accepted.fileno(): (4, 1, received, sent, notsent)})  # FIN_WAIT1
    assert peers.any_outside({client.fileno(): READ})


def test_a_blocked_writer_times_out_on_virtual_time_and_waits_for_the_reader():
    # The server reads nothing for 60 virtual seconds: the client's drain()
    # times out after 10, on virtual time, though its socket is outside
    # (waited for, counted); then the server reads and the drain completes.
    async def main():
        got = asyncio.Event()
        readers = []

        async def handle(reader, writer):
            readers.append((reader, writer))
            await got.wait()
            while await reader.read(1 << 20):
                pass
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.transport.set_write_buffer_limits(high=0)
        writer.write(b"x" * (16 << 20))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(writer.drain(), 10)
        t = asyncio.get_running_loop().time()
        got.set()
        await asyncio.wait_for(writer.drain(), 60)
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        return t

    loop = VirtualEventLoop(autojump_threshold=0.01)
    try:
        t = loop.run_until_complete(main())
        assert 10 <= t < 60
        assert loop._threshold_waits >= 1
    finally:
        loop.close()
