"""close() called from one wheel's callback on another wheel (issue 9,
finding 3): it waits for the other wheel's running callback, as close()
does anywhere else, unless the wait could never end (a cycle of wheels
closing each other, or a wheel closing itself), where it returns at once.
In children with a timeout: a deadlock must fail the test, not hang it."""

from helpers import run_script


def test_close_from_another_wheels_callback_waits_for_the_running_callback():
    proc = run_script(
        """
        import threading, time, pywheel
        a, b = pywheel.Wheel(), pywheel.Wheel()
        out = {}
        started, done = threading.Event(), threading.Event()
        def slow():
            started.set()
            time.sleep(0.3)
            out["b_done"] = time.monotonic()
        def closer():
            started.wait(5)
            left = b.close(timeout=10)
            out["closed"] = time.monotonic()
            out["left"] = left
            done.set()
        b.call_later(0, slow)
        never = b.call_later(60, print)
        a.call_later(0.01, closer)
        assert done.wait(10)
        print(out["closed"] >= out["b_done"], out["left"] == [never], never.cancelled())
        a.close()
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True", "True"]


def test_close_from_another_wheels_callback_honours_its_timeout():
    proc = run_script(
        """
        import threading, time, pywheel
        a, b = pywheel.Wheel(), pywheel.Wheel()
        started, done, release = threading.Event(), threading.Event(), threading.Event()
        took = []
        def stuck():
            started.set()
            release.wait(10)
        def closer():
            started.wait(5)
            t = time.monotonic()
            b.close(timeout=0.2)
            took.append(time.monotonic() - t)
            done.set()
        b.call_later(0, stuck)
        a.call_later(0, closer)
        assert done.wait(10)
        release.set()
        print(0.15 <= took[0] < 5)
        a.close(); b.close()
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


def test_two_wheels_closing_each_other_do_not_deadlock():
    # Both callbacks start together and close the other wheel with no limit:
    # one of them waits, the other sees the cycle and returns at once.
    proc = run_script(
        """
        import threading, time, pywheel
        for round in range(20):
            x, y = pywheel.Wheel(), pywheel.Wheel()
            bar = threading.Barrier(2)
            res = []
            def cx():
                bar.wait(5)
                y.close()
                res.append("x")
            def cy():
                bar.wait(5)
                x.close()
                res.append("y")
            x.call_later(0, cx)
            y.call_later(0, cy)
            t = time.monotonic()
            while len(res) < 2 and time.monotonic() - t < 10:
                time.sleep(0.005)
            assert sorted(res) == ["x", "y"], res
            x.close(); y.close()
        print("ok")
        """,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_a_chain_of_three_waits_and_a_cycle_of_three_does_not():
    proc = run_script(
        """
        import threading, time, pywheel
        # chain: a's callback closes b, whose callback is closing c (slow)
        a, b, c = pywheel.Wheel(), pywheel.Wheel(), pywheel.Wheel()
        log = []
        c_started = threading.Event()
        def c_slow():
            c_started.set(); time.sleep(0.2); log.append("c done")
        def b_closes_c():
            c_started.wait(5); c.close(); log.append("b closed c")
        def a_closes_b():
            time.sleep(0.05); b.close(); log.append("a closed b")
        c.call_later(0, c_slow); b.call_later(0, b_closes_c); a.call_later(0, a_closes_b)
        t = time.monotonic()
        while len(log) < 3 and time.monotonic() - t < 10:
            time.sleep(0.005)
        print(log)
        # cycle of three: each closes the next at the same moment
        ws = [pywheel.Wheel() for _ in range(3)]
        bar = threading.Barrier(3)
        done = []
        def closes(i):
            bar.wait(5); ws[(i + 1) % 3].close(); done.append(i)
        for i, w in enumerate(ws):
            w.call_later(0, closes, i)
        t = time.monotonic()
        while len(done) < 3 and time.monotonic() - t < 10:
            time.sleep(0.005)
        print(sorted(done))
        a.close()
        """,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "['c done', 'b closed c', 'a closed b']"
    assert lines[1] == "[0, 1, 2]"
