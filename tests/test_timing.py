"""Timing jobs stay within their budget on slow models (pass costs, row kernels)."""

from __future__ import annotations

import time

from memosight_lsp.inference.drafters import CostModel
from memosight_lsp.inference.row_kernels import COPY, FEW_ROWS, LINEAR, TRANSPOSED, RowKernels
from memosight_lsp.inference.timing import affordable_turns


def test_affordable_turns():
    # A 2 ms pass, 6 passes a turn (counted 2x for the larger ones): 41 turns fit 1 s.
    assert affordable_turns(0.002, 6, most=12) == 12
    assert affordable_turns(0.002, 6, most=100) == 41
    assert affordable_turns(0.1, 6, most=12) == 0  # 1.2 s for one turn
    assert affordable_turns(0.1, 6, most=12, budget_s=5.0) == 4
    assert affordable_turns(0.0, 6, most=3) == 3


def slow_run(seconds: float, calls: list):
    def run(*args) -> None:
        calls.append(args)
        time.sleep(seconds)

    return run


def test_a_slow_model_gets_one_turn_of_pass_costs():
    calls: list = []
    sizes = (1, 2, 4, 8, 16, 32)
    cost = CostModel.calibrate(slow_run(0.1, calls), sizes=sizes, repeats=12)
    assert len(calls) == 1 + len(sizes)  # the warm-up, then one turn instead of twelve
    assert set(cost.costs) == set(sizes) and all(v >= 100 for v in cost.costs.values())


def test_a_slow_model_skips_row_kernel_timing():
    calls: list = []
    kernels = RowKernels.timed(slow_run(0.06, calls), [LINEAR, TRANSPOSED, COPY])
    assert calls == [(1, LINEAR)]
    assert kernels.chosen[1:] == (LINEAR,) * FEW_ROWS
    fast: list = []
    RowKernels.timed(slow_run(0.0, fast), [LINEAR, TRANSPOSED], repeats=2)
    assert len(fast) == 1 + 7 * 2 * (1 + 2)  # probe, then per row count: warm-up + 2 turns
