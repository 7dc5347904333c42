"""An HTTP server's timers on four loops: aiohttp on loopback.

In one process per loop (so each RSS is its own), an aiohttp server and its
clients share the loop:

  idle     M keep-alive connections, each made by a raw client that sends
           one request and then stays silent; the server holds an idle
           (keep-alive) timeout for each (aiohttp's loop.call_at), set long
           enough not to fire during the run.  The raw clients run in
           helper processes (stock asyncio, each from its own loopback
           address in 127.0.0.0/8, so no address runs out of ports), so
           the measured process holds one descriptor per connection, the
           server's end, and its RSS is the server's.
  traffic  C aiohttp clients, each request under a client-side timeout
           (aiohttp's ClientTimeout, loop timers); the handler answers at
           once under a 20 ms asyncio.timeout, except one request in 20,
           which waits past it: the handler catches TimeoutError and answers
           504.  Timeout lateness = loop.time() when the handler catches it
           minus the deadline (cm.when()), what a server sees.

A second mode (``--kind timeouts``; in ``python -m benchmarks`` the
"per-request timeouts" table): no idle connection, and every request handled
under ``asyncio.timeout(30)``, which never fires: one timeout armed and
cancelled per request, as a service's per-request deadline is.

Loops: stock (asyncio's selector loop), uvloop, rloop, wheel
(pywheel.asyncio.WheelEventLoop), pywheel.uvloop, pywheel.rloop; the optional ones skip
with a note when not importable (aiohttp itself too).  The loops run in
rounds, interleaved, so a busy machine slows them alike.  Reported per loop:
requests/s (median over rounds), timeout lateness p50/p99 in ms (over every
round), RSS in MiB after the idle connections are up and its growth over
them (per connection), and the ratios to uvloop.

    python -m benchmarks.http_loops [--quick] [--kind idle|timeouts] [--rounds R]
        [--idle M] [--json FILE]

--quick: 1,000 idle connections, 2 s of traffic, 2 rounds.  The default is
100,000 idle connections (the issue's figure).  Every process raises its
descriptor limit (RLIMIT_NOFILE) to /proc/sys/fs/nr_open, which needs root
(CAP_SYS_RESOURCE); where the hard limit cannot be raised, the server's
process holds as many as its hard limit allows, and the notes say so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from .util import child_env

LOOPS = ["stock", "uvloop", "rloop", "wheel", "pywheel.uvloop", "pywheel.rloop"]
#: the table's modes: "idle" (the idle connections, then traffic with one
#: request in 20 timing out), "timeouts" (no idle connection; every request
#: handled under a 30 s asyncio.timeout that never fires: the per-request
#: timeout of a service, armed and cancelled once a request)
KINDS = ["idle", "timeouts"]
SERVICE_TIMEOUT = 30.0
REQ_TIMEOUT = 0.020  # the handler's asyncio.timeout
SLOW_EVERY = 20  # one request in this many waits past it
IDLE_TIMEOUT = 3600.0  # aiohttp's keep-alive timeout: never fires here


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def unavailable(name: str) -> str | None:
    """Why a loop cannot run here, or None."""
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        return "aiohttp not importable (pip install aiohttp)"
    if "uvloop" in name:
        try:
            import uvloop  # noqa: F401
        except ImportError:
            return "uvloop not importable (pip install 'pywheel[uvloop]')"
    if "rloop" in name:
        try:
            import rloop  # noqa: F401
        except ImportError:
            return "rloop not importable (pip install rloop, or the bench extra)"
    if name.startswith("pywheel."):
        try:
            __import__(name)
        except ImportError as e:
            return f"{name} not importable ({e})"
    return None


def new_loop(name: str) -> asyncio.AbstractEventLoop:
    if name == "stock":
        return asyncio.SelectorEventLoop()
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    if name == "rloop":
        import rloop

        return rloop.new_event_loop()
    if name == "wheel":
        import pywheel.asyncio

        return pywheel.asyncio.new_event_loop()
    if name == "pywheel.rloop":
        import pywheel.rloop

        return pywheel.rloop.new_event_loop()
    from pywheel import uvloop as pwu

    return pwu.new_event_loop()


def raise_nofile() -> tuple[int, str | None]:
    """Raises this process's RLIMIT_NOFILE as far as it goes: both limits
    to fs.nr_open (the kernel's ceiling; root, with CAP_SYS_RESOURCE), else
    the soft one to the hard one.  Returns the soft limit and, where the
    hard one could not be raised, why (for the notes)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        with open("/proc/sys/fs/nr_open") as f:
            ceiling = int(f.read())
    except (OSError, ValueError):
        ceiling = hard
    note = None
    if hard != resource.RLIM_INFINITY and hard < ceiling:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, ceiling))
            return ceiling, None
        except (ValueError, OSError) as e:
            note = (
                f"RLIMIT_NOFILE's hard limit {hard:,} could not be raised to fs.nr_open "
                f"{ceiling:,} ({e}; raising it needs CAP_SYS_RESOURCE)"
            )
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft, note


