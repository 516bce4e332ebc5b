"""A short typing soak against the real server: every request answered or cancelled, no error,
threads and file descriptors flat (the 20-minute run is `make soak ARGS="--minutes 20"`)."""

from __future__ import annotations

import pytest

from tools.reliability import soak

pytestmark = pytest.mark.slow


def test_a_short_typing_soak_answers_or_cancels_every_request(tiny_model_dir):
    args = soak.build_parser().parse_args(
        ["--model", str(tiny_model_dir), "--minutes", "0.2", "--interval", "3", "--files", "4"]
    )
    result = soak.run(args)
    summary = result["summary"]
    assert summary["requests"] >= 40  # 8 keys/s, minus the pauses to read
    assert summary["unanswered"] == 0
    assert summary["errors"] == 0
    assert summary["answered"] + summary["cancelled"] == summary["requests"]
    assert summary["answered"] > 0
    low, high = summary["threads"]
    assert high - low <= 1
    assert summary["fds"][1] - summary["fds"][0] <= 1
    assert result["serverStats"]["result"]["errors"] == 0
