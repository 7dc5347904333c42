"""testing.Trace: a picture of the race (issue 28, point 3).

A traced run records, on virtual time, each task step, each timer's
callback, each outside-world event and each wake-up of the loop, with the
Timing's non-zero decisions on the events they perturbed; it makes the same
decisions as an untraced run; off, the loop installs nothing.  The Perfetto
file follows the Chrome trace-event format (checked here offline: Perfetto's
own trace processor downloads a binary, which cannot work here); the SVG
shows both runs, the decisions and the first divergence; the pytest plugin
prints the text timeline of a fuzz failure and, with --timing-trace=DIR,
writes both files."""

import asyncio
import json
import random
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import run_pytest

from pywheel import testing

ROOT = Path(__file__).resolve().parent.parent


class Cache:
    """A value, an expiry timer and a refresh from the outside world."""

    def __init__(self) -> None:
        self.value = None

    def expire(self) -> None:
        self.value = None


async def program(expiry: float = 0.15) -> str:
    """reader sets the value after a 0.1 s remote call and arms the expiry;
    the main task reads it at t=0.2: the expiry (t=0.25) must not have
    fired yet -- unless the remote call arrives late."""
    loop = asyncio.get_running_loop()
    cache = Cache()

    async def reader() -> None:
        await testing.latency(0.1)
        cache.value = "v"
        loop.call_later(expiry, cache.expire)

    task = asyncio.create_task(reader(), name="reader")
    await asyncio.sleep(0.2)
    await task
    await asyncio.sleep(0.1)  # the expiry fires during this sleep, punctually at 0.25
    return cache.value


def _traced(timing=None):
    trace = testing.Trace()
    result = testing.run(program(), timing=timing, trace=trace, quantum=0)
    return trace, result


def _late_jitter() -> testing.Timing:
    """The remote call arrives 0.06 s late (the only non-zero decision)."""
    return testing.Timing(max_jitter=0.06, draw=lambda n: n)


def test_trace_of_a_known_program_has_its_lanes_and_events():
    trace, result = _traced()
    assert result is None
    labels = [(lane.kind, lane.label) for lane in trace.lanes]
    assert ("task", "task program()") in labels
    assert ("task", "task 'reader'") in labels
    assert (
        "outside",
        "latency() in reader() at test_testing_trace.py:45 [task 'reader']",
    ) in labels
    assert ("timer", "timer Cache.expire() of task 'reader'") in labels
    assert ("loop", "loop wake-ups") in labels
    story = [(e.lane.label, e.kind, round(e.at, 6), e.where) for e in trace.story()]
    assert story == [
        ("task program()", "step", 0.0, "program() at test_testing_trace.py:50"),
        ("task 'reader'", "step", 0.0, "reader() at test_testing_trace.py:45"),
        ("latency() in reader() at test_testing_trace.py:45 [task 'reader']", "outside", 0.1, ""),
        ("task 'reader'", "step", 0.1, "ended: returned"),
        ("task program()", "timer", 0.2, ""),  # its sleep's timer
        ("task program()", "step", 0.2, "program() at test_testing_trace.py:52"),
        (
            "timer Cache.expire() of task 'reader'",
            "timer",
            0.25,
            "task 'reader' in reader() at test_testing_trace.py:47",
        ),
        ("task program()", "timer", 0.3, ""),
        ("task program()", "step", 0.3, "ended: returned"),
    ]
    reply = trace.story()[2]
    assert (reply.start, reply.end, reply.decision) == (0.0, 0.1, None)
    sends = [(e.lane.kind, e.start, e.deadline) for e in trace.events if e.kind == "send"]
    assert sends == [("outside", 0.0, 0.1)]
    wakes = [(round(e.deadline, 6), round(e.end, 6)) for e in trace.events if e.kind == "wake"]
    assert wakes == [(0.1, 0.1), (0.2, 0.2), (0.25, 0.25), (0.3, 0.3)]
    assert trace.decisions == []