def max_idle() -> tuple[int, str | None]:
    """Idle connections the server's process can hold (one descriptor each,
    the clients' ends being in helper processes), and the note, if any,
    from raise_nofile."""
    soft, note = raise_nofile()
    return max(0, soft - 1000), note


# One helper process holds at most this many raw idle clients (it needs a
# descriptor each and its own limit is raised as the server's).
def _per_holder() -> int:
    return max(1, raise_nofile()[0] - 200)


def _source_address(k: int) -> str:
    """The k-th idle client's loopback address: 250 per /24 in 127.0.0.0/8
    (never 127.0.0.1, the server's), so each address has a few hundred
    connections at most and never runs out of ephemeral ports, however many
    connections from earlier rounds are still in TIME_WAIT."""
    return f"127.{1 + (k // 62_500) % 254}.{(k // 250) % 250}.{1 + k % 250}"


def idle_holder(port: int, first: int, n: int) -> None:
    """A helper process: opens n keep-alive connections to the server (each
    sends one request and reads the answer), prints "ready", holds them
    until its stdin closes, then closes them."""
    raise_nofile()

    async def main() -> None:
        request = f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        sem = asyncio.Semaphore(200)
        conns = []

        async def one(k: int) -> None:
            async with sem:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", port, local_addr=(_source_address(k), 0)
                )
                writer.write(request)
                await reader.readuntil(b"ok")
                conns.append(writer)

        await asyncio.gather(*[one(first + i) for i in range(n)])
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        for w in conns:
            w.close()

    asyncio.run(main())


def _start_holders(port: int, idle: int) -> list[subprocess.Popen]:
    per = _per_holder()
    procs = []
    for first in range(0, idle, per):
        n = min(per, idle - first)
        code = f"from benchmarks.http_loops import idle_holder; idle_holder({port}, {first}, {n})"
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
        )
    return procs


async def _child_main(idle: int, secs: float, clients: int, kind: str = "idle") -> dict:
    import aiohttp
    from aiohttp import web

    loop = asyncio.get_running_loop()
    lateness: list[float] = []
    count = [0]

    async def handle_service(request: web.Request) -> web.Response:
        async with asyncio.timeout(SERVICE_TIMEOUT):
            return web.Response(text="ok")

    async def handle(request: web.Request) -> web.Response:
        slow = request.query.get("slow") == "1"
        try:
            async with asyncio.timeout(REQ_TIMEOUT) as cm:
                if slow:
                    await asyncio.sleep(1)
            return web.Response(text="ok")
        except TimeoutError:
            lateness.append(loop.time() - cm.when())
            return web.Response(status=504, text="late")

    app = web.Application()
    app.router.add_get("/", handle_service if kind == "timeouts" else handle)
    runner = web.AppRunner(app, keepalive_timeout=IDLE_TIMEOUT, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]

    rss0 = _rss()
    t0 = time.monotonic()
    holders = _start_holders(port, idle) if idle else []
    try:
        for p in holders:  # the loop serves them meanwhile
            line = await loop.run_in_executor(None, p.stdout.readline)
            if line.strip() != b"ready":
                raise RuntimeError(f"an idle-connection helper failed (exit {p.wait()})")
    except BaseException:
        for p in holders:
            p.kill()
            p.wait()
        raise
    setup_s = time.monotonic() - t0
    await asyncio.sleep(0.2)
    rss_idle = _rss()

    timeout = aiohttp.ClientTimeout(total=5)
    stop = loop.time() + secs
    errors = [0]

    async def client(session, k):
        i = k
        while loop.time() < stop:
            i += 1
            slow = "1" if i % SLOW_EVERY == 0 and kind == "idle" else "0"
            try:
                async with session.get(
                    f"http://127.0.0.1:{port}/?slow={slow}", timeout=timeout
                ) as resp:
                    await resp.read()
                count[0] += 1
            except (aiohttp.ClientError, TimeoutError):
                errors[0] += 1

    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        t0 = time.monotonic()
        await asyncio.gather(*[client(session, k) for k in range(clients)])
        elapsed = time.monotonic() - t0
    rss_end = _rss()
    for p in holders:
        p.stdin.close()
    for p in holders:
        await loop.run_in_executor(None, p.wait)
    await runner.cleanup()
    return {
        "requests_s": count[0] / elapsed,
        "requests": count[0],
        "errors": errors[0],
        "lateness_s": lateness,
        "idle": idle,
        "idle_setup_s": setup_s,
        "rss_base": rss0,
        "rss_idle": rss_idle,
        "rss_end": rss_end,
    }


