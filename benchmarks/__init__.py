"""pywheel's benchmark suite: pywheel and its peers, side by side, in one run.

Run ``python -m benchmarks --help``.  Every number is measured in the same
run as the peers it is compared with, and reported as a ratio where one
makes sense.  See benchmarks/README.md for what each workload measures.
"""
