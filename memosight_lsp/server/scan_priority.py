"""The model's work before the workspace scan's.

A scan (reading the index cache, parsing changed files, starting the folder's watcher) and the
model's load and requests all hold Python's GIL, so side by side each runs at about half speed:
in a project of a few thousand files the first suggestion after a start came seconds later
than with no folder open (docs/speculative.md, "A process's first prompt, and a project open").
So a scan starts once no load, request, request's decode or timing of the model (which a scan
beside it would skew, and the machine keeps) is running or queued, and while it runs it gives
way to one that comes, a time slice at a time. Every wait is bounded: a scan starts at the
latest START_WAIT_S after it was asked for, and each give-way lasts at most GIVE_WAY_S, so a
model that is never idle slows the scan down but cannot stop it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

START_WAIT_S = 30.0  # the longest a scan waits to start for a busy model
SLICE_S = 0.05  # a scan runs this long between two looks at the model
GIVE_WAY_S = 0.5  # the longest one give-way lasts
STOP_CHECK_S = 0.25  # a waiting scan sees the server stop within this


class ModelFirst:
    """`wait_calm(timeout)`: block until the model has no urgent work, at most `timeout`
    seconds, and say whether it has none (session/scheduler.py, `wait_calm`: it wakes once
    the worker is calm, not on a timer, so a waiting scan costs the model nothing); `stopped`:
    set when the server stops, which ends every wait within STOP_CHECK_S."""

    def __init__(self, wait_calm: Callable[[float], bool], stopped: threading.Event) -> None:
        self._wait_calm = wait_calm
        self._stopped = stopped
        self._ran_since = time.monotonic()

    def before_scan(self) -> float:
        """Wait until the model has no urgent work (at most START_WAIT_S): seconds waited."""
        waited = self._wait(START_WAIT_S)
        self._ran_since = time.monotonic()
        return waited

    def between_steps(self) -> None:
        """After SLICE_S of scanning, give way to the model's urgent work (at most GIVE_WAY_S)."""
        if time.monotonic() - self._ran_since < SLICE_S:
            return
        self._wait(GIVE_WAY_S)
        self._ran_since = time.monotonic()

    def _wait(self, limit_s: float) -> float:
        started = time.monotonic()
        deadline = started + limit_s
        while not self._stopped.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or self._wait_calm(min(STOP_CHECK_S, left)):
                break
        return time.monotonic() - started
