"""TimerHandle.reschedule(when) / reschedule_later(delay): O(1) moves of a
pending timer's deadline, without a new handle (issue 13, point 1)."""

import gc
import math
import threading
import time

import pytest

import pywheel
from pywheel import ManualWheel, Wheel


def test_moves_a_pending_timer_later_and_earlier(manual):
    ran = []
    h = manual.call_later(1, ran.append, "a")
    assert h.reschedule(5) is True and h.when() == 5.0 and h._when == 5.0
    assert manual.advance(4) == 0
    assert h.reschedule_later(0.5) is True and h.when() == 4.5
    assert manual.advance(0.5) == 1 and ran == ["a"]
    s = manual.stats()
    assert s["rescheduled"] == 2 and s["scheduled"] == 1 == s["fired"]


def test_pushed_back_timers_are_seen_at_their_new_deadlines(manual):
    # A deadline moved later stays filed where it was until the wheel gets
    # there (wheel.h): what the wheel reports and runs must be the new one,
    # across levels too (1 ms ticks: 0.05 s and 100 s are levels apart).
    ran = []
    hs = [manual.call_later(0.05 + i * 0.001, ran.append, i) for i in range(4)]
    for k in range(20):  # pushed back again and again, as reads do
        hs[0].reschedule_later(0.1 + k)
    hs[1].reschedule_later(100)
    hs[2].reschedule_later(0.06)
    assert manual.next_deadline() == pytest.approx(0.053)
    assert manual.next_when() == pytest.approx(0.053)
    hs[3].reschedule_later(0.07)
    assert manual.next_when() == pytest.approx(0.06)
    assert manual.advance(0.065) == 1 and ran == [2]
    assert manual.advance_to(19.0) == 1 and ran == [2, 3]
    assert manual.next_when() == pytest.approx(19.1)
    assert manual.advance_to(19.0999) == 0
    assert manual.advance_to(100.0) == 2 and ran == [2, 3, 0, 1]
    assert manual.next_deadline() is None


def test_false_once_it_ran_was_cancelled_or_the_wheel_closed(manual):
    a, b, c = (manual.call_later(1, print) for _ in range(3))
    manual.advance(1)
    assert a.reschedule(10) is False and a.reschedule_later(1) is False
    d = manual.call_later(1, print)
    d.cancel()
    assert d.reschedule(10) is False and d.cancelled()
    e = manual.call_later(1, print)
    manual.close()
    assert e.reschedule(10) is False and e.reschedule_later(1) is False
    assert len(manual) == 0


def test_a_moved_timer_takes_a_new_place_among_equal_deadlines(manual):
    order = []
    hs = [manual.call_at(1.0, order.append, i) for i in range(3)]
    hs[0].reschedule(1.0)  # same deadline, new place: last
    manual.advance(1)
    assert order == [1, 2, 0]


def test_moved_into_the_past_runs_at_once_and_never_early():
    w = ManualWheel(start=10)
    ran = []
    h = w.call_later(5, lambda: ran.append(w.time()))
    assert h.reschedule(3) is True  # in the past
    assert w.advance(0) == 1 and ran == [10.0]


def test_a_timer_set_aside_then_moved_runs_at_its_new_deadline(manual):
    ran = []
    h = manual.call_later(1, ran.append, "moved")
    other = manual.call_later(1, ran.append, "other")
    assert manual.collect_due(1.0) == 2
    assert h.reschedule_later(2) is True
    assert len(manual) == 2  # counted once: in the wheel, no longer in the batch
    assert manual.run_collected() == 1 and ran == ["other"]
    assert manual.next_when() == 3.0
    assert manual.advance_to(3.0) == 1 and ran == ["other", "moved"]
    s = manual.stats()
    assert s["scheduled"] == s["fired"] + s["cancelled"] + s["pending"]
    del other


def test_moving_one_of_a_set_aside_tick_keeps_the_others_in_exact_order():
    # Three timers in one tick, collected out of exact order (2 ns first);
    # moving the middle one must not break the exact-order sort of the rest
    # (found by the exact-deadline state machine: the batch was sorted by
    # tick groups, and the moved entry's new tick split the group).
    w = ManualWheel(tick=0.001, start=1e-9)
    ran = []
    w.call_at(2e-9, ran.append, "2ns")
    moved = w.call_at(1e-9, ran.append, "moved")
    w.call_at(1e-9, ran.append, "1ns")
    assert w.collect_due(2e-9) == 3
    assert moved.reschedule_later(1.0) is True
    assert w.run_collected() == 2 and ran == ["1ns", "2ns"]
    w.close()


def test_close_returns_a_moved_batch_entry_once(manual):
    h = manual.call_later(1, print)
    manual.collect_due(1.0)
    h.reschedule(5)
    assert manual.close() == [h] and h.cancelled()
    assert manual.run_collected() == 0


def test_the_collector_sees_a_moved_batch_entry_once():
    # A cycle through the callback of a handle that is both in the batch and
    # linked again: visited twice it would look unreachable and be freed.
    w = ManualWheel()
    ran = []

    class Node:
        pass

    n = Node()
    n.self = n
    h = w.call_later(1, lambda node: ran.append(node), n)
    del n
    w.collect_due(1.0)
    h.reschedule(2)
    gc.collect()
    assert w.run_collected() == 0
    assert w.advance_to(2) == 1 and isinstance(ran[0], Node) and ran[0].self is ran[0]
    w.close()


