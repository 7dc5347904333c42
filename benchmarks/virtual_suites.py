"""Real suites on virtual time: five asyncio libraries' own test suites, from
their sdists, on the stock loop, on ``pytest --virtual-time``, on looptime and
on timeless_loop, interleaved, best of 3 wall times.

    python -m benchmarks.virtual_suites            # 3 rounds (about 15 minutes here)
    python -m benchmarks.virtual_suites --quick    # 1 round
    python -m benchmarks.virtual_suites --suite tenacity --mode stock --mode virtual
    make virtual-suites                            # the test, then this

The suites (issue 20): aiolimiter 1.3.0, async-lru 2.4.0, aiocache 0.12.3 (its
unit and acceptance tests on the memory backend: redis and memcached tests
deselected), tenacity 9.2.1 (tests/test_asyncio.py) and aiohttp 3.14.3 (its
client, client-websocket and server-websocket functional test files, pure
Python build; and once more as ``aiohttp-fast``, with its plugin's
``--aiohttp-fast`` in every mode).  Each gets a venv, made once under ``--cache`` (default
``~/.cache/pywheel-virtual-suites``), with its test dependencies from PyPI,
looptime 0.9, timeless-loop 0.2.0, and pywheel from this checkout registered
as an installed pywheel is (its ``pytest11`` entry point), see
``benchmarks/sdists.py``.  Each suite runs unmodified, from its sdist's
folder, with its ini file but ``addopts`` emptied (coverage, xdist, verbose
output: not what is measured), in these modes:

- ``stock``: plain pytest, pywheel's and looptime's plugins disabled (``-p no:``);
- ``virtual``: ``pytest --virtual-time``, nothing else (looptime disabled);
- ``looptime``: ``pytest --looptime``, where the suite runs on pytest-asyncio
  (looptime acts only on pytest-asyncio's loops: for tenacity's
  ``asyncio.run`` and aiohttp's own fixtures it would measure the stock loop);
- ``timeless``: timeless_loop as its README says,
  ``asyncio.set_event_loop_policy(TimelessEventLoopPolicy())``, done in
  ``pytest_configure`` of a plugin given with ``-p`` (benchmarks/suite_plugins).

Every run also loads ``benchmarks/suite_plugins/vs_probe.py``, which only counts
the VirtualEventLoops and TimelessEventLoops made: the table's proof that a
mode ran on the loop it names (and that stock made none).

Rounds are interleaved (round r runs every suite in every mode, modes in an
order rotated per round), so the machine's load falls on all modes alike; the
wall time of a mode is the best of its rounds: the whole pytest process, as a
user waits for it.  A test "passes" in a mode when it passed in every round;
one that passed in some rounds only is listed as unstable.  The results go to
``--out`` (default ``<cache>/results``): per run a log and a junit file, and
``virtual_suites.json``, where a suite run again replaces its own entry (with
the commit and time it ran at) and keeps the others'; the table of every suite
saved is printed as Markdown (``--report``: only that).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time

from .sdists import (
    AIOHTTP_ENV,
    AIOHTTP_SELECT,
    AIOHTTP_TEST_DEPS,
    junit_outcomes,
    link_pywheel,
    make_venv,
    redis_server,
    sdist_dir,
    tagged_tests,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGINS = os.path.join(ROOT, "benchmarks", "suite_plugins")
CACHE = os.path.expanduser("~/.cache/pywheel-virtual-suites")
PYTEST = ["pytest>=9.2,<10", "pytest-asyncio>=1.5,<2"]
PEERS = ["looptime==0.9", "timeless-loop==0.2.0"]
MODES = ["stock", "virtual", "looptime", "timeless"]

#: async-lru's and aiocache's ini files turn warnings into errors and predate
#: pytest-asyncio 1.x, which warns when this option is unset: said for them,
#: with the value their tests assume.
_LOOP_SCOPE = ["-o", "asyncio_default_fixture_loop_scope=function"]

SUITES: dict[str, dict] = {
    "aiolimiter": {
        "sdist": "aiolimiter==1.3.0",
        "deps": [*PYTEST, "dunamai", "typing-extensions"],
        "args": ["tests"],
        "pytest_asyncio": True,
    },
    "async-lru": {
        "sdist": "async-lru==2.4.0",
        "deps": [*PYTEST, "pytest-timeout"],
        "args": [*_LOOP_SCOPE, "tests"],
        "pytest_asyncio": True,
    },
    "aiocache": {
        "sdist": "aiocache==0.12.3",
        # the versions its requirements-dev.txt names, within their majors
        "deps": [
            *PYTEST,
            "pytest-mock",
            "marshmallow>=3.19,<4",
            "msgpack>=1.0",
            "redis>=4.4,<5",
            "aiomcache>=0.8",
        ],
        # the memory backend: redis's and memcached's tests deselected, and their
        # backends' unit tests (mocked clients) left out
        "args": [
            *_LOOP_SCOPE,
            "--strict-markers",
            "-m",
            "not redis and not memcached",
            "--ignore=tests/ut/backends/test_redis.py",
            "--ignore=tests/ut/backends/test_memcached.py",
            "tests/ut",
            "tests/acceptance",
        ],
        "pytest_asyncio": True,
    },
    "tenacity": {
        "sdist": "tenacity==9.2.1",
        "deps": ["pytest>=9.2,<10", "tornado>=6.0"],
        "args": ["tests/test_asyncio.py"],
        "pytest_asyncio": False,  # unittest TestCases around asyncio.run
    },
    "aiohttp": {
        "sdist": "aiohttp==3.14.3",
        "env": AIOHTTP_ENV,
        "deps": ["pytest>=9.2,<10", *AIOHTTP_TEST_DEPS],
        "args": [
            *AIOHTTP_SELECT,
            "tests/test_client_functional.py",
            "tests/test_client_ws_functional.py",
            "tests/test_web_websocket_functional.py",
        ],
        "pytest_asyncio": False,  # aiohttp's own pytest plugin makes its loops
    },
}
# Issue 27 (the virtual clock and real library code): suites whose tests
# measure durations, poll the clock while they work, talk to a server in a
# thread or to a real server, and aiosmtplib's, whose failures once crashed
# pytest on virtual time.  Not in the default set (MORE_SUITES): run them by
# name, --suite websockets etc.
MORE_SUITES: dict[str, dict] = {
    # websockets' sdist prunes its tests: they come from the release's tag
    # (sdists.tagged_tests); its asyncio implementations' tests, the new
    # (tests/asyncio) and the legacy one, as `python -m unittest` runs them.
    "websockets": {
        "sdist": "websockets==17.0.1",
        "tests": ("python-websockets/websockets", "17.0.1", "tests"),
        "deps": ["pytest>=9.2,<10", "python-socks[asyncio]", "werkzeug"],
        "args": ["tests/asyncio", "tests/legacy"],
        "pytest_asyncio": False,  # unittest's IsolatedAsyncioTestCase
    },
    # redis-py's asyncio tests against a redis-server on 127.0.0.1 that the
    # run starts (sdists.redis_server; Debian's package, installed if
    # missing): standalone, no modules, no TLS, no cluster or sentinel, as
    # its CI's standalone job selects; the test folders needing docker
    # profiles or extra services left out.
    "redis-py": {
        "sdist": "redis==8.1.0",
        "deps": [*PYTEST, "pytest-timeout", "ujson", "numpy", "pybreaker", "xxhash", "aiohttp"],
        "args": [
            *_LOOP_SCOPE,
            "-m",
            "not onlycluster and not redismod and not ssl and not replica and not "
            "experimental and not cp_integration and not multidb_integration",
            "--ignore=tests/test_asyncio/test_multidb",
            "--ignore=tests/test_asyncio/test_scenario",
            "--ignore=tests/test_asyncio/test_observability",
            "--ignore=tests/test_asyncio/test_sentinel.py",
            "--ignore=tests/test_asyncio/test_sentinel_managed_connection.py",
            "--ignore=tests/test_asyncio/test_credentials.py",
            "tests/test_asyncio",
        ],
        "server": "redis",
        "pytest_asyncio": True,
    },
    "aiosmtpd": {
        "sdist": "aiosmtpd==1.4.6",
        "deps": [*PYTEST, "pytest-mock", "setuptools<81", "packaging"],
        # its ini's filterwarnings turn warnings into errors: kept, and the
        # pkg_resources warning it ignores as a DeprecationWarning ignored as
        # the UserWarning setuptools 80 makes it
        "args": [
            *_LOOP_SCOPE,
            "-W",
            "ignore:pkg_resources is deprecated as an API:UserWarning",
            "aiosmtpd/tests",
            "aiosmtpd/qa",
        ],
        "pytest_asyncio": True,
    },
    "aiosmtplib": {
        "sdist": "aiosmtplib==5.1.3",
        "deps": [*PYTEST, "hypothesis>=6.56", "aiosmtpd>=1.4.2", "trustme>=0.9.0"],
        # its addopts (emptied) import the tests in importlib mode
        "args": ["--import-mode=importlib", "--strict-markers", "tests"],
        "pytest_asyncio": True,
    },
}
#: The same aiohttp tests with its plugin's --aiohttp-fast ("run tests faster
#: by disabling extra checks"): no gc.collect() after each test, which is most
#: of the suite's wall time once the waiting is gone (a full collection per
#: test, on every loop alike).  Same venv; every mode gets the flag.
SUITES["aiohttp-fast"] = dict(
    SUITES["aiohttp"], args=[*SUITES["aiohttp"]["args"], "--aiohttp-fast"], venv="aiohttp"
)

_NO_LOOPTIME = ["-p", "no:looptime_plugin", "-p", "no:looptime_chronometers",
                "-p", "no:looptime_timeproxies"]  # fmt: skip
_NO_PYWHEEL = ["-p", "no:pywheel"]
MODE_ARGS = {
    "stock": _NO_PYWHEEL + _NO_LOOPTIME,
    "virtual": ["--virtual-time", *_NO_LOOPTIME],
    "looptime": [*_NO_PYWHEEL, "--looptime"],
    "timeless": _NO_PYWHEEL + _NO_LOOPTIME,
}
DEFAULT_SUITES = list(SUITES)
SUITES.update(MORE_SUITES)


def applies(suite: str, mode: str) -> bool:
    return mode != "looptime" or SUITES[suite]["pytest_asyncio"]


def venv(suite: str, cache: str = CACHE) -> str:
    """The suite's venv (made once); raises sdists.Unavailable offline."""
    spec = SUITES[suite]
    src = sdist_dir(cache, spec["sdist"])
    if "tests" in spec:
        tagged_tests(cache, src, *spec["tests"])
    ver = "{}.{}".format(*sys.version_info[:2])
    path = os.path.join(cache, "venv", f"{ver}-{spec.get('venv', suite)}")
    py = make_venv(path, sys.executable, [*spec["deps"], *PEERS], src, spec.get("env"))
    link_pywheel(cache, py, plugin=True)
    return py


