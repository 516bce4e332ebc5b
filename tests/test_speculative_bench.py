"""`memosight bench speed` runs end to end on a tiny model and reports identical outputs."""

from __future__ import annotations

import json
import time

import pytest

from memosight_lsp.bench import speed


def test_bench_speed_json_and_plot(tiny_model_dir, tmp_path, capsys):
    files = [str(path) for path in speed.default_files()[:4]]
    assert files and not any("/lib/python3" in f and "site-packages" not in f for f in files)
    plot = tmp_path / "speed.png"
    argv = ["--model", str(tiny_model_dir), "--files", *files, "--samples", "3", "--repeats", "2"]
    code = speed.main([*argv, "--max-new-tokens", "12", "--ablate", "--json", "--plot", str(plot)])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    summary = report["summary"]
    assert summary["samples"] == len(report["samples"]) == 3
    assert summary["identical"] == 1.0
    assert summary["timeToFirstToken"]["tokensPrefilledAfterEdit"] <= 3
    assert summary["peakRssMiB"] > 0
    # The server's precision by default (auto: a model this small stays float32), said so.
    assert summary["precision"] == "float32" and summary["precisionReason"]
    assert "prompt" in summary["bySourceAlone"]
    assert "samples" in summary["typeThrough"]
    assert summary["timeToFirstTokenFim"]["promptTokens"] > 0
    assert plot.stat().st_size > 1000


def test_fastest_keeps_the_quickest_run_and_checks_the_tokens():
    delays = iter([0.03, 0.0, 0.02])

    def slow_then_fast() -> list[int]:
        time.sleep(next(delays))
        return [1, 2]

    best = speed.fastest({"a": slow_then_fast, "b": lambda: [3]}, 3)
    assert best["a"][0] == [1, 2] and best["a"][1] < 0.015 and best["b"][0] == [3]
    outputs = iter([[1], [2]])
    with pytest.raises(AssertionError, match="different tokens"):
        speed.fastest({"c": lambda: next(outputs)}, 2)


def test_bench_speed_rejects_missing_files(tiny_model_dir, capsys):
    assert speed.main(["--model", str(tiny_model_dir), "--files", "/nonexistent.py"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_bench_model_compares_speculative_with_plain_in_the_same_precision(tiny_model_dir, capsys):
    from memosight_lsp.bench import model_quality

    argv = ["--model", str(tiny_model_dir), "--cases", "6", "--speculative", "--dtype", "float32"]
    assert model_quality.main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["model"]["precision"] == "float32"
    for corpus in report["next_line"].values():
        for prompt in ("with_suffix_fim", "prefix_only"):
            result = corpus[prompt]
            assert result["identical_to_plain"] == 1.0  # float32: token for token
            assert result["speculative"]["exact_match"] == result["exact_match"]
