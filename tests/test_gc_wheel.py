"""A threaded Wheel found to be garbage with its pending callbacks (issue 9,
finding 1).

The collector runs every finalizer of a garbage set before it clears any of
it, and the clears may release the GIL: a __del__ of an older object that a
clear frees can sleep, or compute for a switch interval.  The wheel's thread
must not run a callback whose function was already cleared (its globals
NULL: a segfault before the fix), so the wheel closes in its finalizer.
Each variant runs in a child, where a crash cannot take the suite down."""

import pytest
from helpers import run_script

SCRIPT = """
import gc, sys, time
import pywheel

mode = {mode!r}

class Res:
    def __del__(self):
        if mode == "compute":  # holds the GIL, so the interpreter hands it over
            t = time.monotonic()
            while time.monotonic() - t < 0.2:
                pass
        else:
            time.sleep(0.2)

def make(res):
    def f():
        return len(globals())
    f.res = res  # set first: released first when f is cleared
    f.wheel = pywheel.Wheel()
    f.wheel.call_later(0.02, f)
    return pywheel.Wheel.stats  # nothing of f escapes

closed = []
for i in range(4):
    res = Res()
    gc.collect()  # res is now old: a young collection frees it while clearing f
    make(res)
    del res
    if mode == "auto":
        junk = [[] for _ in range(5000)]  # the allocation starts a young collection
        del junk
    elif mode == "full":
        gc.collect()
    else:
        gc.collect(0)
    time.sleep(0.3)
print("alive")
"""


@pytest.mark.parametrize("mode", ["sleep", "compute", "auto", "full"])
def test_collected_wheel_never_runs_a_cleared_callback(mode):
    proc = run_script(SCRIPT.format(mode=mode), timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip() == "alive"


def test_a_collected_wheel_is_closed_and_its_callbacks_released():
    proc = run_script(
        """
        import gc, weakref, pywheel
        class Payload:
            pass
        def make():
            def f():
                pass
            f.wheel = pywheel.Wheel()
            p = Payload()
            f.wheel.call_later(30, f, p)
            f.wheel.call_every(30, f)
            return weakref.ref(f.wheel), weakref.ref(p)
        wr, pr = make()
        gc.collect()
        print(wr() is None, pr() is None)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True"]


def test_a_wheel_resurrected_by_a_finalizer_comes_back_closed():
    proc = run_script(
        """
        import gc, pywheel
        saved = []
        class Saver:
            def __del__(self):
                saved.append(self.f.wheel)
        def make():
            def f():
                pass
            f.wheel = pywheel.Wheel()
            f.wheel.call_later(30, f)
            s = Saver()
            s.f = f
            f.saver = s
        make()
        gc.collect()
        (w,) = saved
        print(w.closed, len(w))
        try:
            w.call_later(1, print)
        except RuntimeError as e:
            print("refused:", e)
        """
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "True 0"
    assert lines[1].startswith("refused: the wheel is closed: collected as garbage")
