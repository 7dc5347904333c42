"""Where the time goes: one program of benchmarks/programs.py on each loop, under perf.

    python -m benchmarks.profile_programs PROGRAM [--size N=1e4] [--mode full]
        [--loops asyncio,uvloop,...] [--repeat 3] [--out DIR] [--top 10]

For each loop that imports, ``perf record -e cpu-clock -g`` (cpu-clock: this
VM has no hardware counters) runs ``python -m benchmarks.programs PROGRAM
LOOP`` (the program `--repeat` times on fresh loops, interpreter start-up
included, a few per cent at these sizes), then ``perf report --no-children``
attributes every sample to the function it was taken in (self time), and
this prints per loop the share of samples in:

  gc         the cyclic collector: gc_collect_main, visit_*, *_traverse and
             the rest of gcmodule.c's work (update_refs, move_unreachable, ...)
  eval       the eval loop and calls: _PyEval_EvalFrameDefault and friends
             (frames, vectorcall, method and function calls)
  alloc      object allocation and freeing: pymalloc, malloc/free, *_dealloc,
             *_alloc, _PyObject_GC_New / _Del
  extension  the loop's own compiled code: uvloop's loop.*.so, rloop's
             _rloop*.so, pywheel's _core*.so, CPython's _asyncio*.so
  kernel     [kernel.kallsyms] and other [k] samples (syscalls, epoll, sockets)
  other      everything else (dict and attribute lookups, unicode, libc, ...)

and the top symbols.  Without perf it says so and exits 1.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import programs as PR

CATEGORIES = ["gc", "eval", "alloc", "extension", "kernel", "other"]

_GC = re.compile(
    r"^(gc_collect_main|gc_collect_\w+|collect\b|visit_\w+|\w+_traverse|update_refs|"
    r"subtract_refs|move_unreachable|move_legacy_finalizers|deduce_unreachable|"
    r"handle_weakrefs|finalize_garbage|delete_garbage|gc_\w+|_PyGC_\w+|"
    r"_PyObject_GC_Link|PyObject_GC_Track|PyObject_GC_UnTrack|_PyObject_GC_TRACK|"
    r"PyObject_IS_GC|validate_list|untrack_dicts|untrack_tuples|move_unreachable)"
)
_EVAL = re.compile(
    r"^(_PyEval_\w+|PyEval_\w+|_PyFrame_\w+|_PyFunction_\w+|_PyObject_Vectorcall\w*|"
    r"PyObject_Vectorcall\w*|_PyObject_Call\w*|PyObject_Call\w*|_PyObject_MakeTpCall|"
    r"method_vectorcall\w*|_PyVectorcall\w*|cfunction_\w+|vectorcall_\w+|"
    r"_Py_call\w*|call_function\w*|_PyCFunction\w*|slot_tp_call|_PyThreadState_PushFrame|"
    r"_PyThreadState_PopFrame|clear_thread_frame|gen_send_ex\w*|_PyGen_\w+|gen_iternext|"
    r"_PyInterpreterFrame\w*|frame_dealloc)$"
)
_ALLOC = re.compile(
    r"^(_?PyObject_Malloc|_?PyObject_Free|_?PyObject_Realloc|_?PyObject_Calloc|"
    r"pymalloc_\w+|_PyObject_GC_New\w*|_PyObject_GC_Alloc|gc_alloc|PyObject_GC_Del|"
    r"_PyObject_New\w*|PyObject_Init\w*|_Py_Dealloc|\w+_dealloc|\w+_alloc|\w*_new_impl|"
    r"malloc|free|cfree|calloc|realloc|_int_malloc|_int_free\w*|malloc_consolidate|"
    r"__libc_malloc|__libc_free|__libc_calloc|_PyMem_\w+|PyMem_\w+|"
    r"_PyObject_Free|subtype_dealloc|_PyFloat_ExactDealloc|_PyLong_New|tuple_alloc)$"
)
_EXT = re.compile(r"(^loop\.cpython.*\.so|^_rloop.*\.so|^_core.*\.so|^_asyncio.*\.so)")


def category(dso: str, sym: str) -> str:
    dso = os.path.basename(dso.strip())
    if sym.startswith("[k]") or "kernel" in dso:
        return "kernel"
    name = sym.split("]", 1)[-1].strip()
    if _EXT.search(dso):
        return "extension"
    if _GC.match(name):
        return "gc"
    if _EVAL.match(name):
        return "eval"
    if _ALLOC.match(name):
        return "alloc"
    return "other"


def parse_report(text: str) -> list[tuple[float, str, str]]:
    """[(percent, dso, symbol)] from `perf report -t '|' --sort dso,sym`."""
    out = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split("|")
        if len(parts) < 3:
            continue
        try:
            pct = float(parts[0].strip().rstrip("%"))
        except ValueError:
            continue
        out.append((pct, parts[1].strip(), "|".join(parts[2:]).strip()))
    return out


def summarize(rows) -> dict:
    total = sum(p for p, _, _ in rows) or 1.0
    shares = dict.fromkeys(CATEGORIES, 0.0)
    for p, dso, sym in rows:
        shares[category(dso, sym)] += p
    shares = {k: 100 * v / total for k, v in shares.items()}
    top = sorted(rows, reverse=True)[:30]
    return {"shares": shares, "top": top}


def profile(
    prog: str, loop: str, mode: str, size: str | None, repeat: int, out: Path, perf: str
) -> dict:
    data = out / f"perf-{prog}-{loop}.data"
    cmd = [sys.executable, "-m", "benchmarks.programs", prog, loop, "--mode", mode]
    cmd += ["--repeat", str(repeat)] + (["--size", size] if size else [])
    here = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH", "")) if p)
    run = subprocess.run(
        [perf, "record", "-q", "-e", "cpu-clock", "-g", "-o", str(data), "--", *cmd],
        capture_output=True,
        text=True,
        env=env,
    )
    if run.returncode:
        raise RuntimeError(f"perf record failed on {loop}: {run.stderr[-1500:]}")
    rep = subprocess.run(
        [perf, "report", "-i", str(data), "--stdio", "--no-children", "-g", "none"]
        + ["--sort", "dso,sym", "-t", "|", "--percent-limit", "0"],
        capture_output=True,
        text=True,
    )
    res = summarize(parse_report(rep.stdout))
    res["program_output"] = run.stdout.strip().splitlines()
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.profile_programs", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("program", choices=list(PR.UNITS))
    ap.add_argument("--mode", choices=list(PR.SIZES), default="full")
    ap.add_argument("--size", help="a size label's start, e.g. N=1e4 (default: the first)")
    ap.add_argument("--loops", help="comma list (default: every loop that imports)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, help="keep the perf.data files here")
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args(argv)
    perf = shutil.which("perf")
    if perf is None:
        print("perf is not installed (apt-get install linux-perf / linux-tools): no profile.")
        return 1
    sizes = [c[1] for c in PR.cases(args.mode) if c[0] == args.program]
    if args.size and not any(s.startswith(args.size) for s in sizes):
        ap.error(f"{args.program} has no size {args.size!r} in {args.mode} mode: {sizes}")
    names, notes = PR.available()
    if args.loops:
        names = [n for n in args.loops.split(",") if n in names]
    for n in notes:
        print(n)
    out = args.out or Path(tempfile.mkdtemp(prefix="pywheel-profile-"))
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in names:
        print(f"[profile] {args.program} on {name}", file=sys.stderr, flush=True)
        results[name] = profile(args.program, name, args.mode, args.size, args.repeat, out, perf)
    print(f"\n## {args.program} ({args.mode}, {args.size or 'first size'}): share of samples\n")
    print("| loop | " + " | ".join(CATEGORIES) + " | run |")
    print("|---|" + "---:|" * len(CATEGORIES) + "---|")
    for name, r in results.items():
        last = r["program_output"][-1] if r["program_output"] else ""
        rate = last.split(": ", 1)[-1].split(" {")[0]
        cells = " | ".join(f"{r['shares'][c]:.1f}%" for c in CATEGORIES)
        print(f"| {name} | {cells} | {rate} |")
    for name, r in results.items():
        print(f"\n### {name}: top {args.top} symbols (self)\n")
        for p, dso, sym in r["top"][: args.top]:
            print(f"- {p:5.2f}%  {sym}  ({os.path.basename(dso)}; {category(dso, sym)})")
    print(f"\nperf.data files in {out}; load average {os.getloadavg()[0]:.2f} at the end.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