def test_trace_ties_each_decision_to_the_event_it_perturbed():
    timing = testing.Timing(max_late=0.004, max_cost=0.002, max_jitter=0.003, draw=lambda n: n)
    trace, result = _traced(timing)
    # every non-zero decision the Timing noted, on one event each, in order
    # (an outside event's on its send)
    assert [e.decision for e in trace.decisions] == [(k, s) for k, _, s, _ in timing.decisions]
    kinds = {e.decision[0] for e in trace.decisions}
    assert kinds == {"wake", "step", "timer", "external"}
    for e in trace.decisions:
        kind, secs = e.decision
        if kind == "wake":
            assert e.kind == "wake" and e.end - e.deadline == pytest.approx(0.004)
        elif kind == "step":
            assert e.kind in ("step", "callback") and e.end - e.start == pytest.approx(0.002)
        elif kind == "timer":
            assert e.lane.label == "timer Cache.expire() of task 'reader'"
            assert e.end - e.start == pytest.approx(0.002)
        else:
            assert e.kind == "send" and secs == pytest.approx(0.003)
            assert e.decision_text() == "arrived 3 ms late"


def _seeded(seed: int):
    rng = random.Random(seed)
    return lambda n: rng.randint(0, n)


def test_traced_run_makes_the_same_decisions_as_an_untraced_one():
    bounds = dict(max_late=0.02, max_cost=0.002, max_jitter=0.06)
    for seed in range(5):
        plain = testing.Timing(**bounds, draw=_seeded(seed))
        end_plain = testing.run(program(), timing=plain)
        replay = testing.Trace()
        again = testing.Timing(**bounds, draw=_seeded(seed))
        end_again = testing.run(program(), timing=again, trace=replay)
        assert repr(again) == repr(plain) and end_again == end_plain
        assert len(replay.decisions) == len(plain.decisions)


def test_tracing_off_adds_no_events_and_keeps_no_trace():
    loop = testing.VirtualEventLoop()
    try:
        assert loop.trace is None and loop._trace is None
        assert loop._handle_type is asyncio.Handle
        assert "_call_soon" not in loop.__dict__
        assert type(loop.call_at).__module__ != "pywheel.testing._trace"
        loop.run_until_complete(program())
        assert loop.trace is None
    finally:
        loop.close()
    unused = testing.Trace()
    testing.run(program())
    assert unused.events == [] and unused.lanes == []
    # trace=True on a loop makes one
    loop = testing.VirtualEventLoop(trace=True)
    try:
        loop.run_until_complete(program())
        assert isinstance(loop.trace, testing.Trace) and loop.trace.events
    finally:
        loop.close()
    with pytest.raises(TypeError, match="trace must be a pywheel.testing.Trace"):
        testing.VirtualEventLoop(trace="yes")


def test_divergence_is_the_first_change_of_order():
    punctual, ok = _traced()
    failing, bad = _traced(_late_jitter())
    assert ok is None and bad == "v"  # the late reply left the value there at the end
    d = testing._trace.divergence(punctual, failing)
    assert d is not None and d.order
    # The expiry (armed 0.15 s after the reply) no longer fires before the
    # main task's last wake-up: the first event out of order is the main
    # task's sleep's timer at t=0.3 where the punctual run fired the expiry.
    assert d.punctual.lane.label == "timer Cache.expire() of task 'reader'"
    assert d.failing.lane.label == "task program()"
    text = testing.race_timeline(punctual, failing)
    assert len(text.splitlines()) <= 16
    assert "the runs part at t=" in text
    assert (
        "latency() in reader() at test_testing_trace.py:45 [task 'reader'] arrived 60 ms late"
        in text
    )
    assert testing._trace.divergence(punctual, _traced()[0]) is None


# ---- the Chrome trace-event format, checked offline ---------------------------

PHASES = {"X", "i", "M"}  # what the writer uses, a subset of the format's


