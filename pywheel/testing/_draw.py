"""draw_race: a static SVG of a punctual run above a failing one (no dependency).

Both runs get the same lanes (the program's tasks, callbacks, timers and
outside-world sources, in the order they first appeared, then the loop's
wake-ups) on one axis of virtual time.  What is drawn:

- a task's steps as dark marks (as wide as the time they took: a Timing's
  cost), its life as a thin line, a sleep's or a timeout's timer as a tick;
- a callback or timer of the program as an orange mark;
- an outside event as a blue bar from when it was sent to when it arrived;
- a wake-up of the loop as a tick on the last lane (late: a red bar from the
  deadline to when it woke);
- each non-zero decision of the Timing outlined in red, with what it
  changed ("+8 ms late");
- the first divergence (``_trace.Divergence``) circled in both runs and
  joined by a dashed line, with both events named at the top.

Where the runs are long, the axis shows a window around the story: from a
little before the last decisions that precede the divergence to a little
after it (the title says which part of the run is shown)."""

from __future__ import annotations

import os
import shutil
import subprocess
from xml.sax.saxutils import escape

from ._trace import Divergence, Event, Trace, _t, divergence

WIDTH = 1200
LABEL_W = 330
RIGHT = 20
ROW = 20
PANEL_GAP = 34
HEAD = 74
ORDER_ROWS = 9  # the run-order table: events before and after the divergence

_COLORS = {
    "step": "#2f3b52",
    "callback": "#d9822b",
    "timer": "#d9822b",
    "outside": "#3b7dd8",
    "wake": "#9aa3b2",
    "decision": "#d62728",
    "divergence": "#b4009e",
    "life": "#c5cad3",
}


def _lanes(punctual: Trace, failing: Trace) -> list[tuple[str, str, str]]:
    """(key, label, kind) of every lane of the program, the failing run's
    first, then the loop's wake-ups (lanes of two runs match by key)."""
    order = ("task", "callback", "timer", "outside")
    seen: dict[str, tuple[str, str, str]] = {}
    for trace in (failing, punctual):
        for lane in trace.lanes:
            if lane.kind in order and lane.key not in seen:
                seen[lane.key] = (lane.key, lane.label, lane.kind)
    lanes = sorted(seen.values(), key=lambda v: order.index(v[2]))
    lanes.append(("loop", "loop wake-ups", "loop"))
    return lanes


def _window(punctual: Trace, failing: Trace, d: Divergence | None) -> tuple[float, float, bool]:
    """(t0, t1, whole): the span of virtual time drawn."""
    events = [e for t in (punctual, failing) for e in t.events if e.lane.kind != "internal"]
    if not events:
        return 0.0, 1.0, True
    lo = min(e.start for e in events)
    hi = max(e.end for e in events)
    if d is None:
        return lo, hi if hi > lo else lo + 1e-3, True
    at = [x.start for x in (d.failing, d.punctual) if x is not None]
    cut = d.failing.seq if d.failing is not None else len(failing.events)
    before = [e for e in failing.decisions if e.seq <= cut][-4:]
    a = min([e.start for e in before] + at)
    b = max(at + [x.end for x in (d.failing, d.punctual) if x is not None])
    span = max(b - a, 1e-3)
    a, b = a - 0.6 * span, b + 0.9 * span
    if (b - a) * 3 >= hi - lo:
        return lo, hi if hi > lo else lo + 1e-3, True
    return max(lo, a), min(hi, b), False


