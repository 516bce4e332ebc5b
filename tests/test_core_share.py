"""The model's thread count follows the cores other processes leave free (inference/core_share.py):
the rule, and real spinning processes lowering it."""

from __future__ import annotations

import sys
import time

import pytest
import torch

from memosight_lsp.bench.busy import busy
from memosight_lsp.inference.core_share import (
    FIRST_WINDOW_S,
    MIN_WINDOW_S,
    CoreShare,
    threads_left,
)
from memosight_lsp.inference.machine import BUSY_CORES, OtherLoad


@pytest.mark.parametrize(
    ("others", "cpus", "most", "current", "want"),
    [
        (0.0, 2, 2, 2, 2),  # the machine to itself: every thread
        (0.4, 2, 2, 2, 2),  # less than half a core taken: kept
        (0.6, 2, 2, 2, 1),  # more than half: given up
        (2.0, 2, 2, 2, 1),  # a build on every core: one thread, never none
        (0.4, 2, 2, 1, 1),  # not back up while more than a quarter core is taken
        (0.2, 2, 2, 1, 2),  # back up once the load is gone
        (8.0, 16, 8, 8, 4),  # 8 physical cores, 16 logical: half of them taken
        (0.0, 16, 8, 4, 8),
        (0.0, 1, 1, 1, 1),
    ],
)
def test_threads_left(others, cpus, most, current, want):
    assert threads_left(others, cpus, most, current) == want


def test_the_count_moves_only_by_the_hysteresis_band():
    """Any load: the count stays within 1..most, and a load between the two lines never
    changes it, from either side."""
    for current in (1, 2):
        for tenths in range(0, 41):
            got = threads_left(tenths / 10, 2, 2, current)
            assert 1 <= got <= 2
            if 0.25 < tenths / 10 <= 0.5:
                assert got == current


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/stat")
def test_processes_spinning_beside_the_model_take_its_threads():
    before = torch.get_num_threads()
    share = CoreShare(most=2, cpus=2)
    try:
        assert not share.adjust()  # too short a window to tell anything
        with busy(2):
            time.sleep(MIN_WINDOW_S * 2)
            assert not share.adjust()  # one busy window: a burst, perhaps
            assert share.threads == 2
            time.sleep(MIN_WINDOW_S * 2)
            assert share.adjust()  # two in a row: a build
        assert share.threads == 1 and torch.get_num_threads() == 1
        assert share.others > BUSY_CORES  # the server puts its timings off meanwhile
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/stat")
def test_a_long_first_window_decides_alone():
    """The server starts the first window when the model starts loading: a build running all
    along gives its first request fewer threads already."""
    before = torch.get_num_threads()
    try:
        with busy(2):
            share = CoreShare(most=2, cpus=2, since=OtherLoad())
            time.sleep(FIRST_WINDOW_S + 0.2)
            assert share.adjust() and share.threads == 1
    finally:
        torch.set_num_threads(before)