def run(suite: str, mode: str, out: str, tag: str = "", cache: str = CACHE,
        timeout: float = 1800, extra: list[str] | None = None) -> dict:  # fmt: skip
    """One run of a suite in a mode: {"wall", "rc", "outcomes", "loops", "load"}."""
    py = venv(suite, cache)
    spec = SUITES[suite]
    src = sdist_dir(cache, spec["sdist"])
    os.makedirs(out, exist_ok=True)
    name = f"{suite}-{mode}{tag}"
    xml = os.path.join(out, name + ".xml")
    count = os.path.join(out, name + ".loops")
    for stale in (xml, count):
        if os.path.exists(stale):
            os.remove(stale)
    env = dict(os.environ, **spec.get("env", {}))
    env["PYTHONPATH"] = PLUGINS
    env["VS_PROBE_COUNT"] = count
    env.pop("VS_PROBE_TIMELESS", None)
    if mode == "timeless":
        env["VS_PROBE_TIMELESS"] = "1"
    cmd = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
           "-p", "vs_probe", f"--junitxml={xml}", *MODE_ARGS[mode], *spec["args"],
           *(extra or [])]  # fmt: skip
    load0 = os.getloadavg()[0]
    with contextlib.ExitStack() as stack:
        if spec.get("server") == "redis":
            cmd.append(f"--redis-url={stack.enter_context(redis_server())}")
        t0 = time.monotonic()
        with open(os.path.join(out, name + ".log"), "w") as f:
            f.write(" ".join(cmd) + "\n")
            f.flush()
            try:
                rc = subprocess.run(cmd, cwd=src, env=env, stdout=f, stderr=subprocess.STDOUT,
                                    timeout=timeout).returncode  # fmt: skip
            except subprocess.TimeoutExpired:
                rc = "timeout"
        wall = time.monotonic() - t0
    loops: dict[str, int] = {}
    if os.path.exists(count):
        with open(count) as f:
            for line in f:
                cls, n = line.split()
                loops[cls] = loops.get(cls, 0) + int(n)
    outcomes = junit_outcomes(xml) if os.path.exists(xml) else {}
    return {"wall": wall, "rc": rc, "outcomes": outcomes, "loops": loops,
            "load": (load0 + os.getloadavg()[0]) / 2}  # fmt: skip