def child(name: str, idle: int, secs: float, clients: int, kind: str = "idle") -> dict:
    raise_nofile()
    loop = new_loop(name)
    try:
        return loop.run_until_complete(_child_main(idle, secs, clients, kind))
    finally:
        loop.close()


def run_child(name: str, idle: int, secs: float, clients: int, kind: str = "idle") -> dict:
    # The result goes through a file, not stdout: a full-mode result is
    # over 64 KiB, and in one full run (on 1732210) a child's stdout came
    # back cut at 65,536 bytes, the pipe's size, with exit status 0.
    fd, out = tempfile.mkstemp(prefix="pywheel-http-", suffix=".json")
    os.close(fd)
    code = (
        "import json; from benchmarks.http_loops import child; "
        f"r = child({name!r}, {idle}, {secs}, {clients}, {kind!r}); "
        f"open({out!r}, 'w').write(json.dumps(r))"
    )
    env, root = child_env()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=600 + idle / 100,
            env=env,
            cwd=root,
        )
        if proc.returncode:
            raise RuntimeError(f"{name}: child failed: {proc.stderr[-2000:]}")
        with open(out) as f:
            return json.load(f)
    finally:
        os.unlink(out)


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summarize(runs: dict[str, list[dict]]) -> dict[str, dict]:
    out = {}
    for name, rs in runs.items():
        late = [x for r in rs for x in r["lateness_s"]]
        idle = rs[0]["idle"]
        growth = statistics.median(r["rss_idle"] - r["rss_base"] for r in rs)
        out[name] = {
            "requests_s": statistics.median(r["requests_s"] for r in rs),
            "errors": sum(r["errors"] for r in rs),
            "timeouts": len(late),
            "late_p50_ms": None if not late else _pct(late, 0.5) * 1e3,
            "late_p99_ms": None if not late else _pct(late, 0.99) * 1e3,
            "rss_mib": statistics.median(r["rss_idle"] for r in rs) / 2**20,
            "idle_bytes_per_conn": growth / idle if idle else None,
            "idle": idle,
        }
    return out


