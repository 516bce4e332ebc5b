"""Something else using the CPU while a benchmark runs: N processes that spin at normal priority,
as a build or a test run beside the editor does (`--busy N` of the benchmarks that take it).
Processes, not threads: Python threads share one interpreter lock and would load one core."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

SPIN = "while True:\n    pass\n"


@contextlib.contextmanager
def busy(processes: int) -> Iterator[list[subprocess.Popen]]:
    """`processes` spinning processes for the duration of the block (none for 0)."""
    spinners = [
        subprocess.Popen(
            [sys.executable, "-c", SPIN], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for _ in range(max(0, processes))
    ]
    try:
        yield spinners
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait(timeout=10)
