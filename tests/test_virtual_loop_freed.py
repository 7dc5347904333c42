"""A VirtualEventLoop that is done with is freed at once, by reference
counting, as asyncio's own loop and WheelEventLoop are: it is not part of a
reference cycle, so neither it nor anything it holds (its wheel, selector,
socket caches, clock anchors, whatever its callbacks referenced) waits for
the cyclic garbage collector.

Found on aiohttp's suite (issue 20): every VirtualEventLoop used to be a cycle
(the loop holds its clock anchors, which held the loop back), so each test's
loop, with about 40 objects, survived until the next collection, where the
stock loop was gone when its test ended.  The collector is disabled here, so
only reference counting can free anything.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import time
import weakref

import pytest

from pywheel import testing as vt
from pywheel.testing import Timing

#: pywheel.testing's own classes, counted on the heap before and after.
_OWN = ("VirtualEventLoop", "Clocks", "Peers", "ManualWheel", "_VirtualSelector")


def _own_objects() -> int:
    return sum(type(o).__name__ in _OWN for o in gc.get_objects())


async def _sleep():
    await asyncio.sleep(0.5)


async def _clocks():
    t0 = time.monotonic()
    await asyncio.sleep(2)
    assert 2 < time.monotonic() - t0 < 2.001  # and its 10 µs iterations


async def _executor():
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, time.sleep, 0.001)
    await asyncio.to_thread(time.sleep, 0.001)
    await loop.shutdown_default_executor()


async def _outside():
    with vt.outside():
        await asyncio.sleep(0.01)


async def _loopback():
    # a client and a server on this loop: the socket classification caches
    # entries for both ends
    loop = asyncio.get_running_loop()
    lsock = socket.create_server(("127.0.0.1", 0))
    lsock.setblocking(False)
    client = socket.socket()
    client.setblocking(False)
    try:
        await loop.sock_connect(client, lsock.getsockname())
        server, _ = await loop.sock_accept(lsock)
        with server:
            await loop.sock_sendall(client, b"ping")
            assert await loop.sock_recv(server, 4) == b"ping"
            await asyncio.sleep(1)
    finally:
        client.close()
        lsock.close()


async def _timeout():
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(1):
            await asyncio.sleep(10)


def _most(n: int) -> int:
    return n


PROGRAMS = {  # name: (program, the loop's keywords; a fresh Timing per run)
    "sleep": (_sleep, dict),
    "clocks": (_clocks, dict),
    "clocks-off": (_sleep, lambda: {"clocks": False}),
    "executor": (_executor, dict),
    "outside": (_outside, dict),
    "loopback": (_loopback, dict),
    "timeout-limit": (_timeout, lambda: {"limit": 60}),
    # clocks off: these check what a Timing adds, on its own
    "timing-late": (
        _timeout,
        lambda: {"timing": Timing(max_late=0.01, draw=_most), "clocks": False},
    ),
    "timing-cost": (
        _timeout,
        lambda: {"timing": Timing(max_cost=0.01, draw=_most), "clocks": False},
    ),
}


@pytest.fixture
def no_collector():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_a_closed_loop_is_freed_without_the_collector(name, no_collector):
    program, keywords = PROGRAMS[name]
    kw = keywords()
    before = _own_objects()
    loop = vt.new_event_loop(**kw)
    try:
        loop.run_until_complete(program())
    finally:
        loop.close()
    ref = weakref.ref(loop)
    del loop
    assert ref() is None, f"{name}: the closed loop needs the cyclic collector"
    assert _own_objects() == before


def test_a_loop_never_run_is_freed_without_the_collector(no_collector):
    before = _own_objects()
    loop = vt.new_event_loop()
    loop.close()
    ref = weakref.ref(loop)
    del loop
    assert ref() is None
    assert _own_objects() == before


def test_the_clocks_still_follow_the_loop_in_a_second_run():
    # the anchors hold the loop weakly now: a loop run twice, with the first
    # run's references gone, still reads its own virtual time
    loop = vt.new_event_loop()
    try:
        loop.run_until_complete(_clocks())
        gc.collect()
        loop.run_until_complete(_clocks())
        assert 4 < loop.time() < 4.001  # two runs' sleeps, and their 10 µs iterations
    finally:
        loop.close()


def test_run_and_a_runner_leave_no_loop_behind(no_collector):
    before = _own_objects()
    vt.run(_clocks())
    with asyncio.Runner(loop_factory=vt.new_event_loop) as runner:
        runner.run(_clocks())
    assert _own_objects() == before
