"""A virtual loop's live async generators, in the order they first ran.

``BaseEventLoop`` keeps them in a ``weakref.WeakSet`` and, at
``shutdown_asyncgens()``, closes them in the order the set iterates, which
follows their memory addresses: the same program, replayed under the same
Timing, closed its generators in a different order (their cleanups run in
that order, and a Timing names each of their steps by its place in the
run).  This keeps the set's surface as ``BaseEventLoop`` uses it (add,
discard, len, iteration, clear) and iterates in insertion order (the
order the loop's first-iteration hook saw them), which is one of the
orders a stock loop could take."""

from __future__ import annotations

import weakref


class OrderedWeakSet:
    __slots__ = ("_data", "_remove", "__weakref__")

    def __init__(self) -> None:
        self._data: dict[weakref.ref, None] = {}

        selfref = weakref.ref(self)  # the callback holds the set weakly: no cycle

        def _remove(ref):
            owner = selfref()
            if owner is not None:
                owner._data.pop(ref, None)

        self._remove = _remove

    def add(self, item) -> None:
        ref = weakref.ref(item, self._remove)
        if ref not in self._data:
            self._data[ref] = None

    def discard(self, item) -> None:
        self._data.pop(weakref.ref(item), None)

    def __contains__(self, item) -> bool:
        try:
            return weakref.ref(item) in self._data
        except TypeError:
            return False

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self):
        for ref in list(self._data):  # a snapshot: a callback may remove meanwhile
            item = ref()
            if item is not None:
                yield item

    def clear(self) -> None:
        self._data.clear()
