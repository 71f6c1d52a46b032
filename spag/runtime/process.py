"""Python's garbage collector in a process that spag owns (a pipeline stage, the ``spag`` command).

Such a process imports torch and transformers: some half a million objects that live until it exits.
CPython collects its youngest generation after every 700 new objects, the middle one every tenth time and,
at most, everything every hundredth, so the collector walks the imported objects again and again while
they are imported and while the work runs, and finds nothing to free: about a second of every stage
(docs/benchmarks.md has the figures). :func:`short_lived_process` makes the first collection wait for
50,000 new objects instead. Garbage is still collected, less often; nothing else changes.

Left as it is: the interpreter's own collections at exit, which take about as long. Skipping them
(``gc.freeze`` in a last exit handler) leaves every object that a reference cycle keeps alive unfinalised,
a module's globals among them, and so loses what an open file still buffers (tests/test_process.py shows it).
"""

from __future__ import annotations

import gc

FIRST_COLLECTION_AFTER = 50_000   # new container objects before the youngest generation is collected


def short_lived_process() -> None:
    """Apply the policy above to this process. Call it before the process's heavy imports: a stage script
    calls it first thing, the command line on entry."""
    gc.set_threshold(FIRST_COLLECTION_AFTER, *gc.get_threshold()[1:])
