"""A virtual loop closes the async generators left open at
``shutdown_asyncgens()`` in the order they first ran, whatever their memory
addresses: the same program gives the same order every run (a stock loop's
WeakSet follows the addresses)."""

import asyncio
import gc
import weakref

from pywheel import testing


def program(trace, n=8):
    async def gen(k):
        try:
            yield k
            yield k
        finally:
            trace.append(k)

    async def main():
        keep = []
        for k in range(n):
            g = gen(k)
            await g.__anext__()  # first iteration: the loop's hook sees it
            keep.append(g)
        main.keep = keep  # open until the Runner's shutdown_asyncgens()

    return main()


def test_left_open_generators_close_in_first_iteration_order():
    for _ in range(20):
        trace = []
        # Fresh memory each round: other addresses, another WeakSet order.
        spacers = [object() for _ in range(101)]
        testing.run(program(trace))
        del spacers
        assert trace == list(range(8))


def test_the_set_forgets_what_was_freed_and_what_was_discarded():
    s = testing._loop._agens.OrderedWeakSet()

    class Item:
        pass

    a, b, c = Item(), Item(), Item()
    for x in (a, b, c, a):
        s.add(x)
    assert list(s) == [a, b, c] and len(s) == 3 and b in s
    s.discard(b)
    s.discard(b)
    assert list(s) == [a, c] and b not in s and 1 not in s
    del a, x
    gc.collect()
    assert list(s) == [c] and len(s) == 1
    ref = weakref.ref(s)
    s.clear()
    assert len(s) == 0 and list(s) == []
    del s
    assert ref() is None  # no reference cycle through its callbacks


def test_a_generator_finalized_by_the_program_is_not_closed_again():
    trace = []

    async def gen():
        try:
            yield 1
            yield 2
        finally:
            trace.append("closed")

    async def main():
        g = gen()
        await g.__anext__()
        await g.aclose()
        assert len(asyncio.get_running_loop()._asyncgens) == 1  # still alive, closed
        del g  # freed: the loop's set forgets it

    testing.run(main())
    assert trace == ["closed"]
