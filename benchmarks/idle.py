"""``python -m benchmarks.idle [--quick] [other options]``: the idle-timeout
workload alone, i.e. ``python -m benchmarks --only idle``.

N connections each with a 30 s timeout that every read pushes back (the
workload timing wheels exist for).  The workload itself is
``benchmarks.workloads.idle_unit`` with the peers in ``benchmarks.peers``
(``IDLE_PEERS``); see benchmarks/README.md.
"""

import sys

from .run import main

if __name__ == "__main__":
    sys.exit(main(["--only", "idle", *sys.argv[1:]]))
