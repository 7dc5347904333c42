"""Sphinx configuration of pywheel's documentation site (``make docs``).

The tools are the field's usual ones (uvloop, trio, hypothesis, anyio and
pytest-asyncio build their sites the same way): Sphinx, MyST-parser so the
pages are Markdown (the README's text moves over as it is, and a page reads
the same on a forge as on the site), and the furo theme, maintained and
readable on a phone.  The build is nitpicky with warnings as errors
(``sphinx-build -W -n``): a broken link between pages, a ``{py:class}`` role
naming nothing, a page in no toctree all stop it.

Links are checked by the build itself: MyST warns on a link to a missing
page, heading anchor or file, and ``-n`` on a role naming no object.
``-b linkcheck`` is not run: what it adds is the external URLs, which need
the network.

No intersphinx: it downloads the inventories at build time, so a build
without network (CI here) would warn, and fail under ``-W``.  A reference to
the standard library (or to pytest, uvloop, hypothesis) renders as code,
unlinked, through ``nitpick_ignore_regex`` below; every ``pywheel`` name must
resolve.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The checkout's pywheel (editable install or not): the docstrings documented
# are the ones next to this file.
sys.path.insert(0, str(ROOT))

import pywheel  # noqa: E402

project = "pywheel"
author = "The pywheel authors"
copyright = "the pywheel authors"  # noqa: A001  (Sphinx's name)
release = pywheel.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "images/*.txt"]
templates_path: list[str] = []

# ---- MyST -----------------------------------------------------------------
# colon_fence: ``:::{directive}`` blocks, which the docs' code-block runner
# (Sybil) does not mistake for code; deflist: term/definition lists.
myst_enable_extensions = ["colon_fence", "deflist"]
# `[text](page.md#a-section)` links: anchors for headings down to ###.
myst_heading_anchors = 3

# ---- nitpicky references ----------------------------------------------------
nitpicky = True
# Names outside pywheel render unlinked (no intersphinx: see above).  The
# prefixes are modules; the bare names are what the stubs' and signatures'
# annotations say (Context, Callable, ...).  A public pywheel name is never ignored.
_OUTSIDE = (
    r"(asyncio|collections|concurrent|contextvars|enum|logging|os|pathlib|selectors|"
    r"socket|ssl|subprocess|sys|threading|time|types|typing|typing_extensions|"
    r"uvloop|rloop|pytest|_pytest|hypothesis|anyio|freezegun|time_machine)(\..+)?"
)
nitpick_ignore_regex = [
    (r"py:.*", _OUTSIDE),
    (
        r"py:.*",
        r"(Context|Callable|Awaitable|Coroutine|Generator|AsyncGenerator|Iterable|"
        r"Iterator|Mapping|Sequence|Path|PathLike|Self|Any|TypeVar|ParamSpec|Ts|T|"
        r"SearchStrategy)",
    ),
    # A private name in an annotation (a TypeVar such as pywheel.testing._T) is
    # not documented: shown, not linked.
    (r"py:.*", r"([\w.]+\.)?_\w*"),
]

# ---- autodoc ------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
# An override without a docstring (WheelEventLoop.call_later, the loops'
# run_until_complete ...) is left out rather than shown with asyncio's text,
# which would describe asyncio's handles, not pywheel's.
autodoc_inherit_docstrings = False

# ---- HTML -------------------------------------------------------------------------
html_theme = "furo"
html_title = f"pywheel {release}"
html_static_path = ["_static"]
html_css_files = ["pywheel.css"]
html_show_sourcelink = False


# ---- signatures of the C extension, from its stubs ------------------------------
# pywheel.Wheel, ManualWheel and TimerHandle are C types: their methods carry a
# text signature without types, and a docstring opening "Returns X.".  The
# typed signatures are in pywheel/_core.pyi, which tests/test_stubs.py checks
# against the extension (mypy.stubtest): the reference takes each signature
# from there, so it shows the same types a type checker sees, and drops the
# docstring's "Returns X." that the return annotation now says.
_STUBS = ROOT / "pywheel" / "_core.pyi"
# The stubs' private helpers, spelled out for a reader.
_ALIASES = {
    "_WheelStats": "dict[str, int | float]",
    "Unpack[_Ts]": "*Ts",
    "*_Ts": "*Ts",
}


def _stub_signatures() -> dict[str, tuple[str, str]]:
    tree = ast.parse(_STUBS.read_text())
    aliases = dict(_ALIASES)
    for node in tree.body:  # module-level aliases, e.g. _ExceptionHandler = Callable[...]
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name.startswith("_") and name not in ("_Ts",):
                aliases.setdefault(name, ast.unparse(node.value))

    def spell(text: str) -> str:
        for old, new in aliases.items():
            text = re.sub(rf"(?<![\w.]){re.escape(old)}(?!\w)", new, text)
        return text

    sigs = {}
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef) or cls.name.startswith("_"):
            continue
        for fn in cls.body:
            if not isinstance(fn, ast.FunctionDef):
                continue
            if any(ast.unparse(d) == "property" for d in fn.decorator_list):
                continue
            args = fn.args
            if args.posonlyargs:
                args.posonlyargs = args.posonlyargs[1:]
            else:
                args.args = args.args[1:]
            ret = "" if fn.returns is None else spell(ast.unparse(fn.returns))
            sig = "(" + spell(ast.unparse(args)) + ")"
            if fn.name == "__new__":
                sigs[f"pywheel.{cls.name}"] = (sig, "")
            else:
                sigs[f"pywheel.{cls.name}.{fn.name}"] = (sig, ret)
    return sigs


_SIGS = _stub_signatures()
_RETURNS = re.compile(r"^Returns [\w.\[\]]+( \| [\w.\[\]]+)*\.(\s+|$)")


def _signature(app, what, name, obj, options, signature, return_annotation):
    if name in _SIGS:
        return _SIGS[name]
    return None


def _docstring(app, what, name, obj, options, lines):
    if name in _SIGS and lines:
        stripped = _RETURNS.sub("", lines[0], count=1)
        if stripped != lines[0] and stripped:
            stripped = stripped[0].upper() + stripped[1:]
        lines[0] = stripped
        # The C docstrings are plain text for help(): callback(*args) is not
        # rST emphasis.
        lines[:] = [line.replace("*args", r"\*args") for line in lines]


# ---- links to files outside docs/ ------------------------------------------------
# A page links the test that checks a promise as [`tests/test_x.py`](../../tests/test_x.py).
# MyST makes a link to an existing file that is not a page a download link
# (Sphinx copies the file into the site); a missing file is an error.  A
# Markdown file outside docs/ (README.md, benchmarks/README.md) would be taken
# for a page and refused: it is made a download link too, here, before
# Sphinx collects the downloads.
def _outside_markdown(app, doctree):
    from docutils import nodes
    from sphinx import addnodes

    srcdir = Path(app.srcdir).resolve()
    docdir = (srcdir / app.env.docname).parent
    for node in list(doctree.findall(addnodes.pending_xref)):
        if node.get("reftype") != "myst" or node.get("refdomain") != "doc":
            continue
        target = Path(node["reftarget"] + ".md")
        if not target.is_absolute() or srcdir in target.parents:
            continue
        if not (target.is_file() and ROOT in target.parents) or node.get("reftargetid"):
            continue  # left to MyST, which says what is wrong
        link = addnodes.download_reference(
            refdomain=None,
            reftarget=os.path.relpath(target, docdir),
            refdoc=app.env.docname,
            reftype="myst",
            refexplicit=True,
            classes=["xref", "download", "myst"],
        )
        link += node.children or [nodes.literal(text=str(target.relative_to(ROOT)))]
        node.replace_self(link)


# ---- the code-block runner's markers, shown --------------------------------------
# The runner's markers are HTML comments above a block (docs/blocks.py): the
# page shows none of them.  Two say something a reader needs: a block marked
# <!-- file: NAME --> is the file NAME, and one marked <!-- output --> is what
# the block before it printed.  They get that as a caption.
_MARKER = re.compile(r"<!--\s*(file|output)\s*(?::\s*(.*?))?\s*-->")


def _marker_captions(app, doctree):
    from docutils import nodes

    for raw in list(doctree.findall(nodes.raw)):
        parent = raw.parent
        if parent is None or "html" not in raw.get("format", ""):
            continue
        index = parent.index(raw)
        # The markers sit directly above the block: the raw nodes up to it.
        following = parent.children[index + 1 :]
        block = next((n for n in following if not isinstance(n, nodes.raw)), None)
        if not isinstance(block, nodes.literal_block):
            continue
        m = _MARKER.search(raw.astext())
        if not m:
            continue
        if m.group(1) == "file":
            title = nodes.literal(text=m.group(2))
        elif (m.group(2) or "").startswith("machine-dependent"):
            title = nodes.Text("Output (the numbers vary by machine)")
        else:
            title = nodes.Text("Output")
        caption = nodes.caption("", "", title)
        wrapper = nodes.container("", literal_block=True, classes=["literal-block-wrapper"])
        block.replace_self(wrapper)
        wrapper += [caption, block]
        doctree.set_id(wrapper)  # the caption's permalink points at it


def _bases(app, name, obj, options, bases):
    # "Bases: Loop" would read as the class itself: a base from outside
    # pywheel is named in full, asyncio's by its public name.
    for i, base in enumerate(bases):
        module = getattr(base, "__module__", "")
        if isinstance(base, type) and not module.startswith("pywheel"):
            if module.startswith("asyncio") and base.__name__ == "_UnixSelectorEventLoop":
                bases[i] = ":py:class:`asyncio.SelectorEventLoop`"
            else:
                bases[i] = f":py:class:`{module}.{base.__qualname__}`"


def setup(app):
    app.connect("autodoc-process-bases", _bases)
    app.connect("autodoc-process-signature", _signature)
    app.connect("autodoc-process-docstring", _docstring)
    app.connect("doctree-read", _outside_markdown, priority=400)
    app.connect("doctree-read", _marker_captions)