def _ticks(t0: float, t1: float) -> list[float]:
    span = t1 - t0
    step = 10 ** _floor_log10(span / 6)
    for m in (1, 2, 5, 10):
        if span / (step * m) <= 8:
            step *= m
            break
    first = -(-t0 // step) * step
    out = []
    x = first
    while x <= t1 + 1e-12 and len(out) < 20:
        out.append(round(x, 9))
        x += step
    return out


def _floor_log10(x: float) -> int:
    import math

    return math.floor(math.log10(x)) if x > 0 else -3


def _tick_label(x: float, span: float) -> str:
    if span < 0.05:
        return f"{x * 1000:.3g} ms" if abs(x) < 1 else f"{x:.4f} s"
    return f"{x:g} s"


class _Svg:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def add(self, s: str) -> None:
        self.parts.append(s)

    def text(self, x, y, s, size=12, fill="#222", anchor="start", weight="normal", title=None):
        t = f"<title>{escape(title)}</title>" if title else ""
        self.add(
            f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}" '
            f'text-anchor="{anchor}" font-weight="{weight}">{t}{escape(s)}</text>'
        )


def draw_race(punctual: Trace, failing: Trace, path=None, *, title: str = "") -> str:
    """The SVG (see the module's docstring); written to ``path`` if given
    (a ``.png`` path is converted with cairosvg or rsvg-convert, if one is
    installed: RuntimeError otherwise)."""
    d = divergence(punctual, failing)
    t0, t1, whole = _window(punctual, failing, d)
    # The lanes where something happens in the window (in either run); the
    # others are only counted.
    active = {
        e.lane.key
        for t in (punctual, failing)
        for e in t.events
        if e.end >= t0 and e.start <= t1 and e.kind != "wake"
    }
    active |= {x.lane.key for x in (d.failing, d.punctual) if x is not None} if d else set()
    everything = _lanes(punctual, failing)
    lanes = [lane for lane in everything if lane[0] in active or lane[2] == "loop"]
    quiet = len(everything) - len(lanes)
    row_of = {key: i for i, (key, _, _) in enumerate(lanes)}
    plot_x0, plot_x1 = LABEL_W, WIDTH - RIGHT

    def x(t: float) -> float:
        return plot_x0 + (t - t0) / (t1 - t0) * (plot_x1 - plot_x0)

    panel_h = (len(lanes) + 1) * ROW + 26
    order_h = (ORDER_ROWS * 16 + 40) if d is not None else 0
    height = HEAD + 2 * panel_h + PANEL_GAP + order_h + 60
    svg = _Svg()
    svg.add(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">'
    )
    svg.add(f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="white"/>')
    svg.text(
        12,
        22,
        title or "the race: the punctual run above, the failing run below",
        15,
        weight="bold",
    )
    shown = "the whole run" if whole else f"t={_t(t0)} s to t={_t(t1)} s of the run"
    if quiet:
        shown += f" ({quiet} lanes with nothing in it not shown)"
    svg.text(
        12,
        40,
        f"virtual time, {shown}; red: the Timing's decisions; purple: where the runs first part",
        12,
        "#555",
    )
    if d is not None:
        how = "order" if d.order else "time only"
        fdesc = f"t={_t(d.failing.start)} {d.failing.describe()}" if d.failing else "(run ended)"
        pdesc = f"t={_t(d.punctual.start)} {d.punctual.describe()}" if d.punctual else "(run ended)"
        svg.text(12, 58, f"first divergence ({how}): failing: {fdesc}", 12, _COLORS["divergence"])
        svg.text(12, 72, f"{' ' * 27}punctual: {pdesc}", 12, _COLORS["divergence"])

    marks: dict[str, tuple[float, float]] = {}
    runs = (
        ("punctual", punctual, "punctual run (no perturbation)"),
        ("failing", failing, f"failing run ({_count(len(failing.decisions))} of the Timing)"),
    )
    for k, (which, trace, heading) in enumerate(runs):
        top = HEAD + 8 + k * (panel_h + PANEL_GAP)
        svg.text(12, top + 14, heading, 13, weight="bold")
        lanes_top = top + 22
        for i, (_key, label, _kind) in enumerate(lanes):
            y = lanes_top + i * ROW
            fill = "#f4f6f9" if i % 2 == 0 else "#ffffff"
            svg.add(f'<rect x="0" y="{y}" width="{WIDTH}" height="{ROW}" fill="{fill}"/>')
            # too long: its start and its end (a lane's task is at the end)
            short = label if len(label) <= 46 else label[:22] + "…" + label[-23:]
            svg.text(12, y + 14, short, 11, "#333", title=label)
        axis_y = lanes_top + len(lanes) * ROW
        svg.add(f'<line x1="{plot_x0}" y1="{axis_y}" x2="{plot_x1}" y2="{axis_y}" stroke="#888"/>')
        for tick in _ticks(t0, t1):
            tx = x(tick)
            svg.add(
                f'<line x1="{tx:.1f}" y1="{lanes_top}" x2="{tx:.1f}" y2="{axis_y + 4}" '
                f'stroke="#e1e4ea" stroke-width="1"/>'
            )
            svg.text(tx, axis_y + 16, _tick_label(tick, t1 - t0), 10, "#666", "middle")
        # a task's life: its first to its last event
        life: dict[str, list[float]] = {}
        for e in trace.events:
            if e.lane.kind == "task":
                span = life.setdefault(e.lane.key, [e.start, e.end])
                span[0] = min(span[0], e.start)
                span[1] = max(span[1], e.end)
        for label, (a, b) in life.items():
            if b < t0 or a > t1 or label not in row_of:
                continue
            y = lanes_top + row_of[label] * ROW + ROW / 2
            svg.add(
                f'<line x1="{x(max(a, t0)):.1f}" y1="{y}" x2="{x(min(b, t1)):.1f}" y2="{y}" '
                f'stroke="{_COLORS["life"]}" stroke-width="2"/>'
            )
        labels = 0
        busy: dict[int, float] = {}  # row -> end of its latest outside event
        label_end: dict[int, float] = {}  # row -> where its last decision label ends
        decisions = trace.decisions
        cut = d.failing.seq if (d is not None and d.failing is not None) else None
        named = {e.seq for e in decisions if cut is None or e.seq <= cut}
        named = set(sorted(named)[-6:])
        for e in trace.events:
            if e.lane.kind == "internal":
                continue
            row = row_of.get(e.lane.key if e.lane.kind != "loop" else "loop")
            if row is None or e.end < t0 or e.start > t1:
                continue
            y = lanes_top + row * ROW
            shift = 0.0
            if e.kind == "outside":
                # Outside events of one source in flight at once: the later
                # one a little lower, so neither hides the other.
                if e.start < busy.get(row, -1.0):
                    shift = 4.0
                busy[row] = max(busy.get(row, -1.0), e.end)
            svg.add(_event(e, x, y + shift, t0, t1))
            if e.decision is not None:
                xa, xb = _span(e, x, t0, t1)
                svg.add(
                    f'<rect x="{xa - 2:.1f}" y="{y + 2}" width="{xb - xa + 4:.1f}" '
                    f'height="{ROW - 4}" '
                    f'fill="none" stroke="{_COLORS["decision"]}" stroke-width="2" rx="2">'
                    f"<title>{escape(e.decision_text())}: {escape(e.describe())}</title></rect>"
                )
                width = 6.2 * (len(e.decision_text()) + 1)
                if e.seq in named and labels < 6 and xb + 4 >= label_end.get(row, 0.0):
                    labels += 1
                    label_end[row] = xb + 4 + width
                    # near the right edge the words go left of the mark, or
                    # inside it if it is wide
                    tx, anchor = xb + 4, "start"
                    if xb + 4 + width > WIDTH - 4:
                        if xa - 4 - width >= LABEL_W:
                            tx, anchor = xa - 4, "end"
                        else:
                            tx = xa + 4
                    red = _COLORS["decision"]
                    svg.text(tx, y + 8, "+" + e.decision_text(), 10, red, anchor, weight="bold")
        if d is not None:
            mine = d.failing if which == "failing" else d.punctual
            if mine is not None and mine.lane.key in row_of:
                at = mine.end if mine.kind in ("outside", "wake") else mine.start
                mx = x(min(max(at, t0), t1))
                my = lanes_top + row_of[mine.lane.key] * ROW + ROW / 2
                svg.add(
                    f'<line x1="{mx:.1f}" y1="{lanes_top}" x2="{mx:.1f}" y2="{axis_y}" '
                    f'stroke="{_COLORS["divergence"]}" stroke-width="1.5" stroke-dasharray="5,3"/>'
                )
                svg.add(
                    f'<circle cx="{mx:.1f}" cy="{my:.1f}" r="9" fill="none" '
                    f'stroke="{_COLORS["divergence"]}" stroke-width="2.5" class="divergence">'
                    f"<title>first divergence: {escape(mine.describe())}</title></circle>"
                )
                marks[which] = (mx, my)
    if len(marks) == 2:
        (ax, ay), (bx, by) = marks["punctual"], marks["failing"]
        svg.add(
            f'<line x1="{ax:.1f}" y1="{ay + 9:.1f}" x2="{bx:.1f}" y2="{by - 9:.1f}" '
            f'stroke="{_COLORS["divergence"]}" stroke-width="1.5" stroke-dasharray="2,3"/>'
        )
    if d is not None:
        _order_table(svg, punctual, failing, d, HEAD + 2 * panel_h + PANEL_GAP + 24)
    ly = height - 22
    items = [
        ("step", "task step"),
        ("timer", "callback / timer"),
        ("outside", "outside world: sent → arrived"),
        ("wake", "loop wake-up"),
        ("decision", "Timing's decision"),
        ("divergence", "first divergence"),
    ]
    lx = 12
    for key, what in items:
        svg.add(f'<rect x="{lx}" y="{ly - 9}" width="12" height="10" fill="{_COLORS[key]}"/>')
        svg.text(lx + 16, ly, what, 11, "#333")
        lx += 24 + 7 * len(what)
    svg.add("</svg>")
    text = "\n".join(svg.parts) + "\n"
    if path is not None:
        _write(os.fspath(path), text)
    return text


def _count(n: int) -> str:
    return f"{n} decision" if n == 1 else f"{n} decisions"


def _order_table(svg: _Svg, punctual: Trace, failing: Trace, d: Divergence, top: float) -> None:
    """The two runs' events in run order around the divergence, side by
    side: within one batch of the loop (one virtual instant) the picture
    above cannot show the order, which is often the whole story."""
    svg.text(
        12,
        top,
        "in run order around the divergence (the same instant can hold a batch)",
        13,
        weight="bold",
    )
    half = (WIDTH - 24) / 2
    lo = max(0, d.index - ORDER_ROWS // 2)
    for col, (trace, name) in enumerate(((punctual, "punctual run"), (failing, "failing run"))):
        x0 = 12 + col * half
        svg.text(x0, top + 18, name, 12, "#555", weight="bold")
        story = trace.story()
        for r, i in enumerate(range(lo, min(len(story), lo + ORDER_ROWS))):
            e = story[i]
            y = top + 36 + r * 16
            if i == d.index:
                svg.add(
                    f'<rect x="{x0 - 4:.1f}" y="{y - 12}" width="{half - 8:.1f}" height="16" '
                    f'fill="{_COLORS["divergence"]}" opacity="0.12"/>'
                )
            at = e.end if e.kind == "outside" else e.start
            line = f"{i + 1}. t={_t(at)}  {e.describe()}"
            if e.decision is not None:
                line += f"  [{e.decision_text()}]"
            if len(line) > 86:
                line = line[:85] + "…"
            color = _COLORS["decision"] if e.decision is not None else "#222"
            if i == d.index:
                color = _COLORS["divergence"]
            svg.text(x0, y, line, 11, color, title=e.describe())


def _span(e: Event, x, t0: float, t1: float) -> tuple[float, float]:
    a, b = x(max(e.start, t0)), x(min(e.end, t1))
    if b - a < 3:
        mid = (a + b) / 2
        a, b = mid - 1.5, mid + 1.5
    return a, b


def _event(e: Event, x, y: float, t0: float, t1: float) -> str:
    title = f"<title>t={_t(e.start)}..{_t(e.end)}: {escape(e.describe())}</title>"
    if e.kind == "outside":
        a, b = x(max(e.start, t0)), x(min(e.end, t1))
        c = _COLORS["outside"]
        return (
            f'<g>{title}<rect x="{a:.1f}" y="{y + 7}" width="{max(b - a, 1):.1f}" height="6" '
            f'fill="{c}" opacity="0.55"/>'
            f'<circle cx="{b:.1f}" cy="{y + 10}" r="3.5" fill="{c}"/></g>'
        )
    if e.kind == "send":  # sent, due to arrive at e.end: a dashed line under the arrival
        a, b = x(max(e.start, t0)), x(min(e.end, t1))
        return (
            f'<line x1="{a:.1f}" y1="{y + 10}" x2="{max(b, a + 1):.1f}" y2="{y + 10}" '
            f'stroke="{_COLORS["outside"]}" stroke-width="1.2" stroke-dasharray="3,2">'
            f"{title}</line>"
        )
    if e.kind == "wake":
        if e.decision is None:
            wx = x(e.end)
            return (
                f'<line x1="{wx:.1f}" y1="{y + 6}" x2="{wx:.1f}" y2="{y + 14}" '
                f'stroke="{_COLORS["wake"]}" stroke-width="1">{title}</line>'
            )
        a, b = _span(e, x, t0, t1)
        return (
            f'<rect x="{a:.1f}" y="{y + 6}" width="{b - a:.1f}" height="8" '
            f'fill="{_COLORS["decision"]}" opacity="0.7">{title}</rect>'
        )
    if e.kind == "timer" and e.lane.kind == "task":  # a sleep's or a timeout's timer
        tx = x(e.start)
        if e.what == "timeout":
            return (
                f'<path d="M{tx - 5:.1f},{y + 10} L{tx:.1f},{y + 4} L{tx + 5:.1f},{y + 10} '
                f'L{tx:.1f},{y + 16} Z" fill="#7b4fb0">{title}</path>'
            )
        return (
            f'<line x1="{tx:.1f}" y1="{y + 4}" x2="{tx:.1f}" y2="{y + 16}" '
            f'stroke="#8c93a3" stroke-width="1.2">{title}</line>'
        )
    a, b = _span(e, x, t0, t1)
    color = _COLORS["step"] if e.kind == "step" else _COLORS["timer"]
    out = (
        f'<rect x="{a:.1f}" y="{y + 5}" width="{b - a:.1f}" height="10" fill="{color}">'
        f"{title}</rect>"
    )
    if e.kind == "step" and e.where.startswith("ended: ") and e.where != "ended: returned":
        right = b > WIDTH - RIGHT - 120  # near the edge: the words go to the left
        tx, anchor = (a - 3, "end") if right else (b + 3, "start")
        out += (
            f'<text x="{tx:.1f}" y="{y + 14}" font-size="10" text-anchor="{anchor}" '
            f'fill="{_COLORS["decision"]}">{escape(e.where[7:])}</text>'
        )
    return out


def _write(path: str, svg: str) -> None:
    if not path.lower().endswith(".png"):
        with open(path, "w", encoding="utf-8") as f:
            f.write(svg)
        return
    try:
        import cairosvg  # optional

        cairosvg.svg2png(bytestring=svg.encode(), write_to=path)
        return
    except ImportError:
        pass
    exe = shutil.which("rsvg-convert")
    if exe is None:
        raise RuntimeError(
            "a .png needs cairosvg (pip install cairosvg) or rsvg-convert; write a .svg instead"
        )
    subprocess.run([exe, "-o", path], input=svg.encode(), check=True)


__all__ = ["draw_race"]
