"""The machine measurements are made on: what it is (the key cached measurements are kept
under) and how busy other processes kept it while something was timed.

Timings taken while another job runs beside them (a build, a test run) can be many times the
real cost. Taking the fastest of several repeats removes short interruptions, not a job that
keeps the cores busy for the whole measurement; so a measurement also records the CPU time that
other processes used meanwhile (from /proc/stat, on Linux), and a caller can refuse to keep one
taken on a busy machine.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import torch

BUSY_CORES = 0.5  # other processes using more than this many cores on average: a busy machine


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_key() -> str:
    """The CPU model, torch's thread count and the torch version: what timings depend on."""
    return f"{cpu_name()}|{torch.get_num_threads()} threads|torch {torch.__version__}"


def load_average() -> float | None:
    """The one-minute load average (None where the system has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


@dataclass(frozen=True)
class _Sample:
    wall: float
    busy_ticks: int | None  # every process's CPU time, in clock ticks (None: not on Linux)
    own_ticks: int | None  # this process's


class OtherLoad:
    """Cores other processes kept busy between its making and `cores()` (None where /proc is
    not there to tell)."""

    def __init__(self) -> None:
        self._start = _sample()

    def seconds(self) -> float:
        """Wall time since it was made."""
        return time.monotonic() - self._start.wall

    def cores(self) -> float | None:
        end = _sample()
        if None in (self._start.busy_ticks, end.busy_ticks, self._start.own_ticks, end.own_ticks):
            return None
        assert self._start.busy_ticks is not None and end.busy_ticks is not None
        assert self._start.own_ticks is not None and end.own_ticks is not None
        seconds = end.wall - self._start.wall
        if seconds <= 0:
            return None
        others = (end.busy_ticks - self._start.busy_ticks) - (end.own_ticks - self._start.own_ticks)
        return round(max(0, others) / _ticks_per_second() / seconds, 2)


def _ticks_per_second() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return 100


def _sample() -> _Sample:
    wall = time.monotonic()
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
        # cpu user nice system idle iowait irq softirq steal ...: busy is all but idle + iowait
        values = [int(v) for v in fields[1:9]]
        busy = sum(values) - values[3] - values[4]
        own = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        mine = int(own[11]) + int(own[12])  # utime, stime (fields 14 and 15)
    except (OSError, ValueError, IndexError):
        return _Sample(wall, None, None)
    return _Sample(wall, busy, mine)
