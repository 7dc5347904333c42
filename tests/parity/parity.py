"""Parity harness: other projects' asyncio test suites, each run on the stock
loop and on WheelEventLoop, compared test by test.

    python tests/parity/parity.py                  # everything this machine can run
    python tests/parity/parity.py --suite cpython --python 3.13
    python tests/parity/parity.py --report         # the table of the last runs
    make parity-forky                              # 3.14 and 3.15, in .ci/forky's root

Suites: CPython's whole ``test.test_asyncio`` on every CPython 3.11+ found
(``pythonX.Y`` on PATH or under ~/.pyenv/versions), and, on the first Python
found unless --python says otherwise, anyio's and pytest-asyncio's own test
suites and a loop-heavy subset of aiohttp's, from their sdists.  Each runs
twice in the same venv: as is ("stock") and with tests/parity/site first on
PYTHONPATH and PYWHEEL_PARITY_LOOP=wheel, whose sitecustomize makes every loop
a WheelEventLoop and counts them (a wheel run that made no WheelEventLoop is
reported as not proven).  A test counts against pywheel when it passed on
stock and did not pass on the wheel loop; what fails on both (no IPv6, no
network) cancels out.

``--uvloop`` runs the same suites on uvloop and on pywheel.uvloop instead
(PYWHEEL_PARITY_LOOP=uvloop / pywheel-uvloop: every loop asyncio makes, and
every SelectorEventLoop made by name, is then a uvloop.Loop, or a
pywheel.uvloop.Loop), with uvloop from PyPI in the suite's venv; the oracle is
uvloop: a test counts against pywheel.uvloop when it passed on uvloop and did
not pass on pywheel.uvloop (uvloop fails many of CPython's tests itself).

    python tests/parity/parity.py --uvloop --suite cpython --python 3.12

``--rloop`` does the same with rloop (from PyPI) as the oracle and
pywheel.rloop as the candidate (PYWHEEL_PARITY_LOOP=rloop / pywheel-rloop).
rloop fails a great part of CPython's suite itself (no debug mode, no SSL, a
handler called with the context alone...): that is its baseline, and only a
test that passes on rloop and not on pywheel.rloop counts.  ``--module``
(repeatable) runs only those modules of CPython's suite, e.g.

    python tests/parity/parity.py --rloop --suite cpython --python 3.11 \
        --module test.test_asyncio.test_tasks --module test.test_asyncio.test_locks

Last --rloop run (2026-12-03, rloop 0.5.0, `make parity-rloop`: CPython 3.11,
the ten modules of tests/cpython/run_asyncio_suite.py's DEFAULT): 1,577
tests, passed on rloop / on pywheel.rloop / on rloop only: 1239/1239/0, every
outcome the same on both (648 pywheel.rloop loops made).

Last --uvloop run (2026-12-01, uvloop 0.23.0, one command per Python and
suite): CPython's whole test.test_asyncio, passed on uvloop / on
pywheel.uvloop / on uvloop only: 3.11 1549/1549/0, 3.12 1598/1598/0, 3.13
1680/1680/0; aiohttp's subset 3.12 and 3.13 2412/2413/0 each.

Limits: CPython's suite runs a process per test module (cpython_suite.py),
each with its address space capped at --memory GiB (RLIMIT_AS, default 4),
--module-timeout seconds (default 900) and --test-timeout seconds without a
test's outcome (default 120); a pytest suite runs in one process under the
same memory cap and --timeout.  A test that hits a limit, or whose process
dies, counts as failed on that loop (never dropped: the module's other tests
run on in a new process) and is listed under the report's table with the
reason and the process's peak RSS, per loop, from <run>.capped.json.  This is
what keeps a runaway test from taking the machine: on uvloop and on
pywheel.uvloop alike, test_runners' test_asyncio_run_without_uncancel,
test_interrupt_call_soon and test_interrupt_wait grow without bound (one run
reached 23 GB before the kernel killed everything), and test_sock_lowlevel's
test_sock_client_racing and test_sslproto's
test_start_tls_client_buf_proto_1 hang.

Everything downloaded or built lives in --cache (default
~/.cache/pywheel-parity): sdists (``pip download --no-binary :all:``), one venv
per Python and suite with the suite's test dependencies from PyPI, and pywheel
itself through a .pth and a link to this checkout's package (its extension is
built in place for that Python if missing, under /tmp/pywheel-build.lock).
Results go to --out (default <cache>/results): per run a log, a JSON of
outcomes, the loop count; report.md holds the table.  Slow: the default set
takes about half an hour on two cores, every suite on three Pythons about an
hour and a half; suites run one after another.  Not part of pytest's run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from benchmarks.sdists import (  # noqa: E402  (the tree, not an installed copy)
    AIOHTTP_ENV,
    AIOHTTP_SELECT,
    AIOHTTP_TEST_DEPS,
    find_python,
    junit_outcomes,
    link_pywheel,
    make_venv,
    node_id,
    sdist_dir,
    sh,
)

SITE = os.path.join(ROOT, "tests", "parity", "site")
CPYTHON_RUNNER = os.path.join(ROOT, "tests", "parity", "cpython_suite.py")
PYTHONS = ["3.11", "3.12", "3.13", "3.14", "3.15"]
# (oracle, candidate): the loop a suite is judged on and the one it is compared with.
PAIRS = {
    "wheel": ("stock", "wheel"),
    "uvloop": ("uvloop", "pywheel-uvloop"),
    "rloop": ("rloop", "pywheel-rloop"),
}
LOOPS = [loop for pair in PAIRS.values() for loop in pair]
UVLOOP = "uvloop>=0.21"
RLOOP = "rloop>=0.5"

ANYIO = "anyio==4.16.0"
PYTEST_ASYNCIO = "pytest-asyncio==1.5.0"
AIOHTTP = "aiohttp==3.14.5"

# aiohttp's test files that drive real loops: servers, clients, connectors,
# protocols, timeouts, websockets, the test utilities and the pytest plugin.
AIOHTTP_FILES = [
    "test_base_protocol.py",
    "test_client_connection.py",
    "test_client_functional.py",
    "test_client_middleware.py",
    "test_client_proto.py",
    "test_client_request.py",
    "test_client_response.py",
    "test_client_session.py",
    "test_client_ws.py",
    "test_client_ws_functional.py",
    "test_connector.py",
    "test_flowcontrol_streams.py",
    "test_helpers.py",
    "test_http_writer.py",
    "test_loop.py",
    "test_pytest_plugin.py",
    "test_resolver.py",
    "test_run_app.py",
    "test_streams.py",
    "test_tcp_helpers.py",
    "test_test_utils.py",
    "test_web_app.py",
    "test_web_functional.py",
    "test_web_middleware.py",
    "test_web_protocol.py",
    "test_web_request_handler.py",
    "test_web_runner.py",
    "test_web_sendfile_functional.py",
    "test_web_server.py",
    "test_web_urldispatcher.py",
    "test_web_websocket.py",
    "test_web_websocket_functional.py",
    "test_websocket_data_queue.py",
    "test_websocket_writer.py",
]

SUITES = {
    "cpython": {"deps": [], "sdist": None},
    "anyio": {
        "sdist": ANYIO,
        "deps": [
            "blockbuster>=1.5.29",
            "hypothesis>=4.18.2",
            "psutil>=5.9",
            "pytest>=9.0",
            "pytest-mock>=3.14",
            "pytest-timeout>=2.4.0",
            "trustme>=1.0.0",
            "truststore>=0.9.1",
        ],
        # trio and uvloop runs are not about pywheel; network tests need the Internet.
        "args": ["-k", "not trio and not uvloop", "-m", "not network"],
    },
    "pytest-asyncio": {
        "sdist": PYTEST_ASYNCIO,
        "deps": ["pytest>=8.2", "hypothesis>=5.7.1", "coverage>=6.2"],
        "args": [],
    },
    "aiohttp": {
        "sdist": AIOHTTP,
        "env": AIOHTTP_ENV,
        "deps": ["pytest>=8.4", *AIOHTTP_TEST_DEPS],
        # aiohttp's addopts want xdist and coverage: replaced by the essentials.
        "args": [
            "-o",
            "addopts=",
            "--strict-markers",
            *AIOHTTP_SELECT,
            *[os.path.join("tests", f) for f in AIOHTTP_FILES],
        ],
    },
}


def log(msg: str) -> None:
    print(f"[parity {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def venv(cache: str, version: str, suite: str, uvloop: bool = False, rloop: bool = False) -> str:
    """A venv for one suite on one Python, with pywheel from this checkout
    (without its pytest plugin: the suites run as they are), and uvloop or
    rloop from PyPI when asked."""
    spec = SUITES[suite]
    sdist = sdist_dir(cache, spec["sdist"]) if spec["sdist"] else None
    path = os.path.join(cache, "venv", f"{version}-{suite}")
    py = make_venv(path, find_python(version), spec["deps"], sdist, spec.get("env"))
    if uvloop and subprocess.run([py, "-c", "import uvloop"], capture_output=True).returncode:
        sh([py, "-m", "pip", "install", "-q", UVLOOP])
    if rloop and subprocess.run([py, "-c", "import rloop"], capture_output=True).returncode:
        sh([py, "-m", "pip", "install", "-q", RLOOP])
    link_pywheel(cache, py)
    return py


def _cap(memory_gib: float):
    """preexec_fn: the run's address space capped at memory_gib GiB."""
    limit = int(memory_gib * 2**30)
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def run_one(
    cache,
    out,
    version,
    suite,
    loop,
    timeout,
    only=None,
    tag="",
    memory=4.0,
    module_timeout=900,
    test_timeout=120,
) -> None:
    """One suite on one loop; with `only`, just those tests (ids as in the
    outcome files), into files named with `tag`.  CPython's suite runs a
    process per test module, each capped at `memory` GiB of address space,
    `module_timeout` seconds and `test_timeout` seconds a test (see
    cpython_suite.py: a test that hits one fails, and is listed in
    <name>.capped.json); a pytest suite runs
    in one process under the same cap, and `timeout` bounds it."""
    py = venv(cache, version, suite, uvloop="uvloop" in loop, rloop="rloop" in loop)
    name = f"{suite}-{version}-{loop}{tag}"
    result = os.path.join(out, name + ".json")
    logf = os.path.join(out, name + ".log")
    count = os.path.join(out, name + ".loops")
    capped = os.path.join(out, name + ".capped.json")
    for stale in (result, count, capped):
        if os.path.exists(stale):
            os.remove(stale)
    env = dict(os.environ)
    env.update(SUITES[suite].get("env", {}))
    env["PYTHONPATH"] = SITE + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYWHEEL_PARITY_LOOP"] = loop
    env["PYWHEEL_PARITY_COUNT"] = count
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if suite == "cpython":
        cmd = [py, CPYTHON_RUNNER, result, "--memory", str(memory)]
        cmd += ["--module-timeout", str(module_timeout), "--test-timeout", str(test_timeout)]
        cmd += only or []
        cwd = out
        timeout = None  # each module has its own
    else:
        src = sdist_dir(cache, SUITES[suite]["sdist"])
        xml = os.path.join(out, name + ".xml")
        args = SUITES[suite]["args"]
        if only:
            args = [a for a in args if not (a.startswith("tests") and a.endswith(".py"))]
            args += [node_id(src, t) for t in only]
        cmd = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", *args]
        cwd = src
    log(f"{name}: {' '.join(cmd)}")
    t0 = time.monotonic()
    with open(logf, "w") as f:
        try:
            # CPython's runner caps its children itself (the runner is small).
            cap = None if suite == "cpython" else _cap(memory)
            proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT,
                                  timeout=timeout, preexec_fn=cap)  # fmt: skip
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    if suite != "cpython" and os.path.exists(xml):
        with open(result, "w") as f:
            json.dump(junit_outcomes(xml), f, indent=0, sort_keys=True)
    log(f"{name}: exit {rc} after {time.monotonic() - t0:.0f}s")


