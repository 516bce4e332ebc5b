"""`memosight bench compress` end to end on a tiny model: JSON shape, needle rows, plot."""

from __future__ import annotations

import json

import pytest
import torch
from tiny_models import STDLIB
from transformers import DynamicCache

from memosight_lsp.bench.compress import completed_line, edit_similarity, main, target_fit
from memosight_lsp.inference.compressed_decode import feed
from memosight_lsp.inference.loading import load_model


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
        "full@1x", "snapkv@2x", "truncate@2x", "summarize@2x", "snapkv@4x", "truncate@4x",
        "summarize@4x", "lossless-draft@4x"
    }  # fmt: skip
    assert result["nextLine"]["lossless-draft@4x"]["identical"] == 1.0
    full, small = result["nextLine"]["full@1x"], result["nextLine"]["snapkv@4x"]
    assert small["kvBytes"] < full["kvBytes"] / 2  # min_keep 64 of ~250 positions
    assert result["needle"]["truncate@4x"]["needleKept"] in (0.0, 1.0)
    assert result["needle"]["summarize@4x"]["needleKept"] in (0.0, 1.0)
    summarized = result["nextLine"]["summarize@4x"]
    assert summarized["kvBytes"] <= result["nextLine"]["truncate@4x"]["kvBytes"] * 1.1
    assert 0.0 < result["needle"]["snapkv@4x"]["needleKept"] < 1.0
    assert all(row["targetNll"] > 0 for row in result["nextLine"].values() if "targetNll" in row)
    accuracies = [row.get("targetTokenAccuracy") for row in result["nextLine"].values()]
    assert all(0.0 <= a <= 1.0 for a in accuracies if a is not None)
    assert {"full@1x", "snapkv@4x", "truncate@4x"} <= {
        name for name, row in result["nextLine"].items() if "targetNll" in row
    }
    assert (tmp_path / "compress.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "summary.json").read_text()) == result


def test_bench_reports_a_missing_model(tmp_path, capsys):
    assert main(["--model", str(tmp_path / "nope")]) == 2
    assert "not found" in capsys.readouterr().err


def test_target_fit_is_the_teacher_forced_loss_and_keeps_the_cache(tiny_model_dir):
    loaded = load_model(tiny_model_dir)
    model = loaded.model
    ids = loaded.tokenizer.encode((STDLIB / "textwrap.py").read_text())[:70]
    prompt, target = ids[:60], ids[60:70]
    cache = DynamicCache(config=model.config)
    logits = feed(model, prompt, cache, 0, last_only=True)[-1]
    fit = target_fit(model, logits, target, cache, len(prompt))
    assert cache.get_seq_length() == len(prompt)
    with torch.inference_mode():
        every = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)
    want = -every[59:69].gather(1, torch.tensor(target)[:, None]).mean()
    assert fit["targetNll"] == pytest.approx(float(want), rel=1e-4)
    top = every[59:69].argmax(dim=-1)
    share = float((top == torch.tensor(target)).float().mean())
    assert fit["targetTokenAccuracy"] == pytest.approx(share)
    # The model's own top choice scores 1, the token it ranks last 0.
    best = target_fit(model, logits, [int(logits.argmax())], cache, len(prompt))
    assert best["targetTokenAccuracy"] == 1.0
    assert best["targetNll"] == pytest.approx(float(-every[59].max()), rel=1e-4)
    worst = target_fit(model, logits, [int(logits.argmin())], cache, len(prompt))
    assert worst["targetTokenAccuracy"] == 0.0
    assert target_fit(model, logits, [], cache, len(prompt)) == {}
