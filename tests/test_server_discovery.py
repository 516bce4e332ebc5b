"""The real server with model.path left at its default, "auto", over stdio: it loads the code
model discovery finds in a fake home (an Ollama blob), and says "embedded fallback: no code
model found" with the fix in its status when the home holds none, or when the pick does not
load. The server's environment points discovery at the fake home only."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from lsp_session import inline, open_doc, start, stop, wait_for_state, wait_until

from memosight_lsp.discovery.resolve import EMBEDDED_FALLBACK, FETCH_ACTION
from tests.test_discovery import PLAIN_TOKENS, ollama_model, write_header_gguf
from tests.tiny_gguf import write_tiny_gguf

pytestmark = pytest.mark.slow

DOC = "def add(a, b):\n    "
OPTIONS = {"completion": {"maxNewTokens": 8, "firstResponseMs": 0}, "model": {"device": "cpu"}}


def discovering_in(home: Path) -> dict[str, str]:
    """The server's environment: discovery on, every place under `home`."""
    return {
        "MEMOSIGHT_DISCOVERY": "1",
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "MEMOSIGHT_MODELS": "",
        "OLLAMA_MODELS": "",
        "LLAMA_CACHE": "",
        "HF_HOME": "",
        "HF_HUB_CACHE": "",
    }


@pytest.fixture(scope="module")
def tiny_code_gguf(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gguf") / "tiny-qwen2.gguf"
    write_tiny_gguf(path, "qwen2", "Q8_0")
    return path


async def test_auto_serves_the_code_model_it_finds(tmp_path, tiny_code_gguf):
    home = tmp_path / "home"
    ollama_model(home, "qwen2.5-coder", "1.5b", tiny_code_gguf, "a" * 64)
    client = await start("neovim", OPTIONS, env=discovering_in(home))
    try:
        open_doc(client, "file:///s/a.py", DOC)
        status = await wait_for_state(client, "ready", timeout=120)
        assert status["model"] == "qwen2.5-coder:1.5b"
        assert status["notice"] is None and status["fix"] is None
        loading = [s["message"] for s in client.statuses if s["state"] == "loading"]
        assert any("from ollama (found by auto)" in m for m in loading), loading
        await inline(client, "file:///s/a.py", 1, 4)  # it completes (text from random weights)
    finally:
        await stop(client)


async def test_no_code_model_says_embedded_fallback_and_the_fix(tmp_path):
    home = tmp_path / "home"
    (home / ".ollama" / "models").mkdir(parents=True)  # Ollama installed, nothing pulled
    client = await start("visual_studio_code", OPTIONS, env=discovering_in(home))
    try:
        open_doc(client, "file:///s/a.py", DOC)
        status = await wait_for_state(client, "ready", timeout=120)
        assert status["model"] == "memosight-default"
        assert status["notice"] == EMBEDDED_FALLBACK
        assert FETCH_ACTION in status["fix"]
        await wait_until(lambda: any(EMBEDDED_FALLBACK in m.message for m in client.log_messages))
    finally:
        await stop(client)


async def test_a_pick_that_does_not_load_falls_back_to_the_embedded_model(tmp_path):
    home = tmp_path / "home"
    broken = home / ".cache" / "llama.cpp" / "tiny-coder.gguf"  # a code model's name, no weights
    write_header_gguf(broken, name="Tiny Coder", tokens=PLAIN_TOKENS, size_label="10M")
    client = await start("neovim", OPTIONS, env=discovering_in(home))
    try:
        open_doc(client, "file:///s/a.py", DOC)
        status = await wait_for_state(client, "ready", timeout=120)
        assert status["model"] == "memosight-default"
        assert status["notice"].startswith("embedded fallback: tiny-coder.gguf (llama.cpp)")
        assert "another code model" in status["fix"]
    finally:
        await stop(client)
    shutil.rmtree(home, ignore_errors=True)
