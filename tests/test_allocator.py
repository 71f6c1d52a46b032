"""spag.harness.allocator: freed blocks are reused inside the process instead of faulted in again."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# Allocate and free one 30 MB tensor; print, from glibc's own counters, how much of it was a separate
# mmap (given back to the kernel when freed) and how much free memory its release added to the heap
# (counted from while it was held: a block carved partly from free memory already there would otherwise
# count short, as it does where the import left a different heap behind, e.g. without .pyc files).
WORKLOAD = """
import ctypes, sys, torch
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                               "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "keep":
    from spag.harness.allocator import keep_freed_memory
    assert keep_freed_memory()
before = libc.mallinfo2()
block = torch.ones(30 * 2**20 // 4)
during = libc.mallinfo2()
del block
after = libc.mallinfo2()
print(during.hblkhd - before.hblkhd, after.fordblks - during.fordblks)
"""
BLOCK = 30 * 2**20


def _glibc_counts(mode: str) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", WORKLOAD, mode], capture_output=True, text=True, check=True)
    mmapped, kept = out.stdout.split()[-2:]
    return int(mmapped), int(kept)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's (mallinfo2)")
@pytest.mark.slow
def test_freed_blocks_stay_in_the_heap_for_reuse():
    mmapped, kept = _glibc_counts("plain")
    assert mmapped >= BLOCK and kept < BLOCK  # glibc's default: its own mmap, unmapped when freed
    mmapped, kept = _glibc_counts("keep")
    assert mmapped == 0 and kept >= BLOCK  # from the heap, and still there to be reused


@pytest.mark.slow
def test_the_library_leaves_the_process_alone_and_the_spag_command_opts_in(tmp_path):
    """The thresholds are process-wide: a program that uses the hf player as a library keeps glibc's own
    (checked in a fresh process), while the `spag` command and the pipeline's stages, which own their
    process, set them when they start."""
    code = f"""
import spag.harness.allocator as a
from spag.players import load_player
from spag.testing import make_tiny_checkpoint
player = load_player(str(make_tiny_checkpoint({str(tmp_path / "ckpt")!r})), "hf", device="cpu")
player.generate(["Say a word."], temperature=0, max_new_tokens=2)
print("library", a._applied)
import spag.cli
try:
    spag.cli.main(["--help"])
except SystemExit:
    pass
print("command", a._applied)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    said = dict(line.split() for line in out.stdout.splitlines() if line.startswith(("library ", "command ")))
    library, command = said["library"], said["command"]
    assert library == "None"
    assert command == str(platform.libc_ver()[0] == "glibc")
