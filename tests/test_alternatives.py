"""Alternatives (completion.alternatives): the first item stays plain greedy's, the others are the
model's runner-up beginnings continued greedily, distinct after post-processing."""

from __future__ import annotations

import math
import random
import time

import pytest
import torch
from test_speculative import FLAT_COST, prompts_from_files
from tiny_models import STDLIB

from memosight_lsp.config import parse_settings
from memosight_lsp.inference.branches import RUNNER_UP_RATIO, runner_ups
from memosight_lsp.inference.decoder import BranchRules, StopRules
from memosight_lsp.inference.greedy import GreedyDecoder, greedy_generate
from memosight_lsp.inference.loading import EMBEDDED_MODEL_DIR, load_model
from memosight_lsp.inference.speculative import SpeculativeDecoder
from memosight_lsp.pipeline.alternatives import distinct
from memosight_lsp.pipeline.local_backend import LocalBackend, alternatives_until
from memosight_lsp.pipeline.request import CompletionRequest

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FILES = ("argparse.py", "json/decoder.py", "dataclasses.py", "functools.py", "textwrap.py")


def no_time_limit(greedy) -> float:
    return time.monotonic() + 60


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2", "embedded"])
def test_first_item_is_greedy_and_branches_are_greedy_continuations(tiny_model_dirs, arch):
    """Over many real prompts, with alternatives on: the tokens are plain greedy's (the kept
    cache reused by the next call of the same buffer included), and every branch is greedy
    decoding of the prompt plus its first token, which is not greedy's first token. The trained
    embedded model reads its context (random ones barely do): a branch that saw the greedy
    tokens kept in the cache would differ there."""
    if arch == "embedded" and not (EMBEDDED_MODEL_DIR / "config.json").is_file():
        pytest.skip("no embedded default model")
    loaded = load_model(None if arch == "embedded" else tiny_model_dirs[arch], device="cpu")
    decoder = SpeculativeDecoder(cost_model=FLAT_COST)
    branches = BranchRules(count=2, max_tokens=6, until=no_time_limit)
    seen = 0
    for i, prompt in enumerate(prompts_from_files(loaded.tokenizer, 40, seed=7 + len(arch))):
        rules = StopRules(max_new_tokens=24, stop_token_ids=loaded.stop_token_ids)
        want = greedy_generate(loaded.model, prompt, rules)
        got = decoder(loaded.model, prompt, rules, buffer_id=f"buf{i % 3}", branches=branches)
        plain = GreedyDecoder()(loaded.model, prompt, rules, branches=branches)
        assert got.tokens == want.tokens == plain.tokens, f"prompt {i}"
        alternatives = [b.tokens for b in got.alternatives]
        assert alternatives == [b.tokens for b in plain.alternatives], f"prompt {i}"
        firsts = [tokens[0] for tokens in alternatives]
        assert len(set(firsts)) == len(firsts) and (not want.tokens or want.tokens[0] not in firsts)
        for tokens in alternatives:
            assert 1 <= len(tokens) <= 6
            rest = StopRules(max_new_tokens=6 - 1, stop_token_ids=loaded.stop_token_ids)
            after = greedy_generate(loaded.model, [*prompt, tokens[0]], rest).tokens
            assert tokens[1:] == after[: len(tokens) - 1], f"prompt {i}"
        seen += len(alternatives)
    assert seen > 0, "a random tiny model has close runner-ups: some branch should start"


def test_runner_ups_keep_close_tokens_only():
    logits = torch.full((10,), -10.0)
    logits[3], logits[5], logits[7], logits[1] = 5.0, 5.0 + math.log(0.5), 4.0, 5.0 - 4.0
    assert runner_ups(logits, None, 3, frozenset()) == [5, 7]  # token 1 is under the ratio
    assert runner_ups(logits, None, 1, frozenset()) == [5]
    assert runner_ups(logits, None, 3, frozenset({5})) == [7]  # a stop token starts nothing
    assert runner_ups(logits, [3, 7, 1], 3, frozenset()) == [7]  # token healing's allowed ids
    assert runner_ups(logits, [5, 1], 3, frozenset()) == []  # 5 is the greedy one there
    logits[7] = 5.0 + math.log(RUNNER_UP_RATIO) - 0.01
    assert runner_ups(logits, None, 3, frozenset()) == [5]


