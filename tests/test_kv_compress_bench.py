"""`memosight bench compress` end to end on a tiny model: JSON shape, needle rows, plot."""

from __future__ import annotations

import json

import pytest

from memosight_lsp.bench.compress import completed_line, edit_similarity, main


def test_edit_similarity_and_completed_line():
    assert edit_similarity("abc", "abc") == 1.0
    assert edit_similarity("abc", "abd") == pytest.approx(2 / 3)
    assert edit_similarity("", "") == 1.0
    assert completed_line("\n    return x\n", next_line=True) == "return x"
    assert completed_line("\n    return x", next_line=True) is None  # not finished yet
    assert completed_line("_name(a)\n", next_line=False) == "_name(a)"


@pytest.mark.slow
def test_bench_runs_and_writes_plots(tiny_model_dir, tmp_path, capsys):
    argv = ["--model", str(tiny_model_dir), "--samples", "2", "--needles", "1"]
    argv += ["--min-tokens", "200", "--max-tokens", "400", "--ratios", "2,4", "--threads", "1"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["samples"] == 2 and result["needles"] == 1
    assert set(result["nextLine"]) == {
        "full@1x", "snapkv@2x", "truncate@2x", "snapkv@4x", "truncate@4x", "lossless-draft@4x"
    }  # fmt: skip
    assert result["nextLine"]["lossless-draft@4x"]["identical"] == 1.0
    full, small = result["nextLine"]["full@1x"], result["nextLine"]["snapkv@4x"]
    assert small["kvBytes"] < full["kvBytes"] / 2  # min_keep 64 of ~250 positions
    assert result["needle"]["truncate@4x"]["needleKept"] in (0.0, 1.0)
    assert 0.0 < result["needle"]["snapkv@4x"]["needleKept"] < 1.0
    assert (tmp_path / "compress.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "summary.json").read_text()) == result


def test_bench_reports_a_missing_model(tmp_path, capsys):
    assert main(["--model", str(tmp_path / "nope")]) == 2
    assert "not found" in capsys.readouterr().err
