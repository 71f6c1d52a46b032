"""What a process that spag owns (a pipeline stage, the ``spag`` command, a launched training process)
does at its start and at its end.

**The garbage collector.** Such a process imports torch and transformers: some half a million objects that
live until it exits. CPython collects its youngest generation after every 700 new objects, the middle one
every tenth time and, at most, everything every hundredth, so the collector walks the imported objects again
and again while they are imported and while the work runs, and finds nothing to free: about a second of every
stage (docs/benchmarks.md has the figures). :func:`short_lived_process` makes the first collection wait for
50,000 new objects instead. Garbage is still collected, less often; nothing else changes.

Left as it is: the interpreter's own collections at exit, which take about as long. Skipping them
(``gc.freeze`` in a last exit handler) leaves every object that a reference cycle keeps alive unfinalised,
a module's globals among them, and so loses what an open file still buffers; freezing only what the imports
made loses it too, for a file a module global holds (tests/test_process.py shows both).

**The process group.** The processes a launcher starts (``torchrun``) join a torch.distributed group; two
gloo processes that exit at the same moment with their group still open abort about every second time
("terminate called without an active exception", SIGABRT) in torch 2.13, after all their work is done.
:func:`leave_process_group_at_exit` closes the group first.
"""

from __future__ import annotations

import atexit
import gc
import sys

FIRST_COLLECTION_AFTER = 50_000   # new container objects before the youngest generation is collected


def short_lived_process() -> None:
    """Apply the policy above to this process. Call it before the process's heavy imports: a stage script
    calls it first thing, the command line on entry."""
    gc.set_threshold(FIRST_COLLECTION_AFTER, *gc.get_threshold()[1:])


def leave_process_group_at_exit() -> None:
    """Close this process's torch.distributed group, if it joined one, when it exits: call it in a process
    that a launcher starts (an entry point, not a library function: a process may train more than once)."""
    atexit.register(_leave_process_group)


def _leave_process_group() -> None:
    distributed = sys.modules.get("torch.distributed")  # a process that never imported torch joined no group
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        distributed.destroy_process_group()
