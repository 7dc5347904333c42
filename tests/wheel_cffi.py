"""A cffi (API mode) binding of csrc/core/wheel.h, built for the tests only.

The pure wheel is driven directly, with no thread and no CPython binding in
the way.  build() compiles it once per variant into a private folder; with
defines=["PW_TEST_BREAK_SLOT"] it builds the deliberately broken wheel that
the suite must catch.  cffi is a test dependency, never a runtime one.
"""

import importlib.util
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSRC = os.path.join(ROOT, "csrc", "core")  # the pure core: wheel.c needs nothing else

CDEF = """
typedef uint64_t pw_tick_t;
typedef struct pw_link { struct pw_link *next, *prev; } pw_link;
typedef struct pw_timer { pw_link link; pw_tick_t deadline; uint64_t seq; uint32_t sub; } pw_timer;
typedef struct pw_wheel { pw_tick_t now; ...; } pw_wheel;
#define PW_LEVELS ...
#define PW_LEVEL_BITS ...

void pw_wheel_init(pw_wheel *w, pw_tick_t now);
void pw_timer_init(pw_timer *t);
bool pw_timer_linked(const pw_timer *t);
void pw_wheel_add(pw_wheel *w, pw_timer *t, pw_tick_t deadline);
void pw_wheel_put(pw_wheel *w, pw_timer *t);
bool pw_wheel_cancel(pw_wheel *w, pw_timer *t);
void pw_wheel_move(pw_wheel *w, pw_timer *t, pw_tick_t deadline);
void pw_wheel_advance(pw_wheel *w, pw_tick_t now);
pw_timer *pw_wheel_pop(pw_wheel *w);
pw_tick_t pw_wheel_next(pw_wheel *w);
size_t pw_wheel_count(const pw_wheel *w);
pw_tick_t pw_wheel_now(const pw_wheel *w);
pw_timer *pw_wheel_any(pw_wheel *w);
int pw_wheel_check(const pw_wheel *w, char *msg, size_t msglen);
"""

TICK_MAX = 2**64 - 1
_cache: dict = {}


def build(defines: tuple[str, ...] = ()):
    """Returns (ffi, lib) for the wheel compiled with these macros defined."""
    key = tuple(sorted(defines))
    if key in _cache:
        return _cache[key]
    if not os.path.isdir(CSRC):  # a copy of tests/ without the sources
        import pytest

        pytest.skip(f"needs the C sources: {CSRC} is absent (the sdist has them, the wheel not)")
    import cffi

    name = "_pw_wheel_cffi" + "".join("_" + d.lower() for d in key)
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    ffi.set_source(
        name,
        '#include "wheel.h"',
        sources=[os.path.join(CSRC, "wheel.c")],
        include_dirs=[CSRC],
        define_macros=[(d, "1") for d in key],
        extra_compile_args=["-std=c11", "-O1", "-g"],
    )
    tmp = tempfile.mkdtemp(prefix="pw_cffi_")
    path = ffi.compile(tmpdir=tmp, verbose=False)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    _cache[key] = (mod.ffi, mod.lib)
    return _cache[key]


class Wheel:
    """The C wheel with its nodes kept alive while linked (cffi frees a node
    when its Python owner goes away, and a linked node must not vanish)."""

    def __init__(self, now: int = 0, defines: tuple[str, ...] = ()):
        self.ffi, self.lib = build(defines)
        self.w = self.ffi.new("pw_wheel *")
        self.lib.pw_wheel_init(self.w, now)
        self.nodes: dict[int, object] = {}  # address -> cdata, while linked
        self.ids: dict[int, int] = {}  # address -> caller's id

    def _addr(self, t) -> int:
        return int(self.ffi.cast("uintptr_t", t))

    def add(self, ident: int, deadline: int, sub: int = 0):
        t = self.ffi.new("pw_timer *")
        self.lib.pw_timer_init(t)
        t.sub = sub
        self.lib.pw_wheel_add(self.w, t, deadline)
        a = self._addr(t)
        self.nodes[a], self.ids[a] = t, ident
        return t

    def cancel(self, t) -> bool:
        ok = bool(self.lib.pw_wheel_cancel(self.w, t))
        if ok:
            del self.nodes[self._addr(t)]
        return ok

    def move(self, t, deadline: int, sub: int = 0) -> None:
        """Moves a linked timer (lazily when later: see wheel.h)."""
        t.sub = sub
        self.lib.pw_wheel_move(self.w, t, deadline)

    def advance(self, now: int) -> None:
        self.lib.pw_wheel_advance(self.w, now)

    def pop(self):
        """(id, deadline, sub, seq) of the next expired timer, or None."""
        t = self.lib.pw_wheel_pop(self.w)
        if t == self.ffi.NULL:
            return None
        a = self._addr(t)
        self.nodes.pop(a)
        return self.ids[a], t.deadline, t.sub, t.seq

    def next(self) -> int:
        return self.lib.pw_wheel_next(self.w)

    def now(self) -> int:
        return self.lib.pw_wheel_now(self.w)

    def count(self) -> int:
        return self.lib.pw_wheel_count(self.w)

    def check(self) -> str | None:
        buf = self.ffi.new("char[]", 512)
        if self.lib.pw_wheel_check(self.w, buf, 512) == 0:
            return None
        return self.ffi.string(buf).decode()
