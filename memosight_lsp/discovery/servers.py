"""Serving engines already running on this machine, on their default loopback ports: Ollama
(127.0.0.1:11434, `/api/tags`) and llama.cpp's server (127.0.0.1:8080, `/props`, else
`/v1/models`). Each is asked once, with a short deadline, and only on 127.0.0.1: discovery makes
no other network call. What they serve is offered as a backend (`model.backend`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from memosight_lsp.engines import http

PROBE_S = 0.3  # an engine on loopback answers these in milliseconds; a silent port costs this
MAX_MODELS = 64  # models listed per engine


@dataclass(frozen=True, kw_only=True)
class Served:
    engine: str  # "ollama" or "llama.cpp" (model.backend's names)
    url: str
    name: str  # the model as the engine names it (model.name)
    parameter_size: str | None = None  # Ollama's details.parameter_size, e.g. "1.5B"
    model_path: str | None = None  # llama.cpp: the GGUF file it serves


# engine -> its default base URL; loopback only, whatever the environment says.
DEFAULT_ENGINES: tuple[tuple[str, str], ...] = (
    ("ollama", "http://127.0.0.1:11434"),
    ("llama.cpp", "http://127.0.0.1:8080"),
)


def probe(engine: str, url: str, timeout_s: float = PROBE_S) -> list[Served]:
    """What the engine at url serves; [] when nothing (or something else) answers."""
    deadline = time.monotonic() + timeout_s
    try:
        if engine == "ollama":
            return _ollama(url, deadline)
        return _llama_cpp(url, deadline)
    except (http.EngineError, http.Cancelled, OSError, ValueError):
        return []


def _ollama(url: str, deadline: float) -> list[Served]:
    tags = http.get_json(url + "/api/tags", watch=http.Watch(deadline))
    models = tags.get("models") if isinstance(tags, dict) else None
    out = []
    for model in (models if isinstance(models, list) else [])[:MAX_MODELS]:
        if not isinstance(model, dict) or not isinstance(model.get("name"), str):
            continue
        details = model.get("details")
        size = details.get("parameter_size") if isinstance(details, dict) else None
        out.append(
            Served(
                engine="ollama",
                url=url,
                name=model["name"],
                parameter_size=size if isinstance(size, str) else None,
            )
        )
    return out


def _llama_cpp(url: str, deadline: float) -> list[Served]:
    props: Any = None
    try:
        props = http.get_json(url + "/props", watch=http.Watch(deadline))
    except http.EngineError:
        props = None
    if isinstance(props, dict) and (props.get("model_path") or props.get("model_alias")):
        path = str(props.get("model_path") or "")
        alias = str(props.get("model_alias") or "")
        name = alias if alias and alias != path else path.rsplit("/", 1)[-1]
        return [Served(engine="llama.cpp", url=url, name=name, model_path=path or None)]
    listed = http.get_json(url + "/v1/models", watch=http.Watch(deadline))
    data = listed.get("data") if isinstance(listed, dict) else None
    return [
        Served(engine="llama.cpp", url=url, name=item["id"])
        for item in (data if isinstance(data, list) else [])[:MAX_MODELS]
        if isinstance(item, dict) and isinstance(item.get("id"), str)
    ]
