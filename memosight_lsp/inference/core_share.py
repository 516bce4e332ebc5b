"""How many threads the model runs on: the cores other processes leave free, up to torch's count.

torch's OpenMP threads wait for each other at every operation, spinning for a while before they
sleep. When another job keeps the cores busy (a build, a test run beside the editor), one of the
model's threads is often descheduled and the others spin through their time slices waiting for
it: a pass can take several times as long as on one thread. So before each request the server
looks at how much CPU time other processes used since the last look (/proc/stat, on Linux) and
runs on the cores they leave; with the machine to itself it runs on all of torch's threads
(spinning is what makes small passes fast). docs/latency.md has the measurements.

A thread is given up when other processes take more than half of its core and taken back when
they take at most a quarter, so a load near the line does not flip the count at every request;
and only when two windows in a row (each at least MIN_WINDOW_S: fewer clock ticks tell nothing)
say so, so a burst of another process does not either. The kept KV caches stay in use across a
change: a cache computed under another thread count differs from a fresh one in the last bits,
as a cache prefilled in other chunks does.
"""

from __future__ import annotations

import logging
import os

import torch

from memosight_lsp.inference.machine import OtherLoad

log = logging.getLogger(__name__)

MIN_WINDOW_S = 0.3
FIRST_WINDOW_S = 2.0  # a first window this long decides alone
DOWN_SHARE = 0.5  # a thread is given up when more than half of its core is taken
UP_SHARE = 0.25  # ... and taken back when at most a quarter of it is


def threads_left(others: float, cpus: int, most: int, current: int) -> int:
    """The model's thread count when other processes use `others` of `cpus` cores, torch
    allowing `most` threads and `current` running now: the free cores' share of `most`,
    rounded (down past half a thread), and taken back up only once at most UP_SHARE of a
    thread is missing."""
    target = max(0.0, cpus - others) * most / cpus
    rounded = max(1, min(most, int(target + DOWN_SHARE)))
    if rounded > current:
        return max(current, min(most, int(target + UP_SHARE)))
    return rounded


class CoreShare:
    """Sets torch's thread count for the calling thread (OpenMP keeps it per thread: call it on
    the thread that runs the model) from the other processes' load since the last call."""

    def __init__(
        self,
        most: int | None = None,
        cpus: int | None = None,
        since: OtherLoad | None = None,
    ) -> None:
        """`since`: the first window's start (the server passes the model load's, so the first
        request already knows how busy the machine was while it loaded)."""
        self.most = most or torch.get_num_threads()
        self.cpus = cpus or os.cpu_count() or 1
        self.threads = self.most
        self.others = 0.0  # cores other processes used in the last window measured
        self._wanted: int | None = None  # the count the last window asked for
        self._window = since or OtherLoad()

    def adjust(self) -> bool:
        """Pick the thread count for the next request; True when it changed."""
        if self._window.seconds() < MIN_WINDOW_S:
            self._apply()
            return False
        seconds, others = self._window.seconds(), self._window.cores()
        self._window = OtherLoad()
        if others is None:  # no /proc: nothing to go by
            return False
        self.others = others
        wanted = threads_left(others, self.cpus, self.most, self.threads)
        # A change takes two windows in a row that agree (a burst of another process, the
        # editor or a linter run, must not move the count back and forth), or a first window
        # long enough that no burst dominates it.
        first = self._wanted is None and seconds >= FIRST_WINDOW_S
        agreed, self._wanted = wanted == self._wanted or first, wanted
        changed = wanted != self.threads and agreed
        if changed:
            log.info(
                "other processes use %.1f of %d cores: the model runs on %d thread(s)",
                others,
                self.cpus,
                wanted,
            )
            self.threads = wanted
        self._apply()
        return changed

    def _apply(self) -> None:
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
