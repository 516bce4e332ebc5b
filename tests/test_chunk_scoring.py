"""Model-scored chunk ranking: exact perplexity arithmetic, ordering, and a real-model check."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from memosight_lsp.inference.chunk_scoring import ChunkScorer, rerank, text_scorer
from memosight_lsp.inference.loading import EMBEDDED_MODEL_DIR, load_model


def test_nll_matches_a_full_forward(tiny_model_dir):
    loaded = load_model(tiny_model_dir, device="cpu")
    scorer = ChunkScorer(loaded.model)
    context = loaded.tokenizer.encode("def add(a, b):\n    return a + b\n")
    target = loaded.tokenizer.encode("x = add(1, 2)\n")
    with torch.inference_mode():
        logits = loaded.model(input_ids=torch.tensor([context + target])).logits[0]
    rows = logits[len(context) - 1 : len(context) + len(target) - 1]
    want = float(F.cross_entropy(rows.float(), torch.tensor(target)))
    assert scorer.nll(context, target) == pytest.approx(want, rel=1e-5)


def test_scores_are_gains_over_no_context(tiny_model_dir):
    loaded = load_model(tiny_model_dir, device="cpu")
    scorer = ChunkScorer(loaded.model)
    encode = loaded.tokenizer.encode
    chunks = [encode("import os\n"), encode("class Point:\n    x: int\n")]
    target = encode("p = Point(x=1)\n")
    scores = scorer.score(chunks, target)
    baseline = scorer.nll([], target)
    assert scores == pytest.approx([baseline - scorer.nll(c, target) for c in chunks])
    assert scorer.score(chunks, []) == [0.0, 0.0]
    local = encode("def make():\n")
    with_local = scorer.score(chunks, target, local)
    base = scorer.nll(local, target)
    assert with_local == pytest.approx([base - scorer.nll(c + local, target) for c in chunks])


def test_rerank_orders_by_score_stably():
    table = {"a": 0.1, "b": 0.5, "c": 0.1, "d": -1.0}

    def scorer(texts, target):
        return [table[t] for t in texts]

    assert rerank(["a", "b", "c", "d"], "t", scorer) == [1, 0, 2, 3]
    assert rerank(["a", "b", "c", "d"], "t", scorer, keep=2) == [1, 0]


def trained_model_dir() -> Path | None:
    """MEMOSIGHT_TEST_MODEL (a trained model folder), else the embedded model."""
    extra = os.environ.get("MEMOSIGHT_TEST_MODEL")
    for folder in (*([Path(extra)] if extra else []), EMBEDDED_MODEL_DIR):
        if (folder / "config.json").is_file() and (folder / "tokenizer.json").is_file():
            return folder
    return None


# The shipped model after 18M tokens: the needed chunk lowers the target's loss by 1.94
# nats/token, an unrelated one by 0.14 (at 5M tokens it was 0.022 vs 0.030: no induction yet).
@pytest.mark.skipif(trained_model_dir() is None, reason="needs a trained model")
def test_a_trained_model_prefers_the_chunk_the_target_repeats():
    """Copying from context (induction) is the most robust thing even a small model learns."""
    loaded = load_model(trained_model_dir(), device="cpu")
    score = text_scorer(ChunkScorer(loaded.model), loaded.tokenizer.encode)
    body = (
        "    for level in range(depth):\n"
        "        widget = frobnicate_widget(widget, level, strict=True)\n"
        "    return widget.finish(depth)\n"
    )
    needed = "def deepen_once(widget, depth):\n" + body
    unrelated = (
        "import json\n\nDEFAULT_TIMEOUT = 30\nLOG_FORMAT = '%(message)s'\n\n"
        "def load(path):\n    with open(path) as f:\n        return json.load(f)\n"
    )
    target = "def deepen_twice(widget, depth):\n" + body
    assert rerank([unrelated, needed], target, score) == [1, 0]
