"""With the embedded default model: lossless on held-out third-party code and on other languages
(TypeScript, Lua, C), drafts really used."""

from __future__ import annotations

import random
import sysconfig
from pathlib import Path

import pytest

from memosight_lsp.bench.speed import default_files, sample_prompts
from memosight_lsp.inference.decoder import StopRules
from memosight_lsp.inference.greedy import greedy_generate
from memosight_lsp.inference.loading import EMBEDDED_MODEL_DIR, load_model
from memosight_lsp.inference.speculative import SpeculativeDecoder
from memosight_lsp.pipeline.local_backend import LocalBackend

REPO = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.skipif(
        not (EMBEDDED_MODEL_DIR / "config.json").is_file(), reason="no embedded default model yet"
    ),
    pytest.mark.usefixtures("one_torch_thread"),
]


@pytest.fixture(scope="module")
def loaded():
    return load_model(None, device="cpu")


@pytest.mark.slow
def test_default_model_is_lossless_on_held_out_code(loaded):
    engine = LocalBackend(loaded, speculative=False)
    prompts = sample_prompts(engine, default_files(), 100, budget=384, seed=7)
    decoder = SpeculativeDecoder()
    rules = StopRules(max_new_tokens=32, stop_token_ids=loaded.stop_token_ids)
    passes = tokens = 0
    for i, sample in enumerate(prompts):
        want = greedy_generate(loaded.model, sample["ids"], rules)
        got = decoder(loaded.model, sample["ids"], rules, buffer_id=f"b{i % 4}")
        assert got.tokens == want.tokens, f"{sample['file']}:{sample['line']}"
        passes += got.forward_passes
        tokens += len(got.tokens)
    assert len(prompts) == 100
    assert tokens / passes > 1.5  # drafts are accepted, several tokens per pass


def other_language_files() -> list[Path]:
    """TypeScript and Lua of this repository's editor clients and CPython's C headers."""
    files = sorted((REPO / "editors" / "vscode" / "src").glob("*.ts"))
    files += sorted((REPO / "editors" / "neovim" / "lua" / "memosight").glob("*.lua"))
    files += sorted(Path(sysconfig.get_paths()["include"]).glob("*.h"))[:12]
    return [f for f in files if f.stat().st_size > 2000]


@pytest.mark.slow
def test_default_model_is_lossless_on_other_languages(loaded):
    files = other_language_files()
    assert {f.suffix for f in files} == {".ts", ".lua", ".h"}
    rng = random.Random(3)
    decoder = SpeculativeDecoder()
    rules = StopRules(max_new_tokens=32, stop_token_ids=loaded.stop_token_ids)
    accepted = 0
    for i in range(60):
        text = files[i % len(files)].read_text(encoding="utf-8", errors="replace")
        cut = rng.randrange(200, len(text))
        ids = loaded.tokenizer.encode(text[:cut], add_special_tokens=True)
        ids = ids[-rng.randrange(64, 400) :]
        want = greedy_generate(loaded.model, ids, rules)
        got = decoder(loaded.model, ids, rules, buffer_id=f"b{i % 4}")
        assert got.tokens == want.tokens, f"{files[i % len(files)]}@{cut}"
        accepted += got.stats["acceptedDraftTokens"]
    assert accepted > 0
