"""A loop whose arguments are refused raises the right error and leaves
nothing behind: no half-built loop whose __del__ reports an AttributeError or
an "unclosed event loop" ResourceWarning (issue 17, finding 10)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CASES = [
    ("pwa.WheelEventLoop(tick=0)", "ValueError"),
    ("pwa.WheelEventLoop(tick=-1.0)", "ValueError"),
    ("pwa.WheelEventLoop(tick=float('nan'))", "ValueError"),
    ("pwa.WheelEventLoop(tick='1')", "TypeError"),
    ("vt.VirtualEventLoop(tick=0)", "ValueError"),
    ("vt.VirtualEventLoop(start=1e10)", "OverflowError"),
    ("vt.VirtualEventLoop(start=-1.0)", "ValueError"),
    ("vt.VirtualEventLoop(limit=-1.0)", "ValueError"),
    ("vt.VirtualEventLoop(timing=object())", "TypeError"),
    ("vt.new_event_loop(tick=0)", "ValueError"),
]


def test_refused_loops_leave_nothing_behind():
    code = textwrap.dedent(
        f"""
        import gc
        import pywheel.asyncio as pwa
        from pywheel import testing as vt
        for expr, err in {CASES!r}:
            try:
                eval(expr)
            except Exception as exc:
                assert type(exc).__name__ == err, (expr, exc)
            else:
                raise AssertionError(expr + " was not refused")
            gc.collect()
        print("ok")
        """
    )
    r = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "ok\n"
    # On main: "Exception ignored in ... AttributeError: ... '_wheel'" and
    # "ResourceWarning: unclosed event loop" for each refused loop.
    assert r.stderr == "", r.stderr
