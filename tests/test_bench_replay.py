"""memosight bench replay: its acceptance rules, and one short body typed end to end through the
real server with a tiny model (about 15 s)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memosight_lsp.bench.replay import accepted_part, keystroke_units, sample_targets

ROOT = Path(__file__).resolve().parent.parent


def test_a_newline_keystroke_brings_the_indentation():
    assert keystroke_units("ab\n    c\n\nd") == ["a", "b", "\n    ", "c", "\n", "\n", "d"]


@pytest.mark.parametrize(
    ("suggestion", "remaining", "accepted"),
    [
        ("x + 1)\n", "x + 1)\n    return y", "x + 1)\n"),  # exactly what comes next
        ("x + 1)\n    return z", "x + 1)\n    return y", "x + 1)"),  # its line completes it
        ("x + 1)\n    z", "x + 1)  # c\n", None),  # its line goes on: not a whole line
        ("y", "x + 1", None),
        ("", "x", None),
        (None, "x", None),
        ("x + 1", "x + 1", "x + 1"),  # the end of the body
    ],
)
def test_what_one_keystroke_accepts(suggestion, remaining, accepted):
    assert accepted_part(suggestion, remaining) == accepted


def test_targets_are_seeded():
    first, again = sample_targets(2, 0), sample_targets(2, 0)
    assert [t.label for t in first] == [t.label for t in again] and len(first) == 2


@pytest.mark.slow
def test_one_body_typed_through_the_server(tiny_model_dir, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    settings = json.dumps({"completion": {"maxNewTokens": 8}})
    command = [
        sys.executable,
        "-m",
        "memosight_lsp.bench.replay",
        *("--model", str(tiny_model_dir), "--functions", "1", "--threads", "1"),
        *("--keystroke-ms", "0", "--open-pause-ms", "0", "--max-seconds", "240"),
        *("--settings", settings, "--plot", str(tmp_path / "plot.png")),
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=480)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    ours = result["memosight"]
    assert ours["functions"] == 1 and ours["cutOff"] == 0
    assert ours["charactersTyped"] == ours["characters"] > 0
    # Every keystroke asked for a suggestion (and the first, at the body's start).
    assert ours["requests"] == ours["keystrokes"] + 1
    assert ours["modelCalls"] + ours["typeThroughHits"] >= ours["requests"] - 1
    assert ours["prewarms"] >= 1 and ours["prewarmedTokens"] > 0  # the file was opened
    assert 0 <= ours["savedShare"] <= 1
    assert ours["p50Ms"] <= ours["p90Ms"] <= ours["maxMs"]
    budget = ours["latencyBudget"]
    assert budget["firstResponseMs"] == 300 and budget["prefillRate"]["samples"] >= 1
    row = result["perFunction"]["memosight"][0]
    assert row["function"] == result["functions"][0] and row["keystrokes"] == ours["keystrokes"]
    assert (tmp_path / "plot.png").stat().st_size > 0
