"""Each model found, judged from its header or small files: is it a code model, does it have
fill-in-the-middle tokens, can this project load it, does it fit this machine; and the order
that picks the best.

A code model is one with a known family's FIM markers in its vocabulary, or a name of a known
code family (Qwen2.5-Coder, StarCoder2, DeepSeek-Coder, CodeGemma, CodeLlama, ...). `auto` takes
only code models that can be loaded and fit the machine; among those, FIM before none (the
server prompts with the code after the cursor too), then the most parameters (the best
completions the machine still runs interactively), then a base model before an instruct one
(FIM is a base-model skill), then the larger file (the finer quantization of the same model).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from memosight_lsp.config import snake_to_camel
from memosight_lsp.inference.fim import detect_fim_format

from .gguf_header import GgufHeader, HeaderError, read_header
from .hf_folder import read_folder
from .machine import Machine, format_parameters
from .places import Found
from .servers import Served

CODE_FAMILY = re.compile(
    r"coder|starcoder|code[-_ ]?llama|code[-_ ]?gemma|codeqwen|codestral|granite[-_ ]?\d*[-_ ]?"
    r"code|stable[-_ ]?code|santacoder|codegen|replit[-_ ]?code",
    re.IGNORECASE,
)
INSTRUCT = re.compile(r"instruct|chat|-it\b", re.IGNORECASE)
# Architectures (as GGUF files name them) that transformers' GGUF reader converts
# (transformers.integrations.ggml, checked by tests/test_discovery.py): others are listed, not
# picked.
GGUF_ARCHITECTURES = frozenset(
    {
        "llama", "mistral", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "phi3", "bloom", "falcon",
        "stablelm", "gpt2", "starcoder2", "gemma2", "gemma3", "nemotron", "deci", "lfm2",
    }
)  # fmt: skip
# Approximate bits per weight of llama.cpp's file types (general.file_type), for a parameter
# count when the file has no general.size_label.
BITS_PER_WEIGHT = {
    0: 32.0, 1: 16.0, 2: 4.5, 3: 5.0, 7: 8.5, 8: 5.5, 9: 6.0, 10: 2.9, 11: 3.5, 12: 3.9,
    13: 4.3, 14: 4.6, 15: 4.9, 16: 5.5, 17: 5.7, 18: 6.6, 19: 2.1, 20: 2.3, 21: 2.6, 22: 3.3,
    23: 3.1, 24: 1.6, 25: 4.5, 26: 3.4, 27: 3.7, 28: 2.5, 29: 2.7, 30: 4.3, 31: 1.8, 32: 16.0,
}  # fmt: skip
SOURCE_ORDER = (
    "env", "ollama", "lmstudio", "llama.cpp", "hf-cache", "ollama-server", "llama.cpp-server"
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Candidate:
    path: str  # the GGUF file or model folder; for a serving engine, its URL
    source: str  # ollama, lmstudio, llama.cpp, hf-cache, env, ollama-server, llama.cpp-server
    format: str  # gguf, hf, server
    name: str  # as its tool names it
    architecture: str | None = None
    size_bytes: int | None = None
    parameters: int | None = None
    fim: str | None = None  # the FIM format name (qwen, starcoder, ...), None: none
    code: bool = False
    fits: bool = True
    fit: str = ""  # why it fits or not
    problem: str | None = None  # why it cannot be used here (None: it can)

    @property
    def usable(self) -> bool:
        """What `auto` may pick: a code model that loads here and fits the machine."""
        return self.problem is None and self.code and self.fits

    def describe(self) -> str:
        """One line: name, where, size, FIM."""
        size = format_parameters(self.parameters) if self.parameters else "size unknown"
        fim = f"FIM {self.fim}" if self.fim else "no FIM"
        return f"{self.name} ({self.source}, {size}, {fim})"

    def to_json(self) -> dict[str, Any]:
        data = {snake_to_camel(k): v for k, v in asdict(self).items()}
        data["usable"] = self.usable
        return data


def judge(found: Found, machine: Machine) -> Candidate:
    if found.format == "hf":
        return _judge_folder(found, machine)
    return _judge_gguf(found, machine)


def judge_served(served: Served, machine: Machine) -> Candidate:
    """An engine's model: a code model by its name (or, for llama.cpp, by the file it serves
    when that file is readable here)."""
    header = None
    if served.model_path:
        try:
            header = read_header(served.model_path)
        except HeaderError:
            header = None
    fim = _fim(header.markers) if header else None
    names = [served.name, *(_header_names(header) if header else [])]
    return Candidate(
        path=served.url,
        source=f"{served.engine}-server",
        format="server",
        name=served.name,
        architecture=header.architecture if header else None,
        parameters=_parse_size_label(served.parameter_size),
        fim=fim,
        code=fim is not None or any(CODE_FAMILY.search(n) for n in names),
        fits=True,
        fit=f"served by {served.engine} at {served.url}",
    )


def _judge_gguf(found: Found, machine: Machine) -> Candidate:
    size = _size(found.path)
    base = Candidate(
        path=str(found.path), source=found.source, format="gguf", name=found.name, size_bytes=size
    )
    try:
        header = read_header(found.path)
    except HeaderError as err:
        return replace(base, problem=str(err), fits=False, fit="")
    parameters = _parse_size_label(header.size_label) or _estimate(size, header.file_type)
    fim = _fim(header.markers)
    code = fim is not None or any(
        CODE_FAMILY.search(n) for n in [found.name, *_header_names(header)]
    )
    problem = None
    if header.architecture not in GGUF_ARCHITECTURES:
        problem = f"architecture {header.architecture or 'unknown'} cannot be loaded from GGUF here"
    fits, fit = machine.fits(parameters)
    return replace(
        base,
        architecture=header.architecture,
        parameters=parameters,
        fim=fim,
        code=code,
        fits=fits,
        fit=fit,
        problem=problem,
    )


def _judge_folder(found: Found, machine: Machine) -> Candidate:
    info = read_folder(found.path)
    base = Candidate(path=str(found.path), source=found.source, format="hf", name=found.name)
    if info is None:
        return replace(base, problem="config.json is missing or unreadable", fits=False)
    fim = _fim(info.markers)
    code = fim is not None or any(
        CODE_FAMILY.search(n) for n in (found.name, found.path.name, info.architecture or "")
    )
    problem = None
    if not info.causal_lm:
        problem = f"not a text generation model ({info.architecture or 'unknown architecture'})"
    elif not info.safetensors:
        problem = "no safetensors weights (pickle weights load only with model.allowPickle)"
    parameters = info.parameters
    fits, fit = machine.fits(parameters)
    return replace(
        base,
        architecture=info.architecture,
        size_bytes=info.weight_bytes,
        parameters=parameters,
        fim=fim,
        code=code,
        fits=fits,
        fit=fit,
        problem=problem,
    )


def rank(candidates: list[Candidate]) -> list[Candidate]:
    """Best first: usable ones in the order the module docstring gives, then the rest."""

    def key(c: Candidate) -> tuple:
        source = SOURCE_ORDER.index(c.source) if c.source in SOURCE_ORDER else len(SOURCE_ORDER)
        return (
            not c.usable,
            c.fim is None,
            -(c.parameters or 0),
            bool(INSTRUCT.search(c.name)),
            -(c.size_bytes or 0),
            source,
            c.name,
        )

    return sorted(candidates, key=key)


def _fim(markers: frozenset[str]) -> str | None:
    fmt = detect_fim_format(markers)
    return fmt.name if fmt else None


def _header_names(header: GgufHeader) -> list[str]:
    return [n for n in (header.name, header.basename) if n]


def _parse_size_label(label: str | None) -> int | None:
    """'0.5B' -> 500,000,000; '494M'; '8x7B' -> 56B; None when unreadable."""
    if not label:
        return None
    match = re.fullmatch(r"(?:(\d+)x)?(\d+(?:\.\d+)?)\s*([KMBT])", label.strip(), re.IGNORECASE)
    if not match:
        return None
    experts = int(match.group(1) or 1)
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}[match.group(3).upper()]
    return int(experts * float(match.group(2)) * scale)


def _estimate(size: int | None, file_type: int | None) -> int | None:
    if not size:
        return None
    return int(size * 8 / BITS_PER_WEIGHT.get(file_type if file_type is not None else -1, 8.0))


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None