def _check_trace_event_format(doc: dict) -> None:
    """The Trace Event Format's rules for what the writer emits: the JSON
    object form ({"traceEvents": [...]}, displayTimeUnit "ms" or "ns"); each
    event a dict with a string name, a known ph, int pid and tid; complete
    events ("X") with numeric ts and dur >= 0 (microseconds); instant events
    ("i") with ts and a scope s in g/p/t; metadata events ("M") naming a
    process or thread (args.name) or sorting them (args.sort_index)."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    assert doc.get("displayTimeUnit") in ("ms", "ns")
    named_threads, named_processes = set(), set()
    for ev in doc["traceEvents"]:
        assert isinstance(ev, dict)
        assert isinstance(ev["name"], str) and ev["name"]
        assert ev["ph"] in PHASES, ev
        assert type(ev["pid"]) is int and type(ev["tid"]) is int, ev
        if ev["ph"] == "M":
            assert ev["name"] in (
                "process_name",
                "thread_name",
                "process_sort_index",
                "thread_sort_index",
            ), ev
            key = "name" if ev["name"].endswith("_name") else "sort_index"
            value = ev["args"][key]
            assert isinstance(value, str if key == "name" else int), ev
            if ev["name"] == "thread_name":
                named_threads.add((ev["pid"], ev["tid"]))
            if ev["name"] == "process_name":
                named_processes.add(ev["pid"])
            continue
        assert isinstance(ev["ts"], int | float) and ev["ts"] >= 0, ev
        if ev["ph"] == "X":
            assert isinstance(ev["dur"], int | float) and ev["dur"] >= 0, ev
        else:
            assert ev["s"] in ("g", "p", "t"), ev
        if "args" in ev:
            assert isinstance(ev["args"], dict)
    for ev in doc["traceEvents"]:
        if ev["ph"] != "M":
            assert (ev["pid"], ev["tid"]) in named_threads, ev
            assert ev["pid"] in named_processes, ev


def test_perfetto_trace_follows_the_trace_event_format(tmp_path):
    punctual, _ = _traced()
    failing, _ = _traced(_late_jitter())
    path = failing.write_perfetto(tmp_path / "race.perfetto.json", punctual)
    doc = json.loads(Path(path).read_text())
    _check_trace_event_format(doc)
    names = {
        (ev["pid"], ev["args"]["name"])
        for ev in doc["traceEvents"]
        if ev["ph"] == "M" and ev["name"] == "thread_name"
    }
    for pid in (1, 2):  # the failing run, and the punctual one beside it
        assert (pid, "task 'reader' (reader() at test_testing_trace.py:44)") in names
        assert (pid, "latency() in reader() at test_testing_trace.py:45 [task 'reader']") in names
        assert (pid, "loop wake-ups") in names
    # the expiry fired in the punctual run only (the late reply armed it too late)
    assert (2, "timer Cache.expire() of task 'reader'") in names
    assert (1, "timer Cache.expire() of task 'reader'") not in names
    events = [ev for ev in doc["traceEvents"] if ev["pid"] == 1 and ev["ph"] != "M"]
    # the late reply: a complete event from sent (0) to arrived (0.16 s), in µs
    reply = [ev for ev in events if ev["ph"] == "X" and ev["cat"] == "outside"]
    assert [(ev["ts"], ev["dur"]) for ev in reply] == [(0.0, 160000.0)]
    sends = [ev for ev in events if ev["cat"] == "send"]
    assert [(ev["ph"], ev["ts"]) for ev in sends] == [("i", 0.0)]
    assert sends[0]["args"]["decision"] == "external: arrived 60 ms late"
    decisions = [ev for ev in events if ev["ph"] == "i" and ev["cat"] == "decision"]
    assert [ev["name"] for ev in decisions] == ["decision: arrived 60 ms late"]
    marks = [ev for ev in doc["traceEvents"] if ev.get("cat") == "divergence"]
    assert sorted(ev["pid"] for ev in marks) == [1, 2]
    steps = [ev for ev in events if ev.get("cat") == "step"]
    assert steps and all("where" in ev["args"] for ev in steps)


def test_race_svg_has_both_runs_the_decisions_and_the_divergence(tmp_path):
    punctual, _ = _traced()
    failing, _ = _traced(_late_jitter())
    path = tmp_path / "race.svg"
    text = testing.draw_race(punctual, failing, path, title="demo")
    assert path.read_text() == text
    root = ET.fromstring(text)
    ns = "{http://www.w3.org/2000/svg}"
    words = " ".join("".join(t.itertext()) for t in root.iter(f"{ns}text"))
    assert "punctual run" in words and "failing run (1 decision of the Timing)" in words
    assert "first divergence (order)" in words
    assert "+arrived 60 ms late" in words
    red = [r for r in root.iter(f"{ns}rect") if r.get("stroke") == "#d62728"]
    assert len(red) == 1  # the one decision, outlined
    marks = [c for c in root.iter(f"{ns}circle") if c.get("class") == "divergence"]
    assert len(marks) == 2  # in both runs


# ---- the pytest plugin --------------------------------------------------------

TESTS = """
import asyncio

