"""The API reference (docs/reference/*.md) covers the whole public surface.

- every name in ``__all__`` of pywheel, pywheel.asyncio, pywheel.uvloop and
  pywheel.testing has a docstring (a constant: a ``#:`` comment where it is
  assigned, which autodoc shows) and an autodoc directive in docs/reference;
- every public method and attribute of the C types (Wheel, ManualWheel,
  TimerHandle) has its ``automethod``/``autoattribute`` on the pywheel page,
  which lists them one by one to keep the stubs' order;
- the keys table of ``Wheel.stats()`` names exactly the keys it returns;
- the pytest plugin's page names every command-line option, ini key, marker
  and fixture the plugin registers.

Each check compares two sets, so a name added to the code without its entry
in the docs fails here; the last test shows the comparison does catch one.
Sphinx is not needed: the pages are read as text (``make docs`` builds them).
"""

import ast
import importlib
import re
from pathlib import Path

import pytest

import pywheel
import pywheel.testing.pytest_plugin as plugin

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference"
if not REFERENCE.is_dir():  # tests copied out of the tree (the wheel's own test run)
    pytest.skip("docs/reference is not next to these tests", allow_module_level=True)

MODULES = ["pywheel", "pywheel.asyncio", "pywheel.uvloop", "pywheel.testing"]
C_TYPES = ["Wheel", "ManualWheel", "TimerHandle"]

AUTODOC = re.compile(
    r"^\s*\.\. auto(?:class|function|data|exception|method|attribute|property|module)::"
    r"\s+([\w.]+)",
    re.M,
)


def page(name: str) -> str:
    return (REFERENCE / f"{name}.md").read_text()


def all_pages() -> str:
    return "\n".join(p.read_text() for p in sorted(REFERENCE.glob("*.md")))


def missing(wanted, documented) -> list[str]:
    """The names wanted but not documented, sorted (empty: all there)."""
    return sorted(set(wanted) - set(documented))


def public_names() -> set[str]:
    pytest.importorskip("uvloop", reason="pywheel.uvloop needs uvloop (in the test extra)")
    names = set()
    for module in MODULES:
        mod = importlib.import_module(module)
        names |= {f"{module}.{name}" for name in mod.__all__}
    return names


def documented_targets() -> set[str]:
    return set(AUTODOC.findall(all_pages()))


def constant_comment(name: str) -> bool:
    """A ``#:`` comment right above ``NAME = ...`` in a module of pywheel
    (the package imported: in the installed-wheel run the tree's pywheel/ is
    gone)."""
    assign = re.compile(rf"^(#:.*\n)+{re.escape(name)}\s*(:[^=]*)?=", re.M)
    package = Path(importlib.import_module("pywheel").__file__).parent
    return any(assign.search(p.read_text()) for p in package.rglob("*.py"))


def test_every_public_name_has_a_docstring():
    undocumented = []
    for full in sorted(public_names()):
        module, _, name = full.rpartition(".")
        obj = getattr(importlib.import_module(module), name)
        if callable(obj):
            ok = bool((obj.__doc__ or "").strip())
        else:  # a constant: its docstring is the #: comment autodoc reads
            ok = constant_comment(name)
        if not ok:
            undocumented.append(full)
    assert undocumented == []


def test_every_public_name_has_an_autodoc_directive():
    assert missing(public_names(), documented_targets()) == []


def c_type_members(cls: type) -> set[str]:
    return {name for name in vars(cls) if not name.startswith("_")}


def pywheel_page_members() -> dict[str, set[str]]:
    """The automethod/autoattribute names under each autoclass of the pywheel page."""
    members: dict[str, set[str]] = {}
    current = None
    for line in page("pywheel").splitlines():
        m = re.match(r"\.\. autoclass:: pywheel\.(\w+)", line)
        if m:
            current = members.setdefault(m.group(1), set())
            continue
        m = re.match(r"\s+\.\. auto(?:method|attribute|property):: (\w+)", line)
        if m and current is not None:
            current.add(m.group(1))
    return members


