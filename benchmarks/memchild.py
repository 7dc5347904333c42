"""Child process of the memory workload: ``python -m benchmarks.memchild PEER N``.

A fresh interpreter per implementation, so that its RSS delta is not muddied
by memory an earlier implementation freed but the allocator kept.
"""

import json
import sys

from . import loops, peers
from .workloads import measure_memory


def main() -> None:
    name, n = sys.argv[1], int(sys.argv[2])
    cls = getattr(peers, name, None) or getattr(loops, name)
    print(json.dumps(measure_memory(cls, n)))


if __name__ == "__main__":
    main()
