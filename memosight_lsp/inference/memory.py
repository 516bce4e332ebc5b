"""Giving freed memory back to the system between model calls.

A prefill allocates and frees tens of megabytes of temporaries per layer (activations, the bf16
copies of int8 weights that many-row products use). glibc's allocator raises its mmap threshold
after such frees, so later temporaries come from its heaps, and the holes they leave stay
resident, raising the peak. Fixing the threshold instead returns them at once but makes every
temporary a fresh mapping, which slows prefills, so the worker trims when it goes idle instead
(`malloc_trim` takes milliseconds: never on a keystroke's path). Figures: docs/speculative.md.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging

log = logging.getLogger(__name__)


@functools.cache
def _malloc_trim():
    """glibc's malloc_trim, or None where the C library has none (macOS, musl, Windows)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_memory() -> bool:
    """Return the allocator's free pages to the system; whether anything was released."""
    trim = _malloc_trim()
    if trim is None:
        return False
    try:
        return bool(trim(0))
    except OSError as err:  # never worth failing a completion over
        log.debug("malloc_trim failed: %s", err)
        return False
