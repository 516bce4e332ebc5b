"""`model.path` as something to load: "auto" (discovery's pick), null (the embedded model) or a
path; and the one line every surface shows whenever the embedded model serves, with the one
action that gives a real code model instead.

The server's model host and the command line both resolve here, so the editors' status, the
health check and `memosight models` say the same words.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from memosight_lsp.config import BackendName

from . import Discovery, discover
from .servers import DEFAULT_ENGINES

log = logging.getLogger(__name__)

AUTO = "auto"
EMBEDDED_FALLBACK = "embedded fallback: no code model found"
# The one action: a small FIM code model measured with this project (docs/speculative.md), into
# the Hugging Face cache where `auto` finds it. `hf` comes with huggingface_hub, a dependency.
FETCH_ACTION = (
    "hf download Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF qwen2.5-coder-0.5b-instruct-q8_0.gguf"
)
# A served pick's source -> the model.backend that talks to it.
BACKEND_OF: dict[str, BackendName] = {"ollama-server": "ollama", "llama.cpp-server": "llama.cpp"}
FIX = f"run `{FETCH_ACTION}` (or set model.path to a code model's .gguf file or folder)"


@dataclass(frozen=True, kw_only=True)
class Resolved:
    """What to load for a model.path setting."""

    path: str | None  # for load_model; None: the embedded model
    # A loopback engine when `auto` picked one that serves a code model.
    backend: BackendName = "local"
    url: str | None = None
    name: str | None = None  # how the user knows the pick (an Ollama tag, a repository)
    source: str | None = None  # where `auto` found it
    reason: str = ""  # why this one
    notice: str | None = None  # one line, whenever the embedded model serves
    fix: str | None = None  # the one action that ends the fallback
    discovery: Discovery | None = None

    def describe(self) -> str:
        """One line for a log or a terminal."""
        if self.notice:
            return f"{self.notice} ({self.reason}); {self.fix}" if self.fix else self.notice
        if self.source:
            return f"auto: {self.name} from {self.source} ({self.reason})"
        return f"model: {self.path}"


def resolve(
    path: str | None,
    *,
    device: str = "auto",
    env: Mapping[str, str] | None = None,
    engines: Sequence[tuple[str, str]] = DEFAULT_ENGINES,
) -> Resolved:
    """`auto`: discovery's pick (a file, a folder or a loopback engine), else the embedded model
    with EMBEDDED_FALLBACK; None: the embedded model, said so; a path: itself."""
    if path is None:
        return Resolved(
            path=None,
            reason="model.path is null",
            notice="embedded model: model.path is null",
            fix='set model.path to "auto" or to a code model\'s .gguf file or folder',
        )
    if path != AUTO:
        return Resolved(path=path, reason="model.path names it")
    found = discover(env=env, device=device, engines=engines)
    choice = found.choice
    if choice is None:
        return Resolved(
            path=None, reason=found.reason, notice=EMBEDDED_FALLBACK, fix=FIX, discovery=found
        )
    if choice.format == "server":
        return Resolved(
            path=None,
            backend=BACKEND_OF[choice.source],
            url=choice.path,
            name=choice.name,
            source=choice.source,
            reason=found.reason,
            discovery=found,
        )
    return Resolved(
        path=choice.path,
        name=choice.name,
        source=choice.source,
        reason=found.reason,
        discovery=found,
    )


def after_failed_load(resolved: Resolved, error: str) -> Resolved:
    """The embedded model instead of what `auto` picked, when that did not load."""
    return replace(
        resolved,
        path=None,
        backend="local",
        url=None,
        reason=f"{resolved.name} did not load: {error}",
        notice=f"embedded fallback: {resolved.name} ({resolved.source}) did not load",
        fix="set model.path to another code model's .gguf file or folder",
    )


class Named(Protocol):
    name: str


Model = TypeVar("Model", bound=Named)


def load_resolved(
    resolved: Resolved,
    load: Callable[[str | None], Model],
    *,
    progress: Callable[[str], None] | None = None,
) -> tuple[Model, Resolved]:
    """`load(path)` of what `resolved` names, and what was resolved in the end: auto's pick, or
    the embedded model when that pick did not load (the one place the server and the command
    line fall back, so both say it the same way). What `load` raises for a path or the embedded
    model is the caller's to report."""
    if not resolved.source:  # not auto's pick: a path, or the embedded model
        return load(resolved.path), resolved
    try:
        loaded = load(resolved.path)
    except Exception as err:  # whatever stops auto's pick from loading: the embedded model serves
        fallback = after_failed_load(resolved, str(err).strip().splitlines()[0] if str(err) else "")
        log.warning("model: %s", fallback.describe())
        if progress is not None:
            progress(fallback.describe())
        return load(None), fallback
    loaded.name = resolved.name or loaded.name  # as the user knows it (an Ollama tag)
    return loaded, resolved
