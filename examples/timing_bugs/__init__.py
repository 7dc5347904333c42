"""Small asyncio programs with timing bugs that a punctual run never shows,
each with its fixed twin, and ``hunt()``: let ``pywheel.testing.timings()``
find each bug, shrink it and replay it.

    python -m examples.timing_bugs          # every example: examples needed, shrunk Timing

Each module has ``PERTURB`` (the ``timings()`` bounds that expose it) and
``async def scenario(fixed=False)``, which raises AssertionError when the bug
shows.
"""

EXAMPLES = ["lease", "billing_drift", "reply_mismatch", "overlapping_job", "watchdog", "lru_ttl"]