def test_distinct_drops_empty_equal_and_prefix_duplicates():
    first = "return a + b"
    candidates = ["return a", "   ", "return a + b  ", "return a + b + c", "x = 1", "x = 1\n", "y"]
    assert distinct(first, candidates, 5) == ["x = 1", "y"]
    assert distinct(first, candidates, 2) == ["x = 1"]
    assert distinct(first, candidates, 1) == []
    assert distinct("", ["x"], 3) == []  # no first item, no others


def test_alternatives_never_hold_the_first_item_past_its_deadline():
    now = time.monotonic()
    assert alternatives_until(now + 100, None, answered=True) == -math.inf
    assert alternatives_until(now + 100, now - 1, answered=False) == now - 1
    assert alternatives_until(now + 100, lambda: now + 0.01, answered=False) <= now + 0.01
    assert now < alternatives_until(now + 100, None, answered=False) <= now + 1
    assert alternatives_until(now, None, answered=False) == now  # nor past the stop time
    # At most a tenth of what the request took so far: 200 ms spent leaves them 20 ms.
    until = alternatives_until(now + 100, None, answered=False, spent_s=0.2)
    assert now < until <= time.monotonic() + 0.02
    assert alternatives_until(now + 100, None, answered=False, spent_s=0.0) <= time.monotonic()


def test_the_setting_is_validated():
    assert parse_settings({})[0].completion.alternatives == 3
    assert parse_settings({"completion": {"alternatives": 1}})[0].completion.alternatives == 1
    settings, problems = parse_settings({"completion": {"alternatives": 0}})
    assert settings.completion.alternatives == 3 and problems == [
        "completion.alternatives: must be between 1 and 5; using the default"
    ]


def cursors(count: int, seed: int) -> list[tuple[str, int, int]]:
    """(text, line, column) at the ends of random lines of real files: mid-line and line ends."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        lines = (STDLIB / FILES[i % len(FILES)]).read_text().split("\n")[:400]
        line = rng.randrange(1, len(lines))
        column = rng.randrange(0, len(lines[line]) + 1)
        out.append(("\n".join(lines), line, column))
    return out


@pytest.mark.slow
def test_engine_items_first_unchanged_others_distinct(tiny_model_dir):
    """LocalBackend: the first item is the same text with alternatives 3, 1 and plain greedy;
    the others are non-empty and no duplicate of any item; alternatives 1 gives none."""
    loaded = load_model(tiny_model_dir, device="cpu")
    engine = LocalBackend(loaded, time_passes=False)
    single = LocalBackend(loaded, time_passes=False)
    plain = LocalBackend(loaded, time_passes=False, speculative=False)
    with_others = 0
    for i, (text, line, column) in enumerate(cursors(24, seed=3)):
        base = {"text": text, "line": line, "column": column, "max_new_tokens": 16}
        three = engine.complete(CompletionRequest(**base, alternatives=3, buffer_id=f"b{i % 2}"))
        one = single.complete(CompletionRequest(**base, alternatives=1, buffer_id=f"b{i % 2}"))
        reference = plain.complete(CompletionRequest(**base, alternatives=1, plain=True))
        assert three.text == one.text == reference.text, f"cursor {i}"
        assert three.raw == reference.raw, f"cursor {i}"
        assert one.alternatives == [] and len(three.alternatives) <= 2
        if not three.text:  # no first item: nothing was branched for others
            assert "alternativesMs" not in three.stats, f"cursor {i}"
        items = [three.text.rstrip(), *(t.rstrip() for t in three.alternatives)]
        for k, item in enumerate(items[1:], 1):
            assert item.strip(), f"cursor {i}: an empty alternative"
            others = items[:k] + items[k + 1 :]
            assert not any(o.startswith(item) or item.startswith(o) for o in others), items
        with_others += bool(three.alternatives)
    assert with_others > 0, "a random tiny model hesitates somewhere: some request should branch"
