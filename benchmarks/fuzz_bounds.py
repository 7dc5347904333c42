"""Fixed bounds vs ``--timing-escalate`` on real suites (issue 28, point 6):
which async tests each way breaks, after how many runs, at which level, and
how many of those failures are false alarms.

    python -m benchmarks.fuzz_bounds                       # every subset below
    python -m benchmarks.fuzz_bounds --suite websockets --runs 8 --top 10

Each suite (a subset of its test files: see SUBSETS; the venvs are
``benchmarks/virtual_suites``'s, made once under ``--cache``) runs:

- ``stock`` (``--stock-rounds`` times, default 2): plain pytest, pywheel's
  plugin off: what fails or flakes without pywheel;
- ``fixed``: ``--timing-fuzz=N`` with the default bounds (20 ms late, 2 ms
  cost, 10 ms jitter);
- ``ladder``: ``--timing-fuzz=N --timing-escalate=TOP`` (the same seeds:
  its x1 runs are ``fixed``'s first runs);

then the stock loop ``--recheck`` more times (default 3) on only the tests a
fuzz run broke.  ``benchmarks/suite_plugins/fuzz_probe.py`` records each
failure's fuzz section: the run that broke the test (``failed on
timing-fuzz run K of N``) and, under the ladder, its level.  A failure with
no fuzz section failed in the punctual run 0 (or is not async): not a
finding.  What is a *false alarm* is judged per failure and written in
benchmarks/README.md (a failure the stock loop shows too, a flake; or one
whose only cause is a stall as long as the test's own timeout, which any
machine that slow would fail: the test's tolerance, not a race).

Results: ``<out>/fuzz_bounds.json`` and a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

from . import virtual_suites as vs

#: One or two files per suite: the measurement stays within minutes on a
#: shared 2-core machine.  Paths and the options each suite's own run needs.
SUBSETS: dict[str, list[str]] = {
    # websockets 17: its timing unit MS is 100 ms in a release
    "websockets": ["tests/asyncio/test_connection.py"],
    "aiosmtplib": ["--import-mode=importlib", "tests/test_timeouts.py", "tests/test_connect.py"],
    "aiosmtpd": [
        *vs._LOOP_SCOPE,
        "-W",
        "ignore:pkg_resources is deprecated as an API:UserWarning",
        "aiosmtpd/tests/test_server.py",
    ],
    "tenacity": ["tests/test_asyncio.py"],
    # against a redis-server the run starts (sdists.redis_server)
    "redis-py": [
        *vs._LOOP_SCOPE,
        "-m",
        vs.SUITES["redis-py"]["args"][vs.SUITES["redis-py"]["args"].index("-m") + 1],
        "tests/test_asyncio/test_lock.py",
        "tests/test_asyncio/test_connection_pool.py",
    ],
    "async-lru": [*vs._LOOP_SCOPE, "tests/test_ttl.py", "tests/test_cancel.py"],
}

_RUN = re.compile(r"failed on timing-fuzz run (\d+) of (\d+)")
_LEVEL = re.compile(r"bounds at level x([0-9.e+]+) ")
_TOKEN = re.compile(r"--timing-replay=(\S+)")


def _subset(suite: str) -> str:
    key = f"{suite}:bounds"
    vs.SUITES[key] = dict(vs.SUITES[suite], args=SUBSETS[suite], venv=suite)
    return key


def _only(suite: str, tests: list[str]) -> str:
    """The subset's options with these tests instead of its files (all
    of the subset if none)."""
    if not tests:
        return _subset(suite)
    key = f"{suite}:only"
    opts = [a for a in SUBSETS[suite] if not a.endswith(".py")]
    vs.SUITES[key] = dict(vs.SUITES[suite], args=[*opts, *tests], venv=suite)
    return key


def _probe(out: str, name: str) -> str:
    path = os.path.join(out, name + ".probe")
    if os.path.exists(path):
        os.remove(path)
    os.environ["FUZZ_PROBE_OUT"] = path
    return path


def _failures(path: str) -> dict[str, dict]:
    """Per test: its first failing report (with run, level, token if a fuzz run's)."""
    found: dict[str, dict] = {}
    if not os.path.exists(path):
        return found
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if rec["nodeid"] in found:
                continue
            text = rec.pop("fuzz") or ""
            m = _RUN.search(text)
            lv = _LEVEL.search(text)
            tok = _TOKEN.search(text)
            rec["run"] = int(m.group(1)) if m else None
            rec["level"] = float(lv.group(1)) if lv else (1.0 if m else None)
            rec["token"] = tok.group(1) if tok else None
            found[rec["nodeid"]] = rec
    return found


def measure(suite: str, args, out: str) -> dict:
    key = _subset(suite)
    res: dict = {"suite": suite, "files": [a for a in SUBSETS[suite] if a.endswith(".py")]}
    stock_fail: set[str] = set()
    stock_tests: set[str] = set()
    for r in range(args.stock_rounds):
        probe = _probe(out, f"{suite}-stock-r{r}")
        run = vs.run(key, "stock", out, f"-bounds-r{r}", args.cache, args.timeout,
                     ["-p", "fuzz_probe"])  # fmt: skip
        stock_fail |= set(_failures(probe))
        stock_tests |= set(run["outcomes"])
        _log(suite, f"stock r{r}", run)
    res["stock_failed"] = sorted(stock_fail)
    res["tests"] = len(stock_tests)
    fuzz = {
        "fixed": [f"--timing-fuzz={args.runs}"],
        "ladder": [f"--timing-fuzz={args.runs}", f"--timing-escalate={args.top:g}"],
    }
    broke: set[str] = set()
    for way, extra in fuzz.items():
        probe = _probe(out, f"{suite}-{way}")
        run = vs.run(key, "virtual", out, f"-bounds-{way}", args.cache, args.timeout,
                     ["-p", "fuzz_probe", *extra])  # fmt: skip
        _log(suite, way, run)
        fails = _failures(probe)
        res[way] = {"wall": round(run["wall"], 1), "rc": run["rc"], "load": run["load"],
                    "failed": fails}  # fmt: skip
        broke |= {t for t, rec in fails.items() if rec["run"] is not None}
    # The tests a fuzz run broke, on the stock loop again: a flake there is
    # not the fuzz's finding.
    flaky: dict[str, int] = {}
    if broke and args.recheck:
        for r in range(args.recheck):
            probe = _probe(out, f"{suite}-recheck-r{r}")
            vs.run(_only(suite, sorted(broke)), "stock", out, f"-bounds-recheck-r{r}",
                   args.cache, args.timeout, ["-p", "fuzz_probe"])  # fmt: skip
            for t in _failures(probe):
                flaky[t] = flaky.get(t, 0) + 1
    res["recheck"] = {"rounds": args.recheck, "stock_failures": flaky}
    if args.timers:
        # What "bounds derived from the timers the test arms" would read:
        # each broken test's timer delays in a punctual run.
        path = os.path.join(out, f"{suite}-timers.jsonl")
        if os.path.exists(path):
            os.remove(path)
        os.environ["TIMER_PROBE_OUT"] = path
        vs.run(_only(suite, sorted(broke)), "virtual", out, "-bounds-timers", args.cache,
               args.timeout, ["-p", "timer_probe"])  # fmt: skip
        os.environ.pop("TIMER_PROBE_OUT")
        res["timers"] = {}
        if os.path.exists(path):
            with open(path) as f:
                for line in f:
                    rec = json.loads(line)
                    d = sorted(rec["delays"])
                    if d:
                        res["timers"][rec["nodeid"]] = {
                            "n": len(d),
                            "min": d[0],
                            "median": d[len(d) // 2],
                            "max": d[-1],
                        }
    return res


def _log(suite: str, what: str, run: dict) -> None:
    n = sum(1 for o in run["outcomes"].values() if o == "pass")
    print(f"[fuzz_bounds] {suite:10} {what:10} {run['wall']:6.1f} s  {n} passed  "
          f"exit {run['rc']}  load {run['load']:.1f}", file=sys.stderr, flush=True)  # fmt: skip


def _timers(res: dict, test: str) -> str:
    t = res.get("timers", {}).get(test)
    if not t:
        return ""
    return (f" [punctual run's timers: {t['n']}, shortest {t['min']:.3g} s, median "
            f"{t['median']:.3g} s, longest {t['max']:.3g} s]")  # fmt: skip


def markdown(results: list[dict], runs: int, top: float) -> str:
    head = ("| suite (files) | tests | stock fails | fixed: broke (runs to 1st failure) | "
            f"ladder x1..x{top:g}: broke (run @ level) | punctual fails |")  # fmt: skip
    lines = [head, "|---|---:|---:|---|---|---:|"]
    notes = []
    for res in results:
        cells = [f"{res['suite']} ({', '.join(os.path.basename(f) for f in res['files'])})",
                 str(res["tests"]), str(len(res["stock_failed"]))]  # fmt: skip
        punctual = set()
        for way in ("fixed", "ladder"):
            found = {t: r for t, r in res[way]["failed"].items() if r["run"] is not None}
            punctual |= {t for t, r in res[way]["failed"].items() if r["run"] is None}
            if way == "fixed":
                what = ", ".join(str(r["run"]) for r in found.values())
            else:
                what = ", ".join(f"{r['run']} @ x{r['level']:g}" for r in found.values())
            cells.append(f"{len(found)}" + (f" ({what})" if what else ""))
            for t, r in found.items():
                flaky = res["recheck"]["stock_failures"].get(t, 0)
                notes.append(f"- {res['suite']}, {way}: `{t}` run {r['run']}"
                             + (f" @ x{r['level']:g}" if way == "ladder" else "")
                             + f" ({r['when']}): {r['error']}"
                             + (f" [stock recheck: failed {flaky}/{res['recheck']['rounds']}]"
                                if flaky else "")
                             + _timers(res, t)
                             + f" — `--timing-replay={r['token']}`")  # fmt: skip
        cells.append(str(len(punctual - set(res["stock_failed"]))))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n" + "\n".join(notes) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--suite", action="append", choices=list(SUBSETS))
    ap.add_argument("--runs", type=int, default=8, help="--timing-fuzz=N (default 8)")
    ap.add_argument("--top", type=float, default=10.0, help="--timing-escalate=TOP (default 10)")
    ap.add_argument("--stock-rounds", type=int, default=2)
    ap.add_argument("--recheck", type=int, default=3,
                    help="stock reruns of the tests a fuzz run broke")  # fmt: skip
    ap.add_argument("--timers", action="store_true",
                    help="also record the timers each broken test arms (punctual run)")  # fmt: skip
    ap.add_argument("--cache", default=vs.CACHE)
    ap.add_argument("--out", help="default: <cache>/results")
    ap.add_argument("--timeout", type=float, default=1200, help="per pytest run, seconds")
    args = ap.parse_args(argv)
    out = args.out or os.path.join(args.cache, "results")
    os.makedirs(out, exist_ok=True)
    suites = args.suite or list(SUBSETS)
    for suite in suites:
        vs.venv(suite, args.cache)
    t0 = time.monotonic()
    results = [measure(s, args, out) for s in suites]
    uptime = os.popen("uptime").read().strip()
    path = os.path.join(out, "fuzz_bounds.json")
    with open(path, "w") as f:
        json.dump({"runs": args.runs, "top": args.top, "uptime": uptime,
                   "results": results}, f, indent=1)  # fmt: skip
    print(f"[fuzz_bounds] {time.monotonic() - t0:.0f} s; {path}; {uptime}", file=sys.stderr)
    print(markdown(results, args.runs, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
