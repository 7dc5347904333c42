"""The runner of the documentation's code blocks (docs/blocks.py, wired into
pytest by the root conftest.py): a page cannot show code that nothing runs,
or output that its code does not print (issue 29)."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if not (ROOT / "docs" / "blocks.py").is_file():  # tests copied out of the tree
    pytest.skip("docs/ is not next to these tests", allow_module_level=True)

sybil = pytest.importorskip("sybil")
_spec = importlib.util.spec_from_file_location("pywheel_docs_blocks", ROOT / "docs" / "blocks.py")
blocks = sys.modules.get(_spec.name)
if blocks is None:
    blocks = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(blocks)

F = "```"


def run_page(text):
    """Each block's outcome, in order: 'ok', 'skip: ...' or the failure."""
    document = sybil.Document(text, "page.md")
    for region in blocks.parse(document):
        document.add(region)
    outcomes = []
    blocks.setup(document.namespace)
    try:
        for example in document.examples():
            try:
                example.evaluate()
                outcomes.append("ok")
            except pytest.skip.Exception as e:
                outcomes.append(f"skip: {e}")
            except sybil.example.SybilFailure as e:
                outcomes.append(e.result)
    finally:
        blocks.teardown(document.namespace)
    return outcomes


def test_an_unmarked_block_that_nothing_runs_fails():
    for lang in ("sh", "toml", "", "text", "c"):
        (outcome,) = run_page(f"# T\n\n{F}{lang}\nrm -rf build\n{F}\n")
        assert "nothing runs" in outcome and "fragment" in outcome, outcome


def test_marked_fragments_and_myst_directives_are_not_tests():
    fragment = f"<!-- fragment: an install command -->\n{F}sh\npip install x\n{F}\n"
    page = fragment + f"\n{F}{{note}}\nhi\n{F}\n"
    assert run_page(page) == []


def test_python_blocks_run_in_order_in_one_namespace_as_main():
    second = f"{F}python\nassert x == 2 and __name__ == '__main__'\n{F}\n"
    page = f"{F}python\nx = 2\n{F}\n\ntext\n\n" + second
    assert run_page(page) == ["ok", "ok"]


def test_a_failing_python_block_fails():
    with pytest.raises(AssertionError, match="boom"):
        run_page(f"{F}python\nassert False, 'boom'\n{F}\n")


def test_output_shown_must_be_what_the_block_printed():
    code = f"{F}python\nprint('late by', 1.25, 'ms')\nprint('done')\n{F}\n"
    good = "<!-- output -->\n" + f"{F}text\nlate by 1.25 ms\ndone\n{F}\n"
    bad = "<!-- output -->\n" + f"{F}text\nlate by 0.5 ms\ndone\n{F}\n"
    loose = "<!-- output: machine-dependent -->\n" + f"{F}text\nlate by 0.5 ms\ndone\n{F}\n"
    elided = "<!-- output -->\n" + f"{F}text\nlate by ... ms\n...\n{F}\n"
    assert run_page(code + good) == ["ok", "ok"]
    assert "differs" in run_page(code + bad)[1]
    assert run_page(code + loose) == ["ok", "ok"]
    assert run_page(code + elided) == ["ok", "ok"]
    worded = "<!-- output: machine-dependent -->\n" + f"{F}text\nearly by 0.5 ms\ndone\n{F}\n"
    assert "differs" in run_page(code + worded)[1]


def test_files_and_console_commands_run_in_the_page_scratch_folder():
    page = (
        f"<!-- file: test_one.py -->\n{F}python\ndef test_one():\n    assert True\n{F}\n\n"
        "<!-- machine-dependent -->\n"
        f"{F}console\n$ pytest -q test_one.py\n.{' ' * 72}[100%]\n1 passed in 0.01s\n"
        f"$ python -c 'print(6 * 7)'\n42\n$ true\n{F}\n"
    )
    assert run_page(page) == ["ok", "ok"]
    wrong = f"{F}console\n$ python -c 'print(6 * 7)'\n41\n{F}\n"
    assert "differs" in run_page(wrong)[0]
    failing = f"{F}console\n$ python -c 'raise SystemExit(3)'\n{F}\n"
    assert "exited 3" in run_page(failing)[0]


def test_requires_skips_saying_what_is_missing():
    page = f"<!-- requires: no_such_module_here -->\n{F}python\nimport no_such_module_here\n{F}\n"
    (outcome,) = run_page(page)
    assert outcome.startswith("skip:") and "no_such_module_here" in outcome


def test_the_output_of_a_skipped_block_is_skipped_too():
    page = (
        f"{F}python\nprint('one')\n{F}\n\n<!-- requires: no_such_module_here -->\n"
        f"{F}python\nprint('two')\n{F}\n\n<!-- output -->\n{F}text\ntwo\n{F}\n"
    )
    outcomes = run_page(page)
    assert outcomes[0] == "ok"
    assert outcomes[1].startswith("skip:") and outcomes[2].startswith("skip:")


def test_an_unknown_marker_fails():
    (outcome,) = run_page(f"<!-- fragmnet -->\n{F}sh\nx\n{F}\n")
    assert "unknown marker" in outcome


def test_blocks_in_list_items_and_longer_fences():
    page = (
        f"- a step:\n\n  {F}python\n  y = 3\n  {F}\n\n````markdown\n{F}sh\nnot a block\n{F}\n````\n"
    )
    found = blocks.blocks(page)
    assert [(b.lang, b.body) for b in found] == [
        ("python", "y = 3\n"),
        ("markdown", f"{F}sh\nnot a block\n{F}\n"),
    ]


def test_the_readme_and_every_page_are_collected():
    # The pages the suite runs: pytest's testpaths name docs/ and README.md,
    # and the conftest hands every .md there to the runner.
    import tomllib

    paths = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"][
        "testpaths"
    ]
    assert "docs" in paths and "README.md" in paths
    assert "blocks.parse" in (ROOT / "conftest.py").read_text()