def markdown(summary: dict[str, dict], notes: list[str]) -> str:
    ref = summary.get("uvloop")

    def ratio(name, key):
        if not ref or ref.get(key) in (None, 0) or summary[name].get(key) is None:
            return ""
        return f" ({summary[name][key] / ref[key]:.2f}x)"

    def f(x, spec):
        return "n/a" if x is None else format(x, spec)

    rows = [
        "| loop | requests/s | timeout lateness p50 / p99 (ms) | RSS (MiB) "
        "| RSS per idle connection (B) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, s in summary.items():
        rows.append(
            f"| {name} | {s['requests_s']:,.0f}{ratio(name, 'requests_s')} "
            f"| {f(s['late_p50_ms'], '.2f')} / {f(s['late_p99_ms'], '.2f')} "
            f"| {s['rss_mib']:.1f}{ratio(name, 'rss_mib')} "
            f"| {f(s['idle_bytes_per_conn'], ',.0f')}{ratio(name, 'idle_bytes_per_conn')} |"
        )
    text = "\n".join(rows)
    if ref:
        text += "\n\nRatios to uvloop in brackets."
    if notes:
        text += "\n\n" + "\n".join(f"- {n}" for n in notes)
    return text + "\n"


# python -m benchmarks's sizes: idle connections, seconds per round, rounds.
MODE_SIZES = {"full": (100_000, 10.0, 5), "quick": (1000, 2.0, 2), "smoke": (20, 0.3, 1)}
# and for the "timeouts" mode (no idle connection): seconds per round, rounds
TIMEOUT_SIZES = {"full": (3.0, 5), "quick": (1.5, 2), "smoke": (0.3, 1)}
#: the record's workload per mode
WORKLOAD = {"idle": "http", "timeouts": "http_timeouts"}


def http_unit(mode: str, loops: list[str], notes: list[str], clients: int = 50) -> list[dict]:
    """For python -m benchmarks: one record per loop and mode (workloads
    "http" and "http_timeouts")."""
    out = []
    idle, secs, rounds = MODE_SIZES[mode]
    summary, more = measure(loops, idle, secs, rounds, clients)
    notes.extend(f"http: {n}" for n in more)
    out += [{"workload": "http", "impl": name, **s} for name, s in summary.items()]
    secs, rounds = TIMEOUT_SIZES[mode]
    summary, more = measure(loops, 0, secs, rounds, clients, kind="timeouts")
    said = ("skipped", "RLIMIT")  # the first mode's notes said these
    notes.extend(f"http, per-request timeouts: {n}" for n in more if not any(w in n for w in said))
    out += [{"workload": "http_timeouts", "impl": name, **s} for name, s in summary.items()]
    return out


def measure(names, idle, secs, rounds, clients, kind="idle"):
    """Runs the rounds; returns (summary per loop, notes)."""
    notes: list[str] = []
    cap, why = max_idle()
    if why:
        notes.append(why)
    if idle > cap:
        notes.append(
            f"idle connections capped at {cap:,} (asked for {idle:,}): the server's process "
            f"needs a descriptor per connection and RLIMIT_NOFILE allows it that many"
        )
        idle = cap
    runs: dict[str, list[dict]] = {}
    for name in names:
        why = unavailable(name)
        if why:
            notes.append(f"{name}: skipped: {why}")
        else:
            runs[name] = []
    order = list(runs)
    for r in range(rounds):
        k = r % len(order) if order else 0
        for name in order[k:] + order[:k]:  # every loop once a round, the order rotated
            print(f"[http {kind} round {r + 1}/{rounds}] {name}", file=sys.stderr, flush=True)
            runs[name].append(run_child(name, idle, secs, clients, kind))
    if runs and kind == "idle":
        notes.append(
            f"{idle:,} idle keep-alive connections, {clients} clients, {secs:g} s of traffic "
            f"per round, {rounds} rounds, one process per loop and round"
        )
    elif runs:
        notes.append(
            f"every request handled under asyncio.timeout({SERVICE_TIMEOUT:g}), none "
            f"firing; no idle connection; {clients} clients, {secs:g} s of traffic per "
            f"round, {rounds} rounds, one process per loop and round"
        )
    return summarize(runs), notes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.http_loops", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="1,000 idle connections, 2 s rounds")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--idle", type=int, help="idle keep-alive connections")
    ap.add_argument("--secs", type=float, help="seconds of traffic per round")
    ap.add_argument("--clients", type=int, default=50, help="concurrent aiohttp clients")
    ap.add_argument("--loops", help=f"comma list of {','.join(LOOPS)}")
    ap.add_argument("--kind", choices=KINDS, default="idle", help="which mode (see above)")
    ap.add_argument("--json", help="write the summary here")
    args = ap.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 5)
    idle = args.idle if args.idle is not None else (1000 if args.quick else 100_000)
    secs = args.secs or (2.0 if args.quick else 10.0)
    names = args.loops.split(",") if args.loops else LOOPS
    if args.kind == "timeouts":
        idle = 0
    summary, notes = measure(names, idle, secs, rounds, args.clients, kind=args.kind)
    text = markdown(summary, notes)
    print(text)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"summary": summary, "notes": notes}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
