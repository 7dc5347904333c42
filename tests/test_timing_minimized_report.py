"""A failing --timing-fuzz run is reported minimized, in the program's own
words (issue 28, points 1 and 2).

The report's Timing is the minimized one, it says how many decisions were
dropped, and its replay token names the minimized decisions themselves
(--timing-replay replays them; the seed token of the run as found still
works); --timing-replay=TOKEN --timing-minimize minimizes a replayed failure;
a bad token is refused in words; Timing.from_token() turns a report's token
into a Timing; repr() reads in milliseconds and folds asyncio's and
pywheel's own decisions into a count."""

import asyncio
import re

import pytest
from helpers import run_pytest, run_shell

from pywheel import testing

# A refresh-ahead TTL cache with a deliberate race (the scenario):
# the refresher asks for the next value right after storing one and the
# backend answers `ahead` before the entry expires; an answer more than
# `ahead` late lands after the expiry, and a reader misses.  Loop wake-ups
# at most 2 ms late (--timing-max-late=0.002) cannot break it alone: a
# late wake-up runs the answer's and the expiry's timers in one batch, in
# deadline order, and the answer's step stores before any reader reads.
# So one decision is the whole story: load()'s answer arrived late.
TTLCACHE = """
import asyncio

from pywheel import testing

RTT = 0.001  # the backend's round trip


class TTLCache:
    def __init__(self, fetch, ttl=0.1, ahead=0.005):
        self.fetch, self.ttl, self.ahead = fetch, ttl, ahead
        self.data, self.expiry, self.misses = {}, {}, 0

    async def load(self, key, wait=0.0):
        await testing.latency(wait + RTT)  # the backend answers after `wait`
        self.store(key, await self.fetch(key))

    def store(self, key, value):
        old = self.expiry.pop(key, None)
        if old is not None:
            old.cancel()
        self.data[key] = value
        loop = asyncio.get_running_loop()
        self.expiry[key] = loop.call_later(self.ttl, self.data.pop, key, None)

    async def refresher(self, key):
        while True:  # the next value, `ahead` seconds before this one expires
            await self.load(key, wait=self.ttl - self.ahead - RTT)

    async def get(self, key):
        if key not in self.data:  # expired before the refresh landed
            self.misses += 1
            await self.load(key)
        return self.data[key]
"""

TEST = """
import asyncio

import pytest

from ttlcache import TTLCache


@pytest.mark.virtual_time
async def test_reads_never_miss():
    calls = []

    async def fetch(key):
        calls.append(round(asyncio.get_running_loop().time(), 4))
        return len(calls)

    cache = TTLCache(fetch)
    await cache.load("k")  # warm
    refresher = asyncio.create_task(cache.refresher("k"))
    loop = asyncio.get_running_loop()
    while loop.time() < 0.3:  # a hot key: read every millisecond
        await asyncio.sleep(0.001)
        await cache.get("k")
    refresher.cancel()
    assert cache.misses == 0, f"a read missed, the backend was called at {calls}"
"""

FILES = {"ttlcache.py": TTLCACHE, "test_ttl.py": TEST}
FUZZ = ("--timing-fuzz=100", "--timing-max-late=0.002", "--timing-max-jitter=0.01")
LOAD_LINE = (
    TTLCACHE.splitlines().index(
        "        await testing.latency(wait + RTT)  # the backend answers after `wait`"
    )
    + 1
)


def _section(out: str) -> str:
    start = out.index("pywheel.testing timing fuzz")
    return out[start : out.index("short test summary", start)]


def _replay_line(section: str) -> str:
    return next(line for line in section.splitlines() if line.startswith("replay: "))[8:]


def test_ttl_cache_report_names_load_and_the_late_arrival_in_one_decision(tmp_path):
    r = run_pytest(tmp_path, FILES, *FUZZ)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    section = _section(r.stdout)
    assert re.search(r"\n\d+ decisions, minimized to 1 in [\d.]+ s \(\d+ reruns\)", section), (
        section
    )
    timing = next(line for line in section.splitlines() if line.startswith("loop 0: "))
    # One decision, in the program's words: load(), its line, the late arrival.
    assert re.fullmatch(
        rf"loop 0: Timing\(max_late=0\.002, max_jitter=0\.01: latency\(\) in load\(\) at "
        rf"ttlcache\.py:{LOAD_LINE} sent at t=[\d.]+ arrived \d+ ms late\)",
        timing,
    ), timing
    # The assertion shown is the minimized run's: one miss, the backend
    # called twice around one refresh.
    assert "a read missed, the backend was called at" in r.stdout, out


def test_the_minimized_token_replays_the_minimized_run(tmp_path):
    r = run_pytest(tmp_path, FILES, *FUZZ)
    section = _section(r.stdout)
    line = _replay_line(section)
    token = line.split("--timing-replay=")[1]
    assert ",script/" in token, token  # the decisions themselves, not a seed
    timing = next(x for x in section.splitlines() if x.startswith("loop 0: "))
    again = run_shell(tmp_path, line)
    assert again.returncode == 1, again.stdout + again.stderr
    replayed = _section(again.stdout)
    assert f"replaying --timing-replay={token}" in replayed, replayed
    assert timing in replayed.splitlines(), replayed  # the same decision, exactly
    assert "minimized to" not in replayed  # a replay shows the very run it names


