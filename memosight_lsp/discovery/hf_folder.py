"""What a Hugging Face model folder holds, from its small files: `config.json` (architecture),
the safetensors headers (parameter count and dtype, without the weights) and the tokenizer
files (FIM markers, found as text in them). No torch, no transformers."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

from .gguf_header import FIM_MARKERS

MAX_CONFIG_BYTES = 1 << 20
MAX_TOKENIZER_BYTES = 32 << 20  # tokenizer.json of a 150k vocabulary: ~7 MB
MAX_SAFETENSORS_HEADER = 16 << 20
MAX_SHARDS = 64
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json", "special_tokens_map.json")


@dataclass(frozen=True, kw_only=True)
class FolderInfo:
    architecture: str | None  # config.json's architectures[0], else its model_type
    model_type: str | None
    causal_lm: bool  # an architecture that generates text (…ForCausalLM, …LMHeadModel)
    parameters: int | None  # from the safetensors headers
    weight_bytes: int  # the weight files' sizes
    safetensors: bool  # weights as safetensors (else pickle only, or none)
    markers: frozenset[str] = field(default_factory=frozenset)


def is_model_folder(path: Path) -> bool:
    return (path / "config.json").is_file()


def read_folder(path: Path) -> FolderInfo | None:
    """The folder's model, or None when config.json is missing or not a JSON object."""
    config = _json(path / "config.json", MAX_CONFIG_BYTES)
    if not isinstance(config, dict):
        return None
    architectures = config.get("architectures")
    names = (
        [a for a in architectures if isinstance(a, str)] if isinstance(architectures, list) else []
    )
    model_type = config.get("model_type") if isinstance(config.get("model_type"), str) else None
    shards = sorted(path.glob("*.safetensors"))[:MAX_SHARDS]
    pickles = sorted(path.glob("pytorch_model*.bin"))[:MAX_SHARDS]
    return FolderInfo(
        architecture=names[0] if names else model_type,
        model_type=model_type,
        causal_lm=any(n.endswith(("ForCausalLM", "LMHeadModel")) for n in names),
        parameters=_parameters(shards) if shards else None,
        weight_bytes=sum(_size(p) for p in shards or pickles),
        safetensors=bool(shards),
        markers=_markers(path),
    )


def _markers(path: Path) -> frozenset[str]:
    """FIM markers named in the tokenizer files, spelled as JSON may spell them (DeepSeek's
    full-width bars may be written as \\uff5c escapes)."""
    found: set[str] = set()
    for name in TOKENIZER_FILES:
        file = path / name
        if _size(file) > MAX_TOKENIZER_BYTES:
            continue
        try:
            text = file.read_bytes()
        except OSError:
            continue
        for marker in FIM_MARKERS:
            spellings = {json.dumps(marker, ensure_ascii=f)[1:-1].encode() for f in (True, False)}
            if any(f'"{s.decode()}"'.encode() in text for s in spellings):
                found.add(marker)
    return frozenset(found)


def _parameters(shards: list[Path]) -> int | None:
    """The parameter count the safetensors headers give (8-byte length, then JSON)."""
    total = 0
    for shard in shards:
        try:
            with shard.open("rb") as handle:
                (length,) = struct.unpack("<Q", handle.read(8))
                if length > MAX_SAFETENSORS_HEADER:
                    return None
                header = json.loads(handle.read(length))
        except (OSError, ValueError, struct.error):
            return None
        if not isinstance(header, dict):
            return None
        for name, tensor in header.items():
            if name == "__metadata__" or not isinstance(tensor, dict):
                continue
            count = 1
            for dim in tensor.get("shape") or []:
                count *= int(dim)
            total += count
    return total


def _json(path: Path, limit: int) -> object:
    if _size(path) > limit:
        return None
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
