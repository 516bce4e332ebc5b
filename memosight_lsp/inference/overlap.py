"""Two parts of a model's load at once: a file read that leaves the GIL free, and work that
holds it.

Reading a model's kept weights is a copy from the page cache into memory torch allocated: the
system call runs without the GIL. Reading its kept tokenizer (`tokenizers`' Rust parser) holds
the GIL for the whole call. One after the other they add up; side by side, on two cores, the
load takes about as long as the longer of the two. `Deferred` is the tokenizer's load, run
once by whichever asks first; `read_meanwhile` runs the file read on a thread of its own and a
Deferred's work on the calling thread while the read runs.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")

# How long the caller waits for the reading thread to be inside its read before starting the
# work beside it anyway: the work holds the GIL, so it must start after the read released it.
READ_START_WAIT_S = 1.0
# The most buffers one preadv takes (Linux's IOV_MAX).
MAX_BUFFERS_PER_CALL = 1024


class Deferred(Generic[T]):
    """`make()` run at most once, on the first `run()` or `result()`; what it raised is raised
    again by every `result()`."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._done = False
        self._value: T | None = None
        self._error: BaseException | None = None

    def run(self) -> None:
        with self._lock:
            if self._done:
                return
            try:
                self._value = self._make()
            except BaseException as err:  # kept for result(): raised where the value is needed
                self._error = err
            self._done = True

    def result(self) -> T:
        self.run()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


def read_into(fd: int, buffers: Sequence[memoryview], offset: int) -> int:
    """Fill `buffers` in order from the file's bytes at `offset` (scatter reads, the GIL free
    during each); the number of bytes read, short only at the end of the file."""
    total = 0
    views = [memoryview(buffer).cast("B") for buffer in buffers if buffer.nbytes]
    scatter = getattr(os, "preadv", None) or _read_one_by_one  # no preadv: Windows, old macOS
    while views:  # every call reads at least one byte or ends the loop: bounded by the size
        count = scatter(fd, views[:MAX_BUFFERS_PER_CALL], offset + total)
        if count <= 0:
            break
        total += count
        while views and count >= views[0].nbytes:
            count -= views[0].nbytes
            views.pop(0)
        if views and count:
            views[0] = views[0][count:]
    return total


def _read_one_by_one(fd: int, views: Sequence[memoryview], offset: int) -> int:
    """preadv's result where the system has none: the buffers filled in turn from `offset`."""
    os.lseek(fd, offset, os.SEEK_SET)
    with open(fd, "rb", buffering=0, closefd=False) as handle:
        total = 0
        for view in views:
            count = handle.readinto(view) or 0
            total += count
            if count < view.nbytes:
                break
    return total


def read_meanwhile(
    fd: int, buffers: Sequence[memoryview], offset: int, meanwhile: Callable[[], None] | None
) -> int:
    """`read_into` on a thread of its own while `meanwhile()` runs on this one (it must not
    raise: a Deferred's run keeps its error); without `meanwhile`, just the read."""
    if meanwhile is None:
        return read_into(fd, buffers, offset)
    reading = threading.Event()
    outcome: list[int | BaseException] = []

    def read() -> None:
        reading.set()
        try:
            outcome.append(read_into(fd, buffers, offset))
        except BaseException as err:  # raised again on the caller's thread
            outcome.append(err)

    thread = threading.Thread(target=read, name="memosight-weights-read", daemon=True)
    thread.start()
    reading.wait(READ_START_WAIT_S)
    meanwhile()
    thread.join()
    result = outcome[0] if outcome else OSError("the weights' read ended without a result")
    if isinstance(result, BaseException):
        raise result
    return result
