from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tiny_models import save_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random Llama with a FIM-capable tokenizer, saved with save_pretrained."""
    return save_tiny_model(tmp_path_factory.mktemp("tiny-llama"), "llama")


@pytest.fixture(scope="session")
def tiny_model_dirs(tmp_path_factory) -> dict[str, Path]:
    """One tiny random model per architecture."""
    return {
        arch: save_tiny_model(tmp_path_factory.mktemp(f"tiny-{arch}"), arch)
        for arch in ("llama", "qwen2", "gpt2")
    }
