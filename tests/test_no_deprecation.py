"""No DeprecationWarning at import or in normal use, on any Python, and ready
for 3.16 (issue 18, point 2): asyncio 3.14 deprecates its policy system
(DefaultEventLoopPolicy, get/set_event_loop_policy, ...) and 3.16 removes it.
pywheel makes its policy classes only when asked for them, so importing and
using pywheel never touches a deprecated name.

On CPython 3.11-3.13 each child interpreter below first makes its asyncio
look like 3.14's (the names warn when read) or 3.16's (the names are gone),
then imports pywheel; on 3.14 and 3.15, whose asyncio really warns, the 3.14
simulation is asyncio itself, and the 3.16 one removes the names it serves."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# Set up the default policy first, as any program that ran asyncio before
# would have: asyncio's own get_event_loop()/set_event_loop() keep working in
# 3.14 and 3.16, through a private policy.
_PRELUDE = """
import asyncio, asyncio.events, asyncio.unix_events, sys, warnings
# 3.14 and later serve the policy names through a module __getattr__ that warns
DEPRECATES = "DefaultEventLoopPolicy" not in vars(asyncio)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    asyncio.events.get_event_loop_policy()
"""

# 3.14: reading the policy classes from asyncio warns (a module __getattr__),
# calling get/set_event_loop_policy warns; asyncio's internals do not.
AS_IN_3_14 = (
    _PRELUDE
    + """
if DEPRECATES:
    pass  # this asyncio is the real thing
else:
  _hidden = {n: getattr(asyncio, n) for n in ("DefaultEventLoopPolicy", "AbstractEventLoopPolicy")}
  for _n in _hidden:
      delattr(asyncio, _n)

  def __getattr__(name):
      if name in _hidden:
          warnings.warn(f"'asyncio.{name}' is deprecated and slated for removal in Python 3.16",
                        DeprecationWarning, stacklevel=2)
          return _hidden[name]
      raise AttributeError(f"module 'asyncio' has no attribute {name!r}")

  asyncio.__getattr__ = __getattr__

  def _deprecated(name, f):
      def wrapper(*args):
          warnings.warn(f"'asyncio.{name}' is deprecated and slated for removal in Python 3.16",
                        DeprecationWarning, stacklevel=2)
          return f(*args)
      return wrapper

  for _n in ("get_event_loop_policy", "set_event_loop_policy"):
      setattr(asyncio, _n, _deprecated(_n, getattr(asyncio, _n)))
"""
)

# 3.16: the policy names are gone from asyncio.
AS_IN_3_16 = (
    _PRELUDE
    + """
_GONE = ("DefaultEventLoopPolicy", "AbstractEventLoopPolicy", "BaseDefaultEventLoopPolicy",
         "get_event_loop_policy", "set_event_loop_policy")
for _mod in (asyncio, asyncio.unix_events):
    for _n in _GONE:
        if _n in vars(_mod):
            delattr(_mod, _n)
if "__getattr__" in vars(asyncio):  # 3.14+: the deprecated names it serves go too
    del asyncio.__getattr__
# asyncio.events keeps the two functions: its own new_event_loop() and
# set_event_loop() call them, as 3.16's will call a private replacement.
for _n in ("AbstractEventLoopPolicy", "BaseDefaultEventLoopPolicy"):
    if _n in vars(asyncio.events):
        delattr(asyncio.events, _n)
asyncio.__all__ = tuple(n for n in asyncio.__all__ if n not in _GONE)
assert not hasattr(asyncio, "DefaultEventLoopPolicy")
"""
)

# Normal use: loops through loop factories, the helpers, virtual time with a
# Timing, star imports.
USE = """
import functools
import pywheel.asyncio as pwa
import pywheel.testing as vt
from pywheel.asyncio import *
from pywheel.testing import *

async def main():
    loop = asyncio.get_running_loop()
    await asyncio.sleep(0.001)
    async with asyncio.timeout(1):
        await pwa.sleep(0.001)
    async with pwa.timeout(1):
        await asyncio.sleep(0.001)
    return type(loop).__name__

with asyncio.Runner(loop_factory=pwa.new_event_loop) as r:
    assert r.run(main()) == "WheelEventLoop"
if sys.version_info >= (3, 12):
    assert asyncio.run(main(), loop_factory=vt.new_event_loop) == "VirtualEventLoop"
assert asyncio.run(main()) != "WheelEventLoop"   # the stock loop, with the helpers
assert pwa.run(main()) == "WheelEventLoop"
timing = vt.Timing(max_late=0.01, draw=lambda n: n)
assert vt.run(main(), timing=timing) == "VirtualEventLoop"
assert vt.run(main(), timing=timing) == "VirtualEventLoop"  # replayed
with asyncio.Runner(loop_factory=functools.partial(vt.new_event_loop, start=5.0)) as r:
    r.run(main())