@pytest.mark.parametrize("name", C_TYPES)
def test_every_member_of_the_c_types_is_listed(name):
    cls = getattr(pywheel, name)
    listed = pywheel_page_members().get(name, set())
    assert missing(c_type_members(cls), listed) == []
    assert missing(listed, c_type_members(cls)) == []  # nor one that is gone


def stats_table_keys() -> set[str]:
    text = page("pywheel")
    table = text[text.index(".. automethod:: stats") :]
    return set(re.findall(r"^\s+\* - ``(\w+)``", table, re.M))


def test_the_stats_table_names_every_key():
    w = pywheel.ManualWheel()
    try:
        keys = set(w.stats())
    finally:
        w.close()
    assert keys == stats_table_keys()
    assert len(keys) == 14


# ---- the pytest plugin ------------------------------------------------------------


class _Recorder:
    """Stands for pytest's parser and option group: records what the plugin adds."""

    def __init__(self):
        self.options: set[str] = set()
        self.ini: set[str] = set()

    def getgroup(self, *args, **kwargs):
        return self

    def addoption(self, *names, **kwargs):
        self.options.update(names)

    def addini(self, name, *args, **kwargs):
        self.ini.add(name)


def plugin_registers() -> tuple[set[str], set[str], set[str], set[str]]:
    """Options and ini keys (by running pytest_addoption), markers (the
    addinivalue_line("markers", ...) calls) and public fixtures (module-level
    functions under @pytest.fixture) of the plugin."""
    rec = _Recorder()
    plugin.pytest_addoption(rec)
    tree = ast.parse(Path(plugin.__file__).read_text())
    markers, fixtures = set(), set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", None) == "addinivalue_line"
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == "markers"
        ):
            first = node.args[1]
            text = first.value if isinstance(first, ast.Constant) else first.values[0].value
            markers.add(re.match(r"\w+", text).group())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            if any("fixture" in ast.unparse(d) for d in node.decorator_list):
                fixtures.add(node.name)
    return rec.options, rec.ini, markers, fixtures


def plugin_page_lists() -> tuple[set[str], set[str], set[str], set[str]]:
    text = page("pytest-plugin")
    options = set(re.findall(r"^:::\{option\} (--[\w-]+)", text, re.M))
    ini = set(re.findall(r"^:::\{confval\} (\w+)", text, re.M))
    markers = set(re.findall(r"^:::\{py:decorator\} pytest\.mark\.(\w+)", text, re.M))
    fixtures = set(re.findall(r"^### `(\w+)`", text, re.M))
    return options, ini, markers, fixtures


def test_the_plugin_registers_what_this_test_expects():
    options, ini, markers, fixtures = plugin_registers()
    assert "--virtual-time" in options and "--timing-fuzz" in options
    assert "virtual_time" in ini
    assert markers == {"virtual_time", "virtual_time_limit"}
    assert fixtures == {"virtual_loop"}


@pytest.mark.parametrize("kind", ["options", "ini keys", "markers", "fixtures"])
def test_the_plugin_page_lists_everything_the_plugin_registers(kind):
    i = ["options", "ini keys", "markers", "fixtures"].index(kind)
    registered, listed = plugin_registers()[i], plugin_page_lists()[i]
    assert missing(registered, listed) == []
    assert missing(listed, registered) == []  # nor one the plugin no longer has


def test_a_name_added_without_docs_is_caught():
    # What the checks above compare, with one more name on the code's side.
    documented = documented_targets()
    assert missing(public_names() | {"pywheel.testing.brand_new"}, documented) == [
        "pywheel.testing.brand_new"
    ]
    options = plugin_page_lists()[0]
    assert missing(plugin_registers()[0] | {"--timing-new"}, options) == ["--timing-new"]
    assert missing(
        c_type_members(pywheel.Wheel) | {"new_method"}, pywheel_page_members()["Wheel"]
    ) == ["new_method"]
