"""The one percentile of every report (session/stats.py): nearest rank."""

from __future__ import annotations

import pytest

from memosight_lsp.bench.replay import latency_summary
from memosight_lsp.session.stats import percentile


@pytest.mark.parametrize(
    ("count", "q", "expected"),
    [
        (10, 90, 9),  # of 10 values p90 is the 9th: 9 of 10 are at or below it
        (10, 50, 5),
        (12, 90, 11),
        (20, 95, 19),
        (100, 7, 7),  # 0.07 * 100 is 7.000...01 in floating point: still the 7th
        (3, 99, 3),
        (1, 50, 1),
        (5, 0, 1),
        (5, 100, 5),
    ],
)
def test_the_nearest_rank(count: int, q: float, expected: int) -> None:
    values = [float(v) for v in range(count, 0, -1)]  # unsorted on purpose
    assert percentile(values, q) == expected


def test_no_values_have_no_percentile() -> None:
    assert percentile([], 50) is None


def test_a_reports_maximum_is_rounded_as_its_percentiles() -> None:
    # a max rounded coarser than p90 once read 49.5 beside a p90 of 49.536 (CI, stop 37)
    summary = latency_summary([12.0, 49.536, 30.25])
    assert summary["p50Ms"] <= summary["p90Ms"] <= summary["maxMs"] == 49.536