loop = vt.VirtualEventLoop()
asyncio.set_event_loop(loop)
loop.run_until_complete(main())
asyncio.set_event_loop(None)
loop.close()
"""

# pywheel's pytest plugin: the fixture and the marker (pytest-asyncio and
# anyio off, so only pywheel's code is judged).
PLUGIN = '''
import os, tempfile, textwrap, pytest
d = tempfile.mkdtemp()
with open(os.path.join(d, "test_it.py"), "w") as f:
    f.write(textwrap.dedent("""
        import asyncio, pytest

        @pytest.mark.virtual_time(limit=100, quantum=0)
        async def test_marker():
            await asyncio.sleep(50)
            assert asyncio.get_running_loop().time() == 50

        def test_fixture(virtual_loop):
            virtual_loop.run_until_complete(asyncio.sleep(3))
            assert 3 < virtual_loop.time() < 3.001  # and an iteration or three
    """))
rc = pytest.main([d, "-q", "-p", "no:cacheprovider", "-p", "no:asyncio", "-p", "no:anyio",
                  "-W", "error::DeprecationWarning", "-W", "error::ResourceWarning"])
assert rc == 0, rc
'''


def _child(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-X", "dev", *args, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_plain_import_is_warning_free():
    r = _child("import pywheel.asyncio, pywheel.testing", "-W", "error::DeprecationWarning")
    assert r.returncode == 0, r.stderr


def test_import_and_use_warning_free_on_a_python_that_deprecates_policies():
    # On main: the import fails (the policy classes subclass
    # asyncio.DefaultEventLoopPolicy at import time).
    r = _child(AS_IN_3_14 + USE + PLUGIN + "print('ok')", "-W", "error::DeprecationWarning")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.rstrip().endswith("ok")


def test_import_and_use_on_a_python_without_policies():
    r = _child(
        AS_IN_3_16
        + USE
        + PLUGIN
        + """
import pywheel.asyncio as pwa, pywheel.testing as vt
assert not hasattr(pwa, "EventLoopPolicy") and not hasattr(vt, "EventLoopPolicy")
for mod in (pwa, vt):
    try:
        mod.EventLoopPolicy
    except AttributeError as exc:
        assert "loop_factory" in str(exc), exc
    else:
        raise AssertionError("a policy without asyncio's policies")
print("ok")
""",
        "-W",
        "error::DeprecationWarning",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.rstrip().endswith("ok")


def test_asking_for_the_policy_warns_at_the_callers_line_where_asyncio_deprecates_it(
    tmp_path,
):
    script = tmp_path / "uses_policy.py"
    script.write_text(
        textwrap.dedent(
            AS_IN_3_14
            + """
import pywheel.asyncio as pwa, pywheel.testing as vt
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    a = pwa.EventLoopPolicy
    from pywheel.testing import EventLoopPolicy as b
    loop = a().new_event_loop()
    assert isinstance(loop, pwa.WheelEventLoop)
    loop.close()
    loop = b(start=7.0).new_event_loop()
    assert loop.time() == 7.0
    loop.close()
# (a from-import reads the name twice: two identical warnings, shown once)
msgs = {(w.category.__name__, w.filename, str(w.message)) for w in caught}
assert len(msgs) == 2, msgs
for cat, filename, msg in msgs:
    assert cat == "DeprecationWarning" and filename == __file__, (cat, filename)
    assert "loop_factory" in msg and "3.16" in msg, msg
print("ok")
"""
        )
    )
    r = subprocess.run(
        [sys.executable, "-X", "dev", str(script)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == "ok\n", r.stdout + r.stderr


def test_policies_still_work_where_asyncio_has_them_undeprecated():
    import asyncio
    import warnings

    import pywheel.asyncio as pwa
    import pywheel.testing as vt

    if sys.version_info >= (3, 14):
        pytest.skip("this asyncio deprecates policies: covered by the warning test above")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert issubclass(pwa.EventLoopPolicy, asyncio.DefaultEventLoopPolicy)
        assert issubclass(vt.EventLoopPolicy, asyncio.DefaultEventLoopPolicy)
        assert pwa.EventLoopPolicy is pwa.EventLoopPolicy  # made once
    assert "EventLoopPolicy" not in pwa.__all__ and "EventLoopPolicy" not in vt.__all__


def test_the_suite_turns_pywheels_own_deprecation_warnings_into_errors():
    # pyproject's filterwarnings: a DeprecationWarning raised from a pywheel
    # module is an error here; one from elsewhere is not.
    code = compile("import warnings\nwarnings.warn('old', DeprecationWarning)", "<m>", "exec")
    with pytest.raises(DeprecationWarning):
        exec(code, {"__name__": "pywheel.somewhere"})
    with pytest.warns(DeprecationWarning):
        exec(code, {"__name__": "elsewhere"})
