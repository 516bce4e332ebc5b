"""settings.compression end to end: parsed, planned per request, decoded, counted by the server."""

from __future__ import annotations

import pytest
import torch
from lsp_session import inline, open_doc, start, stats, stop, tiny_options, wait_for_state
from tiny_models import STDLIB

from memosight_lsp.config import parse_settings
from memosight_lsp.inference.compression_policy import Thresholds
from memosight_lsp.inference.loading import load_model
from memosight_lsp.pipeline.local_backend import LocalBackend
from memosight_lsp.pipeline.request import CompletionRequest

TEXT = (STDLIB / "shlex.py").read_text()
LINES = TEXT.splitlines()
# Cursors deep in the file: the prompt fills the context budget (hundreds of tokens).
CURSORS = [(200, 8), (250, 0), (300, 12)]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    loaded = load_model(tiny_model_dir, device="cpu")
    # Random tiny models mostly echo their input token; scaled attention makes the far context
    # matter, so a compressed cache really changes what is drafted or decoded.
    with torch.no_grad():
        for layer in loaded.model.model.layers:
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                getattr(layer.self_attn, name).weight.mul_(6.0)
    return loaded


def request(line: int, column: int, **compression) -> CompletionRequest:
    return CompletionRequest(
        text=TEXT,
        line=line,
        column=min(column, len(LINES[line])),
        mid_word="complete",
        max_new_tokens=12,
        buffer_id="file:///shlex.py",
        **compression,
    )


def test_settings_accept_the_modes_and_reject_bad_values():
    settings, problems = parse_settings(
        {"compression": {"kvCompression": "lossy-snapkv", "kvRatio": 8, "minPromptTokens": 512}}
    )
    assert problems == []
    assert (settings.compression.kv_compression, settings.compression.kv_ratio) == (
        "lossy-snapkv",
        8,
    )
    assert settings.compression.min_prompt_tokens == 512
    settings, problems = parse_settings(
        {"compression": {"kvCompression": "snapkv", "kvRatio": 1, "minPromptTokens": "long"}}
    )
    assert len(problems) == 3
    assert "lossy-snapkv" in problems[0]  # the message lists the choices, lossy named as such
    assert parse_settings({})[0].compression.kv_compression == "off"
    assert settings.compression == parse_settings({})[0].compression


def test_lossless_draft_gives_the_plain_greedy_completion(loaded):
    # The policy keeps lossless-draft off on CPU (measured slower); the override lets it run here.
    engine = LocalBackend(loaded, compression=Thresholds(lossless_on_cpu=True))
    drafted = 0
    for line, column in CURSORS:
        got = engine.complete(
            request(line, column, kv_compression="lossless-draft", min_prompt_tokens=64)
        )
        want = engine.complete(request(line, column, plain=True))
        assert (got.raw, got.text, got.stop_reason) == (want.raw, want.text, want.stop_reason)
        assert got.stats["kvCompression"] == "lossless-draft"
        assert got.stats["compression"]["kvMode"] == "lossless-draft"
        assert got.prompt_tokens > 200
        drafted += got.stats["draftedTokens"]
    assert drafted > 0


def test_policy_keeps_lossless_draft_off_on_cpu_and_short_prompts_uncompressed(loaded):
    engine = LocalBackend(loaded)
    got = engine.complete(
        request(*CURSORS[0], kv_compression="lossless-draft", min_prompt_tokens=64)
    )
    assert "kvCompression" not in got.stats  # the speculative decoder ran
    assert "CPU" in got.stats["compression"]["reason"]
    got = engine.complete(request(*CURSORS[0], kv_compression="lossy-snapkv"))  # 2048 minimum
    assert got.stats["compression"] == {
        "kvMode": "off",
        "reason": f"kv: prompt {got.prompt_tokens} < 2048 tokens",
    }
    off = engine.complete(request(*CURSORS[0]))
    assert "compression" not in off.stats and "kvCompression" not in off.stats


def test_lossy_snapkv_decodes_on_a_cache_of_the_asked_ratio(loaded):
    engine = LocalBackend(loaded)
    kept = {}
    for ratio in (2, 8):
        got = engine.complete(
            request(
                *CURSORS[1], kv_compression="lossy-snapkv", kv_ratio=ratio, min_prompt_tokens=64
            )
        )
        assert got.stats["kvCompression"] == "lossy-snapkv"
        assert got.stats["compression"]["kvMode"] == "lossy-snapkv"
        kept[ratio] = got.stats["keptPositions"]
        assert kept[ratio] < got.prompt_tokens
    assert kept[8] < kept[2]
    plain = engine.complete(request(*CURSORS[1], kv_compression="lossy-snapkv", plain=True))
    assert "kvCompression" not in plain.stats  # plain still means plain greedy


@pytest.mark.slow
async def test_server_decodes_with_snapkv_when_settings_say_so(tiny_model_dir):
    options = tiny_options(tiny_model_dir, precomputeNext=False)
    options["compression"] = {"kvCompression": "lossy-snapkv", "minPromptTokens": 64}
    client = await start("neovim", options)
    try:
        uri = "file:///s/shlex.py"
        open_doc(client, uri, TEXT)
        await wait_for_state(client, "ready")
        await inline(client, uri, *CURSORS[1])
        counts = await stats(client)
        assert counts["modelCalls"] >= 1
        assert counts["lossySnapkvCalls"] == counts["modelCalls"]
        assert counts["losslessDraftCalls"] == 0
    finally:
        await stop(client)
