"""What the garbage collector sees of pending timers (issue 22, point 3).

A handle's callback, arguments and context live in side words of its slab
slot, and the wheel's traverse walks those columns instead of the handles.
The promise is unchanged from before: every reference a pending timer holds
is reported (a cycle through it is collected once its wheel is garbage, and
nothing a live wheel's timers hold is freed), and nothing else is (a timer
that was cancelled, ran or was closed reports nothing, or the collector
would count a reference that no longer exists and free a live object).  The
same checks on a ManualWheel, a threaded Wheel and a WheelEventLoop, with
the reference in the callback, the arguments or the context, on several
slab pages of which only some hold arguments or contexts."""

import asyncio
import contextvars
import gc
import tracemalloc
import warnings
import weakref

import pytest
from helpers import run_script, wait_for

import pywheel
from pywheel.asyncio import WheelEventLoop

KINDS = ["manual", "wheel", "loop"]
WHERE = ["callback", "args", "context"]
PER_PAGE = 64 * 1024 // 104  # about: 3 * PER_PAGE timers span several pages
VAR = contextvars.ContextVar("test_gc_traverse")


class Node:
    """An object in a cycle of its own (the collector looks at it), which may
    also reach back to the wheel that holds it."""

    def __init__(self, back=None):
        self.me = self
        self.back = back

    def cb(self, *args):
        pass


def nop(*args):
    pass


def make(kind):
    if kind == "manual":
        w = pywheel.ManualWheel()
        return w, w.call_later
    if kind == "wheel":
        w = pywheel.Wheel()
        return w, w.call_later
    loop = WheelEventLoop()
    return loop, loop.call_later


def close(owner):
    owner.close()


def schedule(call_later, delay, node, where):
    """A timer whose reference to node is in `where`."""
    if where == "callback":
        return call_later(delay, node.cb)
    if where == "args":
        return call_later(delay, nop, 1, node)
    ctx = contextvars.copy_context()
    ctx.run(VAR.set, node)
    return call_later(delay, nop, context=ctx)


def pending(kind, owner):
    return len(owner.wheel if kind == "loop" else owner)


def run_until(kind, owner, done):
    """Lets the owner run its due timers until done() (a few seconds at most)."""
    if kind == "manual":
        owner.advance(0.01)
    elif kind == "wheel":
        wait_for(done)
    else:
        for _ in range(2000):
            if done():
                break
            owner.run_until_complete(asyncio.sleep(0.001))
    assert done()


def plain_timers(call_later, n):
    """Timers that hold nothing of interest, so that what the tests put in
    lands on later pages, next to pages whose argument and context columns
    are all NULL."""
    return [call_later(3600 + i, nop) for i in range(n)]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("kind", KINDS)
def test_a_cycle_through_pending_timers_is_collected_with_their_wheel(kind, where):
    gc.collect()
    died = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # a loop collected unclosed
        owner, call_later = make(kind)
        plain_timers(call_later, PER_PAGE)
        owner_ref = weakref.ref(owner, died.append)
        node_refs = []
        for i in range(2 * PER_PAGE):
            node = Node(owner)  # node -> owner -> its timer -> node
            node_refs.append(weakref.ref(node, died.append))
            schedule(call_later, 3600 + i, node, where)
        del owner, call_later, node
        gc.collect()
    assert owner_ref() is None
    assert all(r() is None for r in node_refs)
    assert len(died) == 1 + len(node_refs)  # every weakref callback ran


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("kind", KINDS)
def test_a_live_wheel_keeps_what_its_timers_hold_until_cancelled(kind, where):
    owner, call_later = make(kind)
    try:
        plain_timers(call_later, PER_PAGE)
        handles, refs, died = [], [], []
        for i in range(2 * PER_PAGE):
            node = Node()  # reachable only through the pending timer
            refs.append(weakref.ref(node, died.append))
            handles.append(schedule(call_later, 3600 + i, node, where))
        del node
        gc.collect()
        assert not died
        assert all(r() is not None and r().me is r() for r in refs)  # nothing cleared
        for h in handles:
            h.cancel()
        gc.collect()
        assert all(r() is None for r in refs)
        assert len(died) == len(refs)
    finally:
        close(owner)


class Stopper(Node):
    """A repeating timer's callback that cancels its own timer."""

    def cb(self, *args):
        self.h.cancel()


def stop_arg(node):
    node.h.cancel()


def stop_ctx():
    VAR.get().h.cancel()