def passing(runs: list[dict]) -> tuple[set[str], set[str]]:
    """(tests that passed in every run, tests that passed in some but not all)."""
    sets = [{t for t, o in r["outcomes"].items() if o == "pass"} for r in runs]
    if not sets:
        return set(), set()
    always = set.intersection(*sets)
    return always, set.union(*sets) - always


def summarize(results: dict) -> dict:
    """Per suite and mode: passing, unstable, best wall, loops; per suite the lost tests."""
    table = {}
    for suite, modes in results.items():
        row = {}
        for mode, runs in modes.items():
            always, unstable = passing(runs)
            row[mode] = {
                "pass": sorted(always),
                "unstable": sorted(unstable),
                "wall": min(r["wall"] for r in runs),
                "walls": [round(r["wall"], 2) for r in runs],
                "loops": runs[0]["loops"],
                "load": sum(r["load"] for r in runs) / len(runs),
            }
        if "stock" in row:
            stock = set(row["stock"]["pass"])
            for mode in row:
                if mode != "stock":
                    mine = set(row[mode]["pass"])
                    row[mode]["lost"] = sorted(stock - mine)
        table[suite] = row
    return table


def markdown(table: dict) -> str:
    modes = [m for m in MODES if any(m in row for row in table.values())]
    head = ["suite"] + [f"pass: {m}" for m in modes]
    head += ["lost on virtual"] + [f"wall: {m}" for m in modes]
    lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    notes = []
    for suite, row in table.items():
        stock_wall = row.get("stock", {}).get("wall")
        cells = [suite]
        for m in modes:
            cells.append(str(len(row[m]["pass"])) if m in row else "—")
        lost = row.get("virtual", {}).get("lost")
        cells.append("—" if lost is None else str(len(lost)))
        for m in modes:
            if m not in row:
                cells.append("—")
                continue
            w = row[m]["wall"]
            ratio = f" ({w / stock_wall:.2f}×)" if stock_wall and m != "stock" else ""
            cells.append(f"{w:.1f} s{ratio}")
        lines.append("| " + " | ".join(cells) + " |")
        for m in modes:
            if m not in row:
                continue
            for t in row[m].get("lost", []):
                how = "--virtual-time" if m == "virtual" else m
                notes.append(f"- {suite}: `{t}` passed on stock, not on {how}")
            for t in row[m]["unstable"]:
                notes.append(f"- {suite}, {m}: `{t}` passed in some rounds only")
    loads = [cell["load"] for row in table.values() for cell in row.values()]
    text = "\n".join(lines) + "\n"
    if loads:
        text += f"\nload average during the runs: {sum(loads) / len(loads):.1f} (2 cores)\n"
    proof = []
    for suite, row in table.items():
        for m, cell in row.items():
            proof.append(f"{suite}/{m}: {cell['loops'] or 'none'}")
    text += "\nloops made (vs_probe): " + "; ".join(proof) + "\n"
    if notes:
        text += "\n" + "\n".join(notes) + "\n"
    return text


