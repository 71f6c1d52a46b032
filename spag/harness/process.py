"""What a process that spag owns (a pipeline stage, the ``spag`` command, a launched training process)
does at its start and at its end.

**The garbage collector.** Such a process imports torch and transformers: some half a million objects that
live until it exits. CPython collects its youngest generation after every 700 new objects, the middle one
every tenth time and, at most, everything every hundredth, so the collector walks the imported objects again
and again while they are imported and while the work runs, and finds nothing to free: about a second of every
stage (docs/benchmarks.md has the figures). :func:`short_lived_process` makes the first collection wait for
50,000 new objects instead. Garbage is still collected, less often; nothing else changes.

**The end.** Once its work is done, such a process spends about a second tearing down the modules it
imported: torch deregisters each of its operator libraries as it goes, recomputing its dispatch tables every
time, and the interpreter walks half a million objects. :func:`end_process` ends it without that teardown,
after doing what the teardown would do for the process's results: other threads are waited for, the exit
handlers run, what reference cycles still hold is finalised, every file still open is closed (a file a
module global keeps open, whose buffer a plain ``os._exit`` would lose: tests/test_process.py), and the C
library's streams are flushed (what C code printed into a pipe). Freezing the
collector at exit instead (``gc.freeze``) loses such a buffer, and saves less.

**The process group.** The processes a launcher starts (``torchrun``) join a torch.distributed group; two
gloo processes that exit at the same moment with their group still open abort about every second time
("terminate called without an active exception", SIGABRT) in torch 2.13, after all their work is done.
:func:`leave_process_group_at_exit` closes the group first. Closing it is not enough where other C++
objects (DeepSpeed's, gloo's) outlive it: their destructors, run by the C library's exit, abort the same way
now and then. A launched process therefore also ends through :func:`end_process`, which never runs them.
"""

from __future__ import annotations

import _io
import atexit
import contextlib
import ctypes
import gc
import io
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

FIRST_COLLECTION_AFTER = 50_000  # new container objects before the youngest generation is collected


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


def end_process(main: Callable[[], object]) -> NoReturn:
    """Run ``main`` (a process's entry point) and end the process with its exit status, without tearing
    its modules down (see above). The status is that of a ``SystemExit`` out of ``main`` (0 when it
    returns), as the interpreter reads it; any other exception goes up unchanged, to the interpreter's
    usual traceback and exit. Only for an entry point: nothing after it runs."""
    try:
        main()
        status = 0
    except SystemExit as exc:
        status = _exit_status(exc.code)
    _finish()
    os._exit(status)


def _exit_status(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # SystemExit("message"): the message, status 1
    return 1


def _finish() -> None:
    """What the interpreter's own exit does before tearing the modules down, in its order, and the files.

    The open files are gathered before the collection: a reference cycle's objects are finalised in no
    set order, and a text file finalised after the file under it loses what it buffered (in CPython's own
    exit too, and at any collection). Held here, they outlive it and are closed after it, each text layer
    before the file under it. Last, the C library's own buffered streams."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # the interpreter's exit handlers, run as it runs them at exit
    standard = _standard_streams()
    files = _open_files({id(s) for s in standard})
    gc.collect()
    for stream in files:
        with contextlib.suppress(Exception):  # as at teardown, where a failing close is ignored
            stream.close()
    for stream in standard:
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: what it held cannot be written anyway
            stream.flush()
    _flush_c_streams()


def _flush_c_streams() -> None:
    """What C code wrote through the C library's buffered streams (its stdout into a pipe, a file it keeps
    open): flushed by the C library's exit, which ``os._exit`` skips."""
    with contextlib.suppress(OSError, AttributeError):  # no C library to load by that name: nothing to flush
        ctypes.CDLL(None).fflush(None)


def _standard_streams() -> list:
    """sys.stdout and the others, with the binary files under them."""
    found = []
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__, sys.stdin, sys.__stdin__):
        while stream is not None and all(stream is not seen for seen in found):
            found.append(stream)
            stream = getattr(stream, "buffer", None) or getattr(stream, "raw", None)
    return found


def _open_files(skip: set[int]) -> list:
    """Every open file object but those in ``skip`` (ids), text layers before the binary files under them."""
    objects = gc.get_objects()
    # The C base class of every file object (io.IOBase is an ABC: asked of each type, ten times slower).
    kinds = {kind for kind in {type(o) for o in objects} if issubclass(kind, _io._IOBase)}
    found = [o for o in objects if type(o) in kinds and id(o) not in skip and _is_open(o)]
    return sorted(found, key=lambda o: not isinstance(o, io.TextIOBase))


def _is_open(stream) -> bool:
    try:
        return not stream.closed
    except Exception:  # noqa: BLE001  (a wrapper whose file is gone)
        return False