import pytest

from pywheel import testing


@pytest.mark.virtual_time
async def test_reply_comes_before_the_read():
    box = {}

    async def reader():
        await testing.latency(0.195)  # a remote call
        box["v"] = 1

    task = asyncio.create_task(reader(), name="reader")
    await asyncio.sleep(0.2)
    assert box, "the reply came after the read"
    await task
"""


def test_fuzz_failure_report_has_the_race_timeline(tmp_path):
    r = run_pytest(tmp_path, {"test_it.py": TESTS}, "--timing-fuzz=40", "--timing-max-jitter=0.01")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "pywheel.testing race" in r.stdout, r.stdout
    assert "the runs part at t=" in r.stdout, r.stdout
    assert "latency() in reader() at test_it.py:14 [task 'reader'] arrived" in r.stdout, r.stdout
    assert " ms late" in r.stdout
    assert "--timing-trace=DIR writes this race" in r.stdout
    assert not list(tmp_path.glob("*.svg"))


def test_timing_trace_writes_perfetto_and_svg(tmp_path):
    out = tmp_path / "traces"
    r = run_pytest(
        tmp_path,
        {"test_it.py": TESTS},
        "--timing-fuzz=40",
        "--timing-max-jitter=0.01",
        f"--timing-trace={out}",
    )
    assert r.returncode == 1, r.stdout + r.stderr
    base = out / "test_it.py__test_reply_comes_before_the_read"
    perfetto = Path(f"{base}.perfetto.json")
    svg = Path(f"{base}.svg")
    assert f"written: {perfetto}" in r.stdout and f"written: {svg}" in r.stdout, r.stdout
    _check_trace_event_format(json.loads(perfetto.read_text()))
    ET.fromstring(svg.read_text())


def test_trace_in_debug_mode_and_with_a_lent_timing():
    """asyncio's debug mode (its own call_soon / call_at paths) and a Timing
    lent to a traced loop and given back (the plugin's shared loops) keep
    recording, and the run is the same as untraced."""
    loop = testing.VirtualEventLoop(trace=True)
    loop.set_debug(True)
    try:
        assert loop.run_until_complete(program()) is None
        assert [e.lane.label for e in loop.trace.story()][:2] == ["task program()", "task 'reader'"]
        timing = _late_jitter()
        loop._lend_timing(timing)
        assert loop.run_until_complete(program()) == "v"
        loop._return_timing()
        assert len(loop.trace.decisions) == 1
        assert loop.run_until_complete(program()) is None
    finally:
        loop.close()
    with pytest.raises(TypeError, match="nobody can read"):
        testing.run(program(), trace=True)
