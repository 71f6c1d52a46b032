"""Keep freed memory inside the process (glibc's malloc), so that CPU inference stops paying page faults.

PyTorch has no caching allocator on CPU: every tensor comes from malloc, and glibc serves large
blocks with fresh ``mmap`` pages and gives freed memory back to the kernel (``munmap``, or trimming the
top of the heap). The batched engine allocates and frees blocks of megabytes all the time (a group of
prompts' activations, the decoding buffers, the stored prompt keys/values), so each block's pages were
faulted in and zeroed by the kernel again. Keeping them cuts the page faults and the system time of a
batched run by about three quarters, the same games, the peak memory unchanged (``bench/play.py``; the
figures are in docs/benchmarks.md).

The settings are glibc's documented ``mallopt`` parameters, set once per process: blocks up to 32 MiB
(the largest value every glibc accepts) come from the heap, where freed ones are reused, and up to
1 GiB of free memory at the top of the heap stays mapped. Elsewhere (musl, macOS, Windows) nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 2**20
TRIM_THRESHOLD = 2**30

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Apply the two thresholds (once per process); True where glibc took them."""
    global _applied
    if _applied is None:
        _applied = False
        if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
            name = ctypes.util.find_library("c")
            try:
                libc = ctypes.CDLL(name) if name else None
            except OSError:
                libc = None
            if libc is not None and hasattr(libc, "mallopt"):
                _applied = bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
                    libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
                )
    return _applied