@pytest.mark.parametrize("how", ["cancel", "run", "close", "cancel_from_callback"])
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("kind", KINDS)
def test_a_timer_that_is_no_longer_pending_reports_nothing(kind, where, how):
    # The nodes are held here, by a frame the collector cannot see, and by
    # their own cycle.  If the wheel still reported a timer's reference to
    # one, the collector would count it as internal, find the node
    # unreachable and clear it while it is alive.
    owner, call_later = make(kind)
    try:
        plain_timers(call_later, PER_PAGE)
        if how == "cancel_from_callback":
            every = (owner.wheel if kind == "loop" else owner).call_every
            nodes = [Stopper() for _ in range(PER_PAGE)]
            for node in nodes:
                if where == "callback":
                    node.h = every(0.001, node.cb)
                elif where == "args":
                    node.h = every(0.001, stop_arg, node)
                else:
                    ctx = contextvars.copy_context()
                    ctx.run(VAR.set, node)
                    node.h = every(0.001, stop_ctx, context=ctx)
            run_until(kind, owner, lambda: pending(kind, owner) == PER_PAGE)
        else:
            nodes = [Node() for _ in range(PER_PAGE)]
            delay = 0 if how == "run" else 3600
            # the handles are kept: a handle that ran keeps nothing either
            for node in nodes:
                node.h = schedule(call_later, delay, node, where)
            if how == "cancel":
                for node in nodes:
                    node.h.cancel()
            elif how == "run":
                run_until(kind, owner, lambda: pending(kind, owner) == PER_PAGE)
            else:
                close(owner)
        assert pending(kind, owner) == (0 if how == "close" else PER_PAGE)
        gc.collect()
        assert all(n.me is n for n in nodes)  # none cleared
        if how != "close":
            # the slots are used again: the new timers' words replace the old
            more = [Node() for _ in range(PER_PAGE)]
            for node in more:
                schedule(call_later, 3600, node, where)
            gc.collect()
            assert all(n.me is n for n in nodes + more)
    finally:
        close(owner)


@pytest.mark.parametrize("kind", KINDS)
def test_get_referents_reports_each_reference_of_each_pending_timer(kind):
    owner, call_later = make(kind)
    wheel = owner.wheel if kind == "loop" else owner
    try:
        shared, arg = Node(), Node()
        ctx = contextvars.copy_context()
        for i in range(PER_PAGE):
            call_later(3600 + i, shared.cb)
        for _ in range(3):
            call_later(3600, nop, arg)  # a tuple (arg,) each
        call_later(3600, shared.cb, context=ctx)
        gone = Node()
        call_later(3600, gone.cb, gone).cancel()
        if kind == "manual":
            wheel.call_later(0, gone.cb, gone)
            wheel.advance(1)
        refs = gc.get_referents(wheel)
        assert sum(getattr(r, "__self__", None) is shared for r in refs) == PER_PAGE + 1
        assert sum(type(r) is tuple and r == (arg,) for r in refs) == 3
        assert sum(r is nop for r in refs) == 3
        assert sum(r is ctx for r in refs) == 1
        # nothing of the timers that were cancelled or ran
        assert not any(getattr(r, "__self__", None) is gone for r in refs)
        assert not any(type(r) is tuple and gone in r for r in refs)
    finally:
        close(owner)


def test_no_memory_is_kept_over_many_rounds():
    w = pywheel.ManualWheel()
    shared = Node()
    before = (len(gc.get_referents(w)), __import__("sys").getrefcount(shared))

    def one_round():
        hs = []
        for i in range(3 * PER_PAGE):
            ctx = contextvars.copy_context() if i % 3 == 0 else None
            if ctx is not None:
                ctx.run(VAR.set, Node())
            hs.append(w.call_later(0.5 + i % 7, shared.cb, Node(), context=ctx))
        gc.collect()
        for h in hs[::2]:
            h.cancel()
        w.advance(10)
        gc.collect()

    tracemalloc.start()
    try:
        for _ in range(5):
            one_round()
        first = tracemalloc.get_traced_memory()[0]
        for _ in range(40):
            one_round()
        grown = tracemalloc.get_traced_memory()[0] - first
    finally:
        tracemalloc.stop()
    assert grown < 256 * 1024, grown  # a page or two of slack, not 40 rounds of timers
    assert (len(gc.get_referents(w)), __import__("sys").getrefcount(shared)) == before
    w.close()


def test_the_collector_after_fork():
    proc = run_script(
        """
        import gc, os, sys, weakref, pywheel

        class Node:
            def __init__(self, back=None):
                self.me, self.back = self, back
            def cb(self, *a):
                pass

        w = pywheel.Wheel()
        nodes = [Node() for _ in range(2000)]
        for n in nodes:
            w.call_later(3600, n.cb, n)
        pid = os.fork()
        if pid == 0:
            # the child's copy is closed: it reports nothing, frees nothing alive
            gc.collect()
            ok = all(n.me is n for n in nodes)
            w2 = pywheel.ManualWheel()
            died, refs = [], []
            for _ in range(2000):
                m = Node(w2)
                refs.append(weakref.ref(m, died.append))
                w2.call_later(3600, m.cb, m)
            r = weakref.ref(w2, died.append)
            del w2, m
            gc.collect()
            os._exit(0 if ok and r() is None and len(died) == 2001 else 3)
        _, status = os.waitpid(pid, 0)
        gc.collect()
        print(os.waitstatus_to_exitcode(status), len(w), all(n.me is n for n in nodes))
        w.close()
        """,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "2000", "True"]