def load(path: str) -> dict:
    """The saved results, by suite ({} if none)."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        saved = json.load(f)
    return {k: v for k, v in saved.items() if k in SUITES and isinstance(v, dict) and "row" in v}


def save(results: dict, out: str, rounds: int) -> dict:
    """Merge these results into <out>/virtual_suites.json; returns every saved suite."""
    table = summarize(results)
    path = os.path.join(out, "virtual_suites.json")
    saved = load(path)
    commit = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for suite, row in table.items():  # a suite run again replaces its row, the others stay
        if row:
            saved[suite] = {"row": row, "rounds": rounds, "python": sys.version.split()[0],
                            "commit": commit, "when": stamp}  # fmt: skip
    with open(path, "w") as f:
        json.dump(saved, f, indent=1)
    return saved


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--suite", action="append", choices=list(SUITES),
                    help="default: all but " + ", ".join(MORE_SUITES))  # fmt: skip
    ap.add_argument("--mode", action="append", choices=MODES, help="default: all that apply")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="one round")
    ap.add_argument("--cache", default=CACHE)
    ap.add_argument("--out", help="default: <cache>/results")
    ap.add_argument("--timeout", type=float, default=1800, help="per run, seconds")
    ap.add_argument("--report", action="store_true", help="only print the table of past runs")
    ap.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments, every run")
    args = ap.parse_args(argv)
    out = args.out or os.path.join(args.cache, "results")
    if args.report:
        saved = load(os.path.join(out, "virtual_suites.json"))
        for suite, entry in saved.items():
            print(f"{suite}: {entry['rounds']} rounds at {entry['commit']}, {entry['when']}, "
                  f"Python {entry['python']}")  # fmt: skip
        print(markdown({s: saved[s]["row"] for s in SUITES if s in saved}))
        return 0
    suites = args.suite or DEFAULT_SUITES
    modes = args.mode or MODES
    rounds = 1 if args.quick else args.rounds
    for suite in suites:  # every venv first: making one is not timed
        venv(suite, args.cache)
    results: dict = {s: {m: [] for m in modes if applies(s, m)} for s in suites}
    t0 = time.monotonic()
    for r in range(rounds):
        order = modes[r % len(modes) :] + modes[: r % len(modes)]
        for suite in suites:
            for mode in order:
                if not applies(suite, mode):
                    continue
                res = run(suite, mode, out, f"-r{r}", args.cache, args.timeout,
                          args.pytest_args)  # fmt: skip
                results[suite][mode].append(res)
                n = sum(1 for o in res["outcomes"].values() if o == "pass")
                print(f"[virtual_suites] round {r + 1}/{rounds} {suite:10} {mode:8} "
                      f"{res['wall']:6.1f} s  {n} passed  exit {res['rc']}  "
                      f"load {res['load']:.1f}", file=sys.stderr, flush=True)  # fmt: skip
        if r + 1 < rounds:  # a run cut short keeps the rounds it finished
            save(results, out, r + 1)
    saved = save(results, out, rounds)
    print(f"[virtual_suites] {time.monotonic() - t0:.0f} s; results in {out}", file=sys.stderr)
    table = {s: saved[s]["row"] for s in SUITES if s in saved}
    print(markdown(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
