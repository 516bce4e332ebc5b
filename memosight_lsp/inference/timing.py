"""Timing passes on the machine itself within a time budget (pass costs, row kernels).

Both are timed once per model and machine: a server takes them from the calibration cache
(inference/calibration_cache.py) or times them on its worker when it is idle after its first
answer, giving way to any request (`cancelled`, polled between passes). With the embedded model
a pass takes a few ms and every turn fits in the budget; a model a few hundred times bigger
takes a few hundred times longer a pass, and the same turns would take minutes. So a job first
times one pass and takes only the turns that fit its budget.
"""

from __future__ import annotations

from collections.abc import Callable

TIMING_BUDGET_S = 1.0  # per timing job
LARGER_PASSES = 2.0  # the passes of a turn average about this many times the first one's cost


def affordable_turns(
    one_pass_s: float, passes_per_turn: int, most: int, budget_s: float = TIMING_BUDGET_S
) -> int:
    """Turns of `passes_per_turn` passes (the first of them took `one_pass_s`) that fit the
    budget, at most `most`; 0 when not even one does."""
    per_turn = one_pass_s * LARGER_PASSES * passes_per_turn
    if per_turn <= 0:
        return most
    return max(0, min(most, int(budget_s / per_turn)))


class TimingCancelled(Exception):
    """A timing job stopped because its `cancelled()` turned true (a request came)."""


def check(cancelled: Callable[[], bool] | None) -> None:
    """Between two timed passes: raise TimingCancelled when the job should give way."""
    if cancelled is not None and cancelled():
        raise TimingCancelled
