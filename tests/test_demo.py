"""python -m pywheel, the demo the README's first command runs: it shows each
figure's spread over several rounds, says at what n, on how many CPUs and at
what load it ran, keeps to 80 columns, and reports the first batch's lateness
(the promise) apart from the later batches' (which wait for the earlier ones).

Run small (--n, --rounds) to stay fast; nothing here asserts a speed."""

import os
import re
import subprocess
import sys

import pytest
from helpers import child_env

NUMBER = r"[\d,]+(?:\.\d+)?"
SPAN = rf"\(({NUMBER})-({NUMBER})\)"
ROWS = [
    "call_later(), ns/timer",
    "cancel(), ns/timer",
    "fire all due, ns/timer",
    "gc.collect(), ms",
    "memory, bytes/timer",
]


def demo(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pywheel", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env(),
        cwd=tmp_path,
    )


def num(text: str) -> float:
    return float(text.replace(",", ""))


@pytest.fixture(scope="module")
def two_rounds(tmp_path_factory):
    proc = demo(tmp_path_factory.mktemp("demo"), "--n", "10000", "--rounds", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr == ""
    return proc.stdout


def test_the_demo_says_at_what_n_load_and_cpu_count_it_ran(two_rounds):
    lines = two_rounds.splitlines()
    assert lines[0].startswith("pywheel ") and f"{os.cpu_count()} CPUs" in lines[0], lines[0]
    assert lines[1].startswith("n = 10,000 timers per step, 2 rounds, "), lines[1]
    load = r"\d+\.\d\d \d+\.\d\d \d+\.\d\d"
    pattern = rf"load average \(1, 5, 15 min\): {load}; {load} after \d+\.\d s"
    assert re.fullmatch(pattern, lines[2]), lines[2]


def test_every_figure_has_its_median_and_its_range(two_rounds):
    lines = two_rounds.splitlines()
    assert "each figure: its median over the 2 rounds, under it (min-max)" in lines
    for label in ROWS:
        at = next(i for i, line in enumerate(lines) if line.startswith(label))
        medians = lines[at][len(label) :].split()
        spans = re.findall(SPAN, lines[at + 1])
        assert len(medians) == 3 and len(spans) == 3, lines[at : at + 2]
        assert medians[2].endswith("x"), lines[at]
        for med, (lo, hi) in zip(medians, spans, strict=True):
            # The median of two rounds lies between them.
            assert num(lo) <= num(med.rstrip("x")) <= num(hi), (label, med, lo, hi)


def test_the_first_batch_lateness_is_apart_from_the_later_batches(two_rounds):
    text = two_rounds
    assert re.search(r"handed out by the wheel thread in \d+ batches of at most 4,096:", text)
    first = re.search(rf"- first batch: started ({NUMBER}) ms late {SPAN}; the promise", text)
    assert first, text
    if getattr(sys, "_is_gil_enabled", lambda: True)():  # the child runs as this process
        assert "one tick (1 ms) plus the wait for the GIL" in text
    else:
        assert "one tick (1 ms) plus the wait for a CPU, on a busy machine\n" in text
        assert "(this build runs without the GIL)" in text
    later = re.search(
        rf"- later batches wait for the earlier ones to run: the last started\n"
        rf"  ({NUMBER}) ms late {SPAN}, the time the callbacks before it took to run",
        text,
    )
    assert later, text
    # The last batch starts after the first: never reported as earlier.
    assert num(later[1]) >= num(first[1]), text


def test_the_output_fits_80_columns(two_rounds):
    assert max(len(line) for line in two_rounds.splitlines()) <= 80


def test_one_round_and_one_batch_show_no_spread_and_no_later_batches(tmp_path):
    proc = demo(tmp_path, "-n", "100", "--rounds", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "n = 100 timers per step, 1 round, " in out
    assert "each figure: one round's (--rounds 2 or more shows a spread)" in out
    assert not re.search(SPAN, out), out
    assert "in 1 batch of at most 100:" in out
    assert re.search(rf"- first batch: started {NUMBER} ms late; the promise", out), out
    assert "later batches" not in out


def test_help_names_the_options_and_a_quick_run(tmp_path):
    proc = demo(tmp_path, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--n N" in proc.stdout and "--rounds ROUNDS" in proc.stdout
    assert "python -m pywheel --n 10000 --rounds 2" in proc.stdout


@pytest.mark.parametrize("args", [["--rounds", "0"], ["--n", "-5"], ["--n", "many"]])
def test_bad_options_are_refused(tmp_path, args):
    proc = demo(tmp_path, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "python -m pywheel: error: argument" in proc.stderr
