"""The pytest plugin's options refuse a bad value with a UsageError that
names the option, the value and what it takes, never only what Python's
float() or int() said (bad --timing-replay tokens: test_timing_replay.py)."""

import pytest
from helpers import run_pytest

OK = {"test_ok.py": "def test_ok():\n    pass\n"}

LIMIT = "seconds >= 0 (e.g. 60), or none for no limit"
QUANTUM = "0, or seconds >= 1e-9"
RUNS = "a whole number of runs >= 0"
BOUND = "seconds, a finite number >= 0"
SEED = "a whole number"

BAD = [
    (["--virtual-time-limit=abc"], "--virtual-time-limit", "'abc'", LIMIT),
    (["--virtual-time-limit=-1"], "--virtual-time-limit", "'-1'", LIMIT),
    (["--virtual-time-limit=nan"], "--virtual-time-limit", "'nan'", LIMIT),
    (["--virtual-time-limit=-inf"], "--virtual-time-limit", "'-inf'", LIMIT),
    (["--virtual-time-limit="], "--virtual-time-limit", "''", LIMIT),
    (["--virtual-time-quantum=abc"], "--virtual-time-quantum", "'abc'", QUANTUM),
    (["--virtual-time-quantum=-1"], "--virtual-time-quantum", "'-1'", QUANTUM),
    (["--virtual-time-quantum=nan"], "--virtual-time-quantum", "'nan'", QUANTUM),
    (["--virtual-time-quantum=inf"], "--virtual-time-quantum", "'inf'", QUANTUM),
    (["--virtual-time-quantum=1e-12"], "--virtual-time-quantum", "'1e-12'", QUANTUM),
    (["--timing-fuzz=abc"], "--timing-fuzz", "'abc'", RUNS),
    (["--timing-fuzz=-3"], "--timing-fuzz", "'-3'", RUNS),
    (["--timing-fuzz=2.5"], "--timing-fuzz", "'2.5'", RUNS),
    (["--timing-fuzz=5", "--timing-max-late=abc"], "--timing-max-late", "'abc'", BOUND),
    (["--timing-fuzz=5", "--timing-max-late=-0.01"], "--timing-max-late", "'-0.01'", BOUND),
    (["--timing-fuzz=5", "--timing-max-cost=nan"], "--timing-max-cost", "'nan'", BOUND),
    (["--timing-fuzz=5", "--timing-max-cost=1e400"], "--timing-max-cost", "'1e400'", BOUND),
    (["--timing-fuzz=5", "--timing-max-jitter=inf"], "--timing-max-jitter", "'inf'", BOUND),
    (["--timing-fuzz=5", "--timing-seed=0x10"], "--timing-seed", "'0x10'", SEED),
    (["--timing-fuzz=5", "--timing-max-late=0"], "--timing-max-late", "--timing-fuzz", "non-zero"),
    (["--timing-max-late=0.05"], "--timing-max-late", "0.05", "without --timing-fuzz=N"),
    (["--timing-max-jitter", "0.05"], "--timing-max-jitter", "0.05", "without --timing-fuzz=N"),
    (["--timing-seed=7"], "--timing-seed", "7", "without --timing-fuzz=N"),
    (["--timing-fuzz=0", "--timing-max-cost=0.01"], "--timing-max-cost", "0.01", "--timing-fuzz"),
    (
        ["--timing-replay=0.02,0.002,0.01,5eb34e69ede040a9", "--timing-max-late=0.05"],
        "--timing-max-late",
        "0.05",
        "the token carries",
    ),
    (["-o", "virtual_time_limit=abc", "--virtual-time"], "virtual_time_limit", "'abc'", LIMIT),
    (["--virtual-time-clocks=maybe"], "--virtual-time-clocks", "'maybe'", "'on', 'off'"),
]

INTERNALS = ("could not convert", "invalid float value", "invalid int value", "Traceback")


@pytest.mark.parametrize(("args", "option", "value", "takes"), BAD, ids=lambda x: None)
def test_a_bad_option_value_is_a_usage_error_saying_what_the_option_takes(
    tmp_path, args, option, value, takes
):
    r = run_pytest(tmp_path, OK, *args)
    assert r.returncode == 4, r.stdout + r.stderr  # pytest's UsageError
    err = r.stderr
    assert option in err and value in err and takes in err, err
    assert not any(words in err for words in INTERNALS), err


def test_bounds_and_seed_in_addopts_wait_for_the_fuzz(tmp_path):
    # The project's standing choice (ini addopts), not a slip on the command
    # line: accepted without --timing-fuzz, and used with it.
    files = dict(OK)
    files["pytest.ini"] = "[pytest]\naddopts = --timing-max-late=0.05 --timing-seed=3\n"
    r = run_pytest(tmp_path, files)
    assert r.returncode == 0, r.stdout + r.stderr
    r = run_pytest(tmp_path, files, "--timing-fuzz=2", "-v")  # -v: the header
    assert r.returncode == 0, r.stdout + r.stderr
    assert "max_late=0.05, max_cost=0.0, max_jitter=0.0, seed=3" in r.stdout, r.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--virtual-time-limit=none", "--virtual-time-quantum=0"],
        ["--virtual-time-limit=inf", "--virtual-time-quantum=1e-9"],
        ["--timing-fuzz=2", "--timing-max-late=0.01", "--timing-seed=-5"],
        ["--timing-fuzz=2", "--timing-max-cost=1", "--timing-max-jitter=0"],
    ],
)
def test_good_values_still_run(tmp_path, args):
    r = run_pytest(tmp_path, OK, *args)
    assert r.returncode == 0, r.stdout + r.stderr
