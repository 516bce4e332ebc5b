"""Serving engines over HTTP (vLLM, llama.cpp's server, Ollama, any OpenAI-compatible
completions endpoint) behind one small protocol (base.Engine). No torch, no LSP here:
pipeline/engine_backend.py builds the prompt and post-processes, the backends only generate.
"""

from __future__ import annotations

import logging
import os

from memosight_lsp.config import ModelSettings

from .base import Engine, EngineInfo, EngineResult, GenerateRequest, PromptPieces
from .http import Cancelled, EngineError
from .llama_cpp import LlamaCppClient
from .ollama import OllamaClient
from .openai import OpenAIClient
from .vllm import VllmClient

log = logging.getLogger(__name__)

# backend name -> (class, default base URL: the engine's own default port, on loopback)
BACKENDS: dict[str, tuple[type, str | None]] = {
    "vllm": (VllmClient, "http://127.0.0.1:8000"),
    "llama.cpp": (LlamaCppClient, "http://127.0.0.1:8080"),
    "ollama": (OllamaClient, "http://127.0.0.1:11434"),
    "openai": (OpenAIClient, None),
}


class BackendConfigError(Exception):
    """The settings cannot name a working backend (one line, names the setting)."""


def api_key(settings: ModelSettings) -> str | None:
    """The API key from the environment variable model.apiKeyEnv names (never from settings)."""
    if not settings.api_key_env:
        return None
    key = os.environ.get(settings.api_key_env)
    if not key:
        log.warning(
            "model.apiKeyEnv names %s, which is not set in the server's environment: "
            "requests go without an API key",
            settings.api_key_env,
        )
    return key or None


def open_engine(settings: ModelSettings) -> Engine:
    """The backend the settings name (not contacted yet: probe() does that)."""
    if settings.backend not in BACKENDS:
        raise BackendConfigError(f"model.backend {settings.backend!r} is not a serving engine")
    cls, default_url = BACKENDS[settings.backend]
    url = settings.url or default_url
    if url is None:
        raise BackendConfigError(f"model.backend {settings.backend} needs model.url")
    if not url.startswith(("http://", "https://")):
        raise BackendConfigError(f"model.url must start with http:// or https://, not {url!r}")
    backend: Engine = cls(
        url, model=settings.name, api_key=api_key(settings), fim_override=settings.fim_format
    )
    return backend


__all__ = [
    "BACKENDS",
    "BackendConfigError",
    "Cancelled",
    "Engine",
    "EngineError",
    "EngineInfo",
    "EngineResult",
    "GenerateRequest",
    "PromptPieces",
    "open_engine",
]