def lost_tests(out: str, name: str, tag: str = "", pair: str = "wheel") -> list[str] | None:
    """Tests that passed on the pair's oracle (stock) and not on its
    candidate (the wheel loop)."""
    oracle, candidate = PAIRS[pair]
    stock = load(out, f"{name}-{oracle}{tag}")
    wheel = load(out, f"{name}-{candidate}{tag}")
    if stock is None or wheel is None:
        return None
    return sorted(t for t, o in stock.items() if o == "pass" and wheel.get(t) != "pass")


def confirm(cache, out, version, suite, timeout, pair: str = "wheel", **caps) -> None:
    """Runs the tests that passed on stock and not on the wheel loop again,
    alone, on both: what another test left behind (an unclosed socket's
    ResourceWarning, raised at whichever test the collector runs in) does
    not count against either loop."""
    lost = lost_tests(out, f"{suite}-{version}", pair=pair)
    for loop in PAIRS[pair]:
        path = os.path.join(out, f"{suite}-{version}-{loop}-confirm.json")
        if os.path.exists(path):
            os.remove(path)
    if lost and len(lost) <= 100:
        for loop in PAIRS[pair]:
            run_one(cache, out, version, suite, loop, timeout, only=lost, tag="-confirm", **caps)


def load(out: str, name: str):
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def loops_made(out: str, name: str) -> int:
    path = os.path.join(out, name + ".loops")
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        return sum(int(line.split()[1]) for line in f if line.strip())


