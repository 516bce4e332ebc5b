"""LocalBackend decodes speculatively by default, with the same text as plain greedy."""

from __future__ import annotations

import random

import pytest
from tiny_models import STDLIB

from memosight_lsp.inference.drafters import CostModel, WorkspaceLookup
from memosight_lsp.inference.fused_trunk import FusedTrunk, prepare_trunk
from memosight_lsp.inference.loading import load_model
from memosight_lsp.inference.speculative import SpeculativeDecoder
from memosight_lsp.pipeline.local_backend import LocalBackend
from memosight_lsp.pipeline.request import CompletionRequest

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_engine_speculative_equals_plain_and_reuses_the_buffer(tiny_model_dir):
    loaded = load_model(tiny_model_dir, device="cpu")
    engine = LocalBackend(loaded)
    assert isinstance(engine.decoder, SpeculativeDecoder)
    text = (STDLIB / "shlex.py").read_text()
    lines = text.splitlines()
    rng = random.Random(1)
    reused = 0
    for _ in range(12):
        line = rng.randrange(20, len(lines) - 1)
        column = rng.randrange(0, len(lines[line]) + 1)
        for edit in range(2):  # the same spot, then one character typed there
            doc = lines[:]
            doc[line] = doc[line][:column] + "x" * edit + doc[line][column:]
            request = dict(
                text="\n".join(doc), line=line, column=column + edit, mid_word="complete"
            )
            fast = engine.complete(CompletionRequest(**request, buffer_id="file:///shlex.py"))
            plain = engine.complete(CompletionRequest(**request, plain=True))
            assert (fast.raw, fast.text, fast.stop_reason) == (
                plain.raw,
                plain.text,
                plain.stop_reason,
            )
            reused += fast.stats.get("reusedPromptTokens", 0)
    assert reused > 0


def test_warm_up_times_the_passes_before_the_first_completion(tiny_model_dir):
    loaded = load_model(tiny_model_dir, device="cpu")
    engine = LocalBackend(loaded)
    decoder = engine.decoder
    assert isinstance(decoder, SpeculativeDecoder) and decoder.cost_model is None
    engine.warm_up()
    cost = decoder.cost_model
    assert cost is not None and 0 < cost.cost(1) <= cost.cost(32)
    trunk = prepare_trunk(loaded.model)
    assert isinstance(trunk, FusedTrunk) and trunk.kernels is not None  # timed too
    text = (STDLIB / "shlex.py").read_text()
    done = engine.complete(CompletionRequest(text=text, line=120, column=0, mid_word="complete"))
    assert done.stats["speculative"] and decoder.cost_model is cost  # not timed again
    LocalBackend(loaded, speculative=False).warm_up()  # plain greedy: nothing to time


def test_one_shot_engines_time_nothing_and_give_the_same_text(tiny_model_dir):
    loaded = load_model(tiny_model_dir, device="cpu")
    engine = LocalBackend(loaded, time_passes=False)
    trunk = prepare_trunk(loaded.model)
    assert isinstance(trunk, FusedTrunk)
    assert all(product.copy is None for product in trunk._products())
    text = (STDLIB / "shlex.py").read_text()
    request = dict(text=text, line=120, column=0, mid_word="complete")
    fast = engine.complete(CompletionRequest(**request))
    plain = engine.complete(CompletionRequest(**request, plain=True))
    assert fast.stats["speculative"] and fast.new_tokens > 0
    assert (fast.raw, fast.stop_reason) == (plain.raw, plain.stop_reason)
    decoder = engine.decoder
    assert isinstance(decoder, SpeculativeDecoder) and decoder.cost_model is not None
    assert decoder.cost_model.costs == CostModel().costs  # the default shape, not timed
    assert trunk.kernels is None  # few-row products ran F.linear, untimed


def test_settings_can_turn_it_off(tiny_model_dir):
    loaded = load_model(tiny_model_dir, device="cpu")
    engine = LocalBackend(loaded, speculative=False)
    assert not isinstance(engine.decoder, SpeculativeDecoder)


def test_open_buffers_feed_the_workspace_drafts(tiny_model_dir):
    """Code open in another buffer that the model is about to write is drafted from there."""
    loaded = load_model(tiny_model_dir, device="cpu")
    text = (STDLIB / "shlex.py").read_text()
    lines = text.splitlines()
    request = dict(text=text, line=120, column=0, mid_word="complete", max_new_tokens=24)
    plain = LocalBackend(loaded).complete(CompletionRequest(**request, plain=True))
    assert plain.new_tokens >= 3  # the random model loops here: stopped after three copies
    # Another buffer holding the lines above the cursor followed by what greedy decoding says.
    other = "\n".join(lines[100:120]) + "\n" + plain.raw + "\n"
    decoder = SpeculativeDecoder(sources=[WorkspaceLookup()])
    engine = LocalBackend(loaded, decoder=decoder)
    fast = engine.complete(CompletionRequest(**request, open_buffers={"/other.py": other}))
    assert (fast.raw, fast.text) == (plain.raw, plain.text)
    assert fast.stats["acceptedBySource"].get("workspace", 0) > 0
    assert decoder.workspace is not None
    # Closing the other buffer takes its drafts away.
    engine.complete(CompletionRequest(**request))
    assert decoder.workspace is None