def test_old_seed_tokens_replay_and_minimize_on_request(tmp_path):
    r = run_pytest(tmp_path, FILES, *FUZZ)
    section = _section(r.stdout)
    found = re.search(r"before minimizing: --timing-replay=(\S+)", section).group(1)
    assert re.fullmatch(r"[\d.e-]+,[\d.e-]+,[\d.e-]+,[0-9a-f]{16}", found), found
    plain = run_pytest(tmp_path, {}, "test_ttl.py", f"--timing-replay={found}")
    assert plain.returncode == 1, plain.stdout + plain.stderr
    assert "minimized to" not in _section(plain.stdout)
    shrunk = run_pytest(
        tmp_path, {}, "test_ttl.py", f"--timing-replay={found}", "--timing-minimize"
    )
    assert shrunk.returncode == 1, shrunk.stdout + shrunk.stderr
    assert re.search(r"\d+ decisions?, minimized to 1 in", _section(shrunk.stdout)), shrunk.stdout


def test_timing_minimize_0_reports_the_run_as_found(tmp_path):
    r = run_pytest(tmp_path, FILES, *FUZZ, "--timing-minimize=0")
    section = _section(r.stdout)
    assert r.returncode == 1 and "minimized" not in section, section
    assert re.search(r"--timing-replay=[\d.,]+[0-9a-f]{16}\n", section), section
    ini = run_pytest(tmp_path, {"pytest.ini": "[pytest]\ntiming_minimize = 0\n"}, *FUZZ)
    assert "minimized" not in _section(ini.stdout)


@pytest.mark.parametrize(
    ("token", "says"),
    [
        ("nonsense", "has 4 fields separated by commas"),
        ("0.02,abc,0.01,00000000000000ff", "max_cost field 'abc' is not a number"),
        ("0.02,0.002,0.01,xyz", "neither a seed (16 hex digits) nor script/"),
        ("0.02,0.002,0.01,script/q3=5", "decision 'q3=5' of loop 0 is not KIND INDEX"),
        ("-1,0.002,0.01,script/", "max_late must be a finite number of seconds >= 0"),
    ],
)
def test_a_bad_token_is_refused_in_words(tmp_path, token, says):
    r = run_pytest(
        tmp_path, {"test_x.py": "async def test_x(): pass\n"}, f"--timing-replay={token}"
    )
    assert r.returncode == 4, r.stdout + r.stderr
    assert says in r.stderr, r.stderr
    for internals in ("unpack", "Traceback", "invalid literal", "could not convert"):
        assert internals not in r.stderr, r.stderr
    with pytest.raises(ValueError, match=re.escape(says)):
        testing.Timing.from_token(token)


def test_a_bad_timing_minimize_is_refused_in_words(tmp_path):
    r = run_pytest(tmp_path, {"test_x.py": "async def test_x(): pass\n"}, "--timing-minimize=soon")
    assert r.returncode == 4 and "takes seconds of real time" in r.stderr, r.stderr


def _program():
    ns = {}
    exec(compile(TTLCACHE, "ttlcache.py", "exec"), ns)  # noqa: S102 (the test's own text)

    async def reads():
        cache = ns["TTLCache"](_fetch)
        await cache.load("k")
        refresher = asyncio.create_task(cache.refresher("k"))
        loop = asyncio.get_running_loop()
        while loop.time() < 0.3:
            await asyncio.sleep(0.001)
            await cache.get("k")
        refresher.cancel()
        return cache.misses

    async def _fetch(key):
        return 1

    return reads


def test_from_token_makes_the_reports_timing_by_hand(tmp_path):
    reads = _program()
    # A script token: the minimized decision itself (load()'s second answer 10 ms late).
    t = testing.Timing.from_token("0.002,0.0,0.01,script/e2=10000")
    assert (t.max_late, t.max_cost, t.max_jitter) == (0.002, 0.0, 0.01)
    assert testing.run(reads(), timing=t) == 1
    assert [(k, s) for k, _, s, _ in t.decisions] == [("external", 0.01)]
    assert "arrived 10 ms late" in repr(t) and "latency() in load() at ttlcache.py:" in repr(t)
    assert t.token == "0.002,0.0,0.01,script/e2=10000"
    assert testing.Timing.from_token(t.token, loop=1).token == "0.002,0.0,0.01,script/"
    # minimize() runs a Timing not run yet first, then shrinks it.
    fresh = testing.Timing.from_token("0.002,0.0,0.01,script/w3=2000+e2=10000")
    m = fresh.minimize(lambda x: testing.run(reads(), timing=x) > 0)
    assert m.token == "0.002,0.0,0.01,script/e2=10000"
    # A seed token draws as the fuzz run did.
    s1 = testing.Timing.from_token("0.002,0.0,0.01,00000000000000aa")
    s2 = testing.Timing.from_token("0.002,0.0,0.01,00000000000000aa")
    testing.run(reads(), timing=s1)
    testing.run(reads(), timing=s2)
    assert s1.decisions == s2.decisions and s1.decisions
    with pytest.raises(RuntimeError, match="recorded"):
        _ = testing.Timing(max_late=0.01).token


def test_repr_reads_in_ms_and_folds_asyncio_and_pywheel_decisions():
    async def sleeper():
        await asyncio.sleep(0.5)

    async def main():
        await asyncio.create_task(sleeper())

    t = testing.Timing(max_cost=0.002, max_late=0.02, draw=lambda n: n)
    testing.run(main(), timing=t)
    text = repr(t)
    internal = [d for d in t.decisions if "_run_until_complete_cb" in d[3]]
    assert internal, t.decisions  # decisions keeps everything
    assert "_run_until_complete_cb" not in text.split("own events (")[0], text
    n = sum(1 for d, inner in zip(t.decisions, t._internal, strict=True) if inner)
    assert re.search(rf"{n} decisions? at asyncio's or pywheel's own events \(", text), text
    assert "woke 20 ms late" in text and "took 2 ms" in text, text
    assert " at 0x" not in text
    # Deterministic: the same run, the same words.
    t2 = testing.Timing(max_cost=0.002, max_late=0.02, draw=lambda n: n)
    testing.run(main(), timing=t2)
    assert repr(t2) == text