REPORT_NAMES = {
    "wheel": ("stock", "WheelEventLoop", "pywheel"),
    "uvloop": ("uvloop", "pywheel.uvloop", "pywheel.uvloop"),
    "rloop": ("rloop", "pywheel.rloop", "pywheel.rloop"),
}


def report(out: str, runs: list[tuple[str, str]], pair: str = "wheel") -> str:
    oracle, candidate = PAIRS[pair]
    o_name, c_name, short = REPORT_NAMES[pair]
    rows = [
        f"| suite | Python | {o_name} pass | {c_name} pass | pass on {o_name}, not on {short} "
        f"| {c_name} loops made |",
        "|---|---|---|---|---|---|",
    ]
    details, capped = [], []
    for suite, version in runs:
        stock = load(out, f"{suite}-{version}-{oracle}")
        wheel = load(out, f"{suite}-{version}-{candidate}")
        if stock is None or wheel is None:
            rows.append(f"| {suite} | {version} | not run | not run | | |")
            continue
        made = loops_made(out, f"{suite}-{version}-{candidate}")
        spass = {t for t, o in stock.items() if o == "pass"}
        wpass = {t for t, o in wheel.items() if o == "pass"}
        lost = lost_tests(out, f"{suite}-{version}", pair=pair)
        confirmed = lost_tests(out, f"{suite}-{version}", "-confirm", pair=pair)
        if lost and confirmed is not None:
            gone = [t for t in lost if t not in confirmed]
            for t in gone:
                details.append(f"- {suite} {version}: `{t}`: passed on both when run again alone")
            lost = [t for t in lost if t in confirmed]
        proof = str(made) if made else "0: swap NOT proven"
        rows.append(
            f"| {suite} | {version} | {len(spass)} | {len(wpass)} | {len(lost)} | {proof} |"
        )
        for t in lost:
            details.append(f"- {suite} {version}: `{t}` ({wheel.get(t, 'not run')} on pywheel)")
        for loop, shown in ((oracle, o_name), (candidate, c_name)):
            for e in load(out, f"{suite}-{version}-{loop}.capped") or []:
                capped.append(
                    f"- {suite} {version} on {shown}: `{e['test']}`: {e['reason']} "
                    f"(process peak RSS {e['maxrss_mib']} MiB)"
                )
    text = "\n".join(rows)
    if details:
        text += f"\n\nPassed on {o_name}, not on {c_name} (first run):\n" + "\n".join(details)
    if capped:
        text += (
            "\n\nTests that hit the memory cap or the module timeout, or whose process "
            "died (counted as failed on that loop):\n" + "\n".join(capped)
        )
    return text + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--suite", action="append", choices=list(SUITES), help="default: all")
    ap.add_argument("--python", action="append", help="X.Y; default: every 3.11+ found")
    ap.add_argument("--loop", action="append", choices=LOOPS, help="default: both of the pair")
    which = ap.add_mutually_exclusive_group()
    which.add_argument(
        "--uvloop", action="store_true", help="uvloop against pywheel.uvloop, not stock/wheel"
    )
    which.add_argument(
        "--rloop", action="store_true", help="rloop against pywheel.rloop, not stock/wheel"
    )
    ap.add_argument(
        "--module",
        action="append",
        help="CPython's suite: only this module (test.test_asyncio.test_x); repeatable",
    )
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/pywheel-parity"))
    ap.add_argument("--out", help="default: <cache>/results")
    ap.add_argument("--timeout", type=float, default=3600, help="per run, seconds")
    ap.add_argument(
        "--memory", type=float, default=4.0, help="GiB of address space a test process may use"
    )
    ap.add_argument(
        "--module-timeout", type=float, default=900, help="per CPython test module, seconds"
    )
    ap.add_argument("--test-timeout", type=float, default=120, help="per CPython test, seconds")
    ap.add_argument("--report", action="store_true", help="only print the table of past runs")
    ap.add_argument("--setup", action="store_true", help="only make the venvs")
    ap.add_argument("--confirm", action="store_true", help="only re-run the differences alone")
    args = ap.parse_args()
    out = args.out or os.path.join(args.cache, "results")
    os.makedirs(out, exist_ok=True)
    pythons = args.python or [v for v in PYTHONS if find_python(v)]
    suites = args.suite or list(SUITES)
    runs = []
    for suite in suites:
        # CPython's suite on every Python; the others on the first one unless asked.
        versions = pythons if (suite == "cpython" or args.python) else pythons[:1]
        runs += [(suite, v) for v in versions]
    pair = "uvloop" if args.uvloop else "rloop" if args.rloop else "wheel"
    caps = {
        "memory": args.memory,
        "module_timeout": args.module_timeout,
        "test_timeout": args.test_timeout,
    }
    if args.setup:
        for suite, version in runs:
            venv(args.cache, version, suite, uvloop=args.uvloop, rloop=args.rloop)
        return 0
    if args.confirm:
        for suite, version in runs:
            confirm(args.cache, out, version, suite, args.timeout, pair, **caps)
    elif not args.report:
        for suite, version in runs:
            only = args.module if suite == "cpython" else None
            for loop in args.loop or PAIRS[pair]:
                run_one(args.cache, out, version, suite, loop, args.timeout, only=only, **caps)
            confirm(args.cache, out, version, suite, args.timeout, pair, **caps)
    text = report(out, runs, pair)
    name = {"wheel": "report.md", "uvloop": "report-uvloop.md", "rloop": "report-rloop.md"}[pair]
    with open(os.path.join(out, name), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
