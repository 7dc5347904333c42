"""python -m examples.real_bugs [NAME ...]: the scoreboard.

For each bug: install the buggy and the fixed version in cached venvs
(skipped, with the reason, where that cannot be done), show the bug on the
stock loop (buggy fails, fixed passes), check the punctual run passes, hunt
the buggy version with timings() -- no bound: its documented defaults,
BOUNDS -- (derandomized, EXAMPLES examples, shrink, replay), and run the
fixed version through the same EXAMPLES."""

import sys
import time

from . import BOUNDS, BUGS, EXAMPLES, _venv, meta


def _venv_for(spec):
    python, requirement = spec
    try:
        return _venv.ensure(requirement, python), None
    except _venv.Unavailable as exc:
        return None, str(exc)


def _say(label, result):
    if "error" in result:
        return f"{label}: ERROR {result['error']}"
    v = result.get("violation")
    return f"{label} ({result['version']}): " + ("FAILS: " + v if v else "passes")


def score(name: str) -> dict:
    bug = meta(name)
    row = {"name": name, "ref": bug["REF"]}
    print(f"\n== {name}: {bug['PROMISE']}  [{bug['REF']}]", flush=True)
    envs = {}
    for side in ("buggy", "fixed"):
        vpy, why = _venv_for(bug[side.upper()])
        if vpy is None:
            print(f"  skipped: cannot make the {side} venv: {why}")
            row["skipped"] = why
            return row
        envs[side] = vpy
    for side in ("buggy", "fixed"):
        r = _venv.run_in(envs[side], "stock", name)
        row[f"stock_{side}"] = r
        print("  stock loop, " + _say(side, r), flush=True)
    for side in ("buggy", "fixed"):
        r = _venv.run_in(envs[side], "punctual", name)
        row[f"punctual_{side}"] = r
        print("  punctual virtual time, " + _say(side, r), flush=True)
    h = _venv.run_in(envs["buggy"], "hunt", name, str(EXAMPLES))
    row["hunt"] = h
    if "error" in h:
        print(f"  hunt: ERROR {h['error']}")
    elif h["found"]:
        print(
            f"  found after {h['examples']} examples; shrinking {h['shrink_seconds']:.1f} s"
            f" ({h['runs']} runs in all); {h['decisions']} non-zero decisions"
            f" ({h.get('found_decisions', '?')} as found, minimize()"
            f" {h.get('minimize_seconds', 0):.1f} s, then hypothesis with it pinned);"
            f" replay {'fails again' if h['replay'] else 'PASSES (does not replay)'};"
            f" {h['hangs']} runs hung (dropped)"
        )
        print("  shrunk: " + h["shrunk"].replace("\n", "\n  "))
    else:
        print(
            f"  NOT found in {h['examples']} examples ({h['seconds']:.1f} s;"
            f" {h['hangs']} runs hung, dropped)"
        )
    s = _venv.run_in(envs["fixed"], "survive", name, str(EXAMPLES))
    row["survive"] = s
    if "error" in s:
        print(f"  fixed version: ERROR {s['error']}")
    else:
        verdict = "FALSE ALARM: " + s["violation"] if s["violation"] else "passes"
        print(
            f"  fixed version ({s['version']}), {s['examples']} examples: {verdict}"
            f" ({s['hangs']} more hung, dropped)" + (f"; {s['stopped']}" if "stopped" in s else ""),
            flush=True,
        )
    return row


def _cell(row):
    if "skipped" in row:
        return ["skipped: " + row["skipped"]] + [""] * 5

    def stock(side):
        r = row[f"stock_{side}"]
        return "error" if "error" in r else ("fails" if r["violation"] else "passes")

    h, s = row["hunt"], row["survive"]
    shown = f"buggy {stock('buggy')}, fixed {stock('fixed')}"
    if "error" in h:
        found = ["error", "", "", ""]
    elif h["found"]:
        found = [
            f"yes, {h['examples']}",
            f"{h['shrink_seconds']:.1f} s",
            str(h["decisions"]),
            "yes" if h["replay"] else "NO",
        ]
    else:
        found = [f"no ({h['examples']})", "", "", ""]
    if "error" in s:
        fixed = "error"
    else:
        fixed = "FAILS" if s["violation"] else f"passes {s['examples']}"
        if s["hangs"]:
            fixed += f" ({s['hangs']} hung)"
        if "stopped" in s:
            fixed += f", then {s['stopped']}"
    return [shown] + found + [fixed]


def main(names):
    t0 = time.perf_counter()
    names = names or BUGS
    print(f"bounds: timings()'s defaults {dict(BOUNDS)}, {EXAMPLES} derandomized examples per bug")
    rows = [score(n) for n in names]
    print(
        "\n| bug | upstream | stock loop | found (examples) | shrinking | decisions | replays |"
        " fixed version |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| `{row['name']}` | {row['ref']} | " + " | ".join(_cell(row)) + " |")
    print(f"\nscoreboard: {time.perf_counter() - t0:.0f} s")


main(sys.argv[1:])