def test_a_repeating_timer_moved_from_its_own_callback(manual):
    runs = []

    def cb():
        runs.append(manual.time())
        if len(runs) == 2:
            assert h.reschedule(manual.time() + 10) is True

    h = manual.call_every(1, cb)
    manual.advance(15)
    assert runs == [1.0, 2.0, 12.0, 13.0, 14.0, 15.0]  # the cadence restarts there
    s = manual.stats()
    assert s["scheduled"] == s["fired"] + s["cancelled"] + s["pending"]
    assert h.cancel() is True
    s = manual.stats()
    assert s["scheduled"] == s["fired"] + s["cancelled"] + s["pending"] and s["pending"] == 0


@pytest.mark.parametrize("then", ["cancel", "close", "nothing"])
def test_counters_when_a_running_repeating_timer_moves_itself(manual, then):
    def cb():
        h.reschedule_later(5)
        s = manual.stats()  # consistent inside the callback too
        assert s["scheduled"] == s["fired"] + s["cancelled"] + s["pending"]
        if then == "cancel":
            assert h.cancel() is True
        elif then == "close":
            assert manual.close() == [h]

    h = manual.call_every(1, cb)
    manual.advance(1)
    s = manual.stats()
    assert s["scheduled"] == s["fired"] + s["cancelled"] + s["pending"]
    assert s["pending"] == (1 if then == "nothing" else 0)


def test_threaded_wheel_never_early_after_a_move():
    with Wheel() as w:
        fired = threading.Event()
        got = []
        h = w.call_later(0.02, lambda: (got.append(w.time()), fired.set()))
        assert h.reschedule_later(0.15) is True
        target = h.when()
        assert fired.wait(5)
        assert got[0] >= target


def test_threaded_wheel_moves_under_concurrent_load():
    # Many threads keep pushing their timers' deadlines back while the wheel
    # fires others: nothing runs early, nothing is lost, counters hold.
    with Wheel() as w:
        lock = threading.Lock()
        early, ran = [], []

        def cb(h_box):
            now = w.time()
            with lock:
                if now < h_box[0].when():
                    early.append(now)
                ran.append(h_box)

        boxes = []
        for _ in range(400):
            box = []
            box.append(w.call_later(0.01, cb, box))
            boxes.append(box)

        def pusher(part):
            for _ in range(20):
                for box in part:
                    box[0].reschedule_later(0.01)
                time.sleep(0.001)

        ts = [threading.Thread(target=pusher, args=(boxes[i::4],)) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        deadline = time.monotonic() + 10
        while len(w) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        assert early == [] and len(ran) == 400
        s = w.stats()
        assert s["scheduled"] == s["fired"] == 400 and s["pending"] == 0


@pytest.mark.parametrize(
    ("value", "exc"),
    [(math.nan, ValueError), (None, TypeError), ("1", TypeError), (1e300, OverflowError)],
)
def test_bad_input_changes_nothing(manual, value, exc):
    h = manual.call_later(1, print)
    with pytest.raises(exc):
        h.reschedule(value)
    with pytest.raises(exc):
        h.reschedule_later(value)
    assert h.when() == 1.0 and manual.stats()["rescheduled"] == 0


def test_inf_moves_to_never(manual):
    h = manual.call_later(1, print)
    assert h.reschedule(math.inf) is True and h.when() == math.inf
    assert manual.advance(100) == 0 and manual.next_when() is None
    assert h.reschedule(101) is True and manual.advance(1) == 1


def test_keyword_arguments(manual):
    h = manual.call_later(1, print)
    assert h.reschedule(when=2) and h.reschedule_later(delay=3) and h.when() == 3.0
    with pytest.raises(TypeError):
        h.reschedule(delay=2)


def test_handles_of_the_wheel_event_loop_move_too():
    import asyncio

    import pywheel.asyncio as pwa

    async def main():
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        h = loop.call_later(0.01, fut.set_result, "moved")
        assert isinstance(h, pywheel.TimerHandle)
        assert h.reschedule_later(0.05) is True
        t0 = loop.time()
        result = await fut
        return result, loop.time() - t0

    result, took = pwa.run(main())
    assert result == "moved" and took >= 0.049


def test_pywheel_timeout_reschedule_moves_its_timer_in_place():
    import asyncio

    import pywheel.asyncio as pwa

    async def main():
        loop = asyncio.get_running_loop()
        wheel = loop.wheel
        async with pwa.timeout(10) as t:
            h = t._handle
            for k in range(5):
                t.reschedule(loop.time() + 20 + k)
                assert t._handle is h  # the same timer, moved
            assert h.when() == t.when()
        assert wheel.stats()["rescheduled"] == 5
        # and it still expires at the moved deadline
        with pytest.raises(TimeoutError):
            async with pwa.timeout(10) as t:
                t.reschedule(loop.time() + 0.01)
                await asyncio.sleep(1)
        return t.expired()

    assert pwa.run(main()) is True
