"""``pytest --virtual-time`` reaches aiohttp's own pytest fixtures with no
conftest: aiohttp.pytest_plugin's ``loop`` (made by its ``loop_factory``
parameter, ``asyncio.new_event_loop`` looked up when tests are collected,
after pywheel's plugin configured), and so ``aiohttp_client``,
``aiohttp_server``, ``aiohttp_raw_server`` and async fixtures, run on a
VirtualEventLoop; the client and server of a test are sockets of one
process, so a handler that sleeps minutes costs no real wait; a cookie's Max-Age
expires on virtual time (aiohttp's cookie jar reads ``time.time()``).

aiohttp is not in the test extra (its C extensions and five dependencies for
one file; no wheel for every Python CI runs): this file skips without it.
CI's first step installs aiohttp into its venv and runs this file
(``.ci/run``, ``aiohttp_fixtures``); ``make virtual-aiohttp`` does the same
here."""

import pytest
from helpers import run_pytest

pytest.importorskip("aiohttp", reason="aiohttp is not installed (not in the test extra)")

SUITE = """
import asyncio
import time

import pytest
from aiohttp import web

pytest_plugins = ["aiohttp.pytest_plugin"]


def test_loop_fixture(loop):
    assert type(loop).__name__ == "VirtualEventLoop"
    loop.run_until_complete(asyncio.sleep(3600))
    assert loop.time() >= 3600


@pytest.fixture
async def started(loop):
    await asyncio.sleep(60)  # an async fixture: aiohttp runs it on `loop`
    return loop.time()


async def test_async_fixture_and_test(started, loop):
    assert type(asyncio.get_running_loop()).__name__ == "VirtualEventLoop"
    assert asyncio.get_running_loop() is loop
    assert started >= 60


async def test_client_and_server_jump_minutes(aiohttp_client, loop):
    async def slow(request):
        await asyncio.sleep(200)  # within the client's default 300 s total timeout
        return web.Response(text="late")

    app = web.Application()
    app.router.add_get("/", slow)
    client = await aiohttp_client(app)
    t0 = time.perf_counter()
    async with client.get("/") as resp:
        assert await resp.text() == "late"
    assert loop.time() >= 200
    assert time.perf_counter() - t0 >= 200  # virtual clocks: perf_counter follows
    assert loop._threshold_waits == 0  # both ends are this process's sockets


async def test_server_and_raw_server(aiohttp_server, aiohttp_raw_server, aiohttp_client, loop):
    async def hello(request):
        await asyncio.sleep(30)
        return web.Response(text="hi")

    app = web.Application()
    app.router.add_get("/", hello)
    server = await aiohttp_server(app)
    raw = await aiohttp_raw_server(hello)
    for srv in (server, raw):
        client = await aiohttp_client(srv)
        async with client.get("/") as resp:
            assert await resp.text() == "hi"
    assert loop.time() >= 60


async def test_client_timeout_on_virtual_time(aiohttp_client, loop):
    import aiohttp

    async def never(request):
        await asyncio.sleep(3600)
        return web.Response()

    app = web.Application()
    app.router.add_get("/", never)
    client = await aiohttp_client(app)
    with pytest.raises(asyncio.TimeoutError):
        await client.get("/", timeout=aiohttp.ClientTimeout(total=10))
    assert 10 <= loop.time() < 3600


async def test_cookie_max_age_expires_on_virtual_time(aiohttp_client):
    async def handler(request):
        resp = web.Response()
        resp.set_cookie("keep", "1")
        resp.set_cookie("brief", "1", max_age=5)
        return resp

    app = web.Application()
    app.router.add_get("/", handler)
    client = await aiohttp_client(app)
    async with client.get("/"):
        pass
    assert {c.key for c in client.session.cookie_jar} == {"keep", "brief"}
    await asyncio.sleep(6)
    assert {c.key for c in client.session.cookie_jar} == {"keep"}


async def test_websocket_heartbeat_on_virtual_time(aiohttp_client, loop):
    async def ws_handler(request):
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for msg in ws:
            await ws.send_str(msg.data)
        return ws

    app = web.Application()
    app.router.add_get("/ws", ws_handler)
    client = await aiohttp_client(app)
    ws = await client.ws_connect("/ws", heartbeat=30)
    await asyncio.sleep(600)  # twenty heartbeats, each answered
    await ws.send_str("still here")
    assert (await ws.receive()).data == "still here"
    await ws.close()
    assert loop.time() >= 600
"""


def test_aiohttp_fixtures_run_on_virtual_time(tmp_path):
    proc = run_pytest(
        tmp_path,
        {"test_suite.py": SUITE},
        "--virtual-time",
        "-W",
        "ignore::DeprecationWarning",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "7 passed" in proc.stdout, proc.stdout


def test_without_the_option_aiohttp_keeps_its_loop(tmp_path):
    suite = """
    import asyncio
    pytest_plugins = ["aiohttp.pytest_plugin"]

    def test_stock(loop):
        assert type(loop).__name__ != "VirtualEventLoop"
    """
    proc = run_pytest(tmp_path, {"test_suite.py": suite}, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
