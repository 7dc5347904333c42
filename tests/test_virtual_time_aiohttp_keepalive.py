"""aiohttp 3.10.5 and 3.11.10 (server and client in one process) keep
their keep-alive promise on virtual time (issue 27, finding 3).

Their server re-arms its keep-alive check with ``call_at(close_time)`` while
``loop.time() <= close_time``: on a clock that reads exactly ``close_time``
when that timer runs (the virtual clock before it moved by a quantum per
iteration) this never ended, at 100 % CPU.  Each release runs in a venv made
from PyPI and cached (``examples/real_bugs/_venv.py``,
``~/.cache/pywheel-real-bugs``): not skipped on a clean machine, it makes
what it needs (a few seconds per release); offline, with nothing cached, it
fails saying so."""

import subprocess
import sys
from pathlib import Path

import pytest

import pywheel  # before the tree goes on the path: the run's own pywheel

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # an installed-wheel run keeps the tree off the path
    sys.path.insert(0, str(ROOT))

from examples.real_bugs import _venv  # noqa: E402

#: Where this run's pywheel is imported from (the tree, or an installed
#: wheel's site-packages, whose extension the tree may not have built): the
#: child appends it to its path, after the venv's own packages.
PYWHEEL_HOME = str(Path(pywheel.__file__).resolve().parent.parent)

#: aiohttp 3.10.3-3.11.10's server re-arms its keep-alive check with
#: call_at(close_time) while loop.time() <= close_time; a clock that reads
#: exactly close_time when that timer runs froze there (100 % CPU).  Server
#: and client in one process; the client keeps its connection (its own
#: keep-alive is an hour), the server's is 75 s.
KEEPALIVE = """
import asyncio, sys, time
sys.path.append(sys.argv[1])  # the test run's pywheel, after the venv's packages
import aiohttp
from aiohttp import web
from pywheel import testing


async def main():
    loop = asyncio.get_running_loop()

    async def hello(request):
        return web.Response(text="hi")

    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app, keepalive_timeout=75.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = "http://127.0.0.1:%d/" % runner.addresses[0][1]
    connector = aiohttp.TCPConnector(keepalive_timeout=3600)
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.get(url) as resp:
            assert await resp.text() == "hi"
        served = loop.time()
        assert len(runner.server.connections) == 1
        await asyncio.sleep(70)
        assert len(runner.server.connections) == 1  # kept alive
        await asyncio.sleep(10)
        assert runner.server.connections == []  # closed by the server, idle 75 s
        async with session.get(url) as resp:  # a new connection
            assert await resp.text() == "hi"
    await runner.cleanup()
    return served, loop.time()


t0 = time.perf_counter()
served, end = testing.run(main(), limit=3600)
print(aiohttp.__version__, served, end, "real %.3f s" % (time.perf_counter() - t0))
"""


@pytest.mark.parametrize("version", ["3.10.5", "3.11.10"])
def test_aiohttp_keepalive_rearm_at_its_close_time_ends_on_virtual_time(version, tmp_path):
    # A venv of that release from PyPI, made once and cached
    # (~/.cache/pywheel-real-bugs): a clean machine makes it here, in seconds.
    vpy = _venv.ensure(f"aiohttp=={version}")
    script = tmp_path / "keepalive.py"
    script.write_text(KEEPALIVE)
    # On a frozen clock this spins forever: the timeout is the hang guard.
    proc = subprocess.run(
        [str(vpy), str(script), PYWHEEL_HOME], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got, served, end, *_ = proc.stdout.split()
    assert got == version
    assert 75 < float(end) - float(served) < 90
