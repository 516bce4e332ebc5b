"""Freed memory handed back to the system (inference/memory.py), measured on this process."""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

import pytest

from memosight_lsp.inference.memory import release_free_memory


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


@pytest.mark.skipif(
    platform.system() != "Linux" or ctypes.util.find_library("c") is None,
    reason="glibc's malloc_trim",
)
def test_freed_heap_holes_are_returned():
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    # Small blocks come from the heap; freeing all but a last one leaves a hole the heap's
    # own trimming (top of the heap only) cannot give back.
    size, count = 64 * 1024 - 64, 1600  # ~100 MB, each under the mmap threshold
    blocks = [libc.malloc(size) for _ in range(count)]
    for block in blocks:
        libc.memset(block, 1, size)
    keep = libc.malloc(size)
    for block in blocks:
        libc.free(block)
    before = resident_bytes()
    assert release_free_memory()
    after = resident_bytes()
    libc.free(keep)
    assert before - after > 50 * 1024 * 1024
