"""What a GGUF file holds, read from its header alone: no weights, no torch, no gguf package.

A GGUF file starts with `GGUF`, a version (2 or 3), the tensor and key-value counts, then the
key-value metadata: `general.architecture`, `general.name`, `general.file_type`, the
tokenizer's vocabulary (`tokenizer.ggml.tokens`, an array of strings) and so on. Reading stops
as soon as the fields below and the vocabulary are seen (the merges and tensor table after them
are not needed), and never goes past MAX_HEADER_BYTES: a file that does not answer by then is
"not readable", never a long read.

The vocabulary is not decoded: each FIM marker of the known families is looked for, as its
length-prefixed bytes, in the vocabulary's byte span, which is what `detect_fim_format` needs.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from memosight_lsp.inference.fim import KNOWN_FORMATS

MAGIC = b"GGUF"
MAX_HEADER_BYTES = 64 << 20  # metadata larger than this is not read (real ones: 1-10 MB)
MAX_KEYS = 4096  # a header with more key-value pairs is not read (real ones: 20-60)
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
# GGUF value types: fixed sizes of the scalar ones; 8 is a string, 9 an array.
_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_SCALAR_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?"}
_SCALAR_FORMATS |= {10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
# Every marker a known FIM family uses, plus CodeGemma's separator (it tells CodeGemma from
# Qwen, which share the three markers).
FIM_MARKERS: tuple[str, ...] = tuple(
    dict.fromkeys(
        [t for f in KNOWN_FORMATS for t in (f.prefix_token, f.suffix_token, f.middle_token)]
        + ["<|file_separator|>"]
    )
)
WANTED = (
    "general.architecture",
    "general.name",
    "general.basename",
    "general.size_label",
    "general.file_type",
)


class HeaderError(Exception):
    """The file is not a GGUF file this reader understands (one line)."""


@dataclass(frozen=True, kw_only=True)
class GgufHeader:
    architecture: str | None
    name: str | None  # general.name, e.g. "Qwen2.5 Coder 0.5B Instruct"
    basename: str | None
    size_label: str | None  # general.size_label, e.g. "0.5B" (newer converters write it)
    file_type: int | None  # general.file_type (llama.cpp's LlamaFileType)
    context_length: int | None  # <architecture>.context_length
    vocabulary_size: int | None
    markers: frozenset[str] = field(default_factory=frozenset)  # FIM markers in the vocabulary


def is_gguf_file(path: str | os.PathLike) -> bool:
    """Whether the file starts with the GGUF magic (Ollama's blobs have no .gguf suffix)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == MAGIC
    except OSError:
        return False


def read_header(path: str | os.PathLike) -> GgufHeader:
    """The header's fields; HeaderError when the file is not a readable GGUF file."""
    try:
        with open(path, "rb") as handle:
            if handle.read(4) != MAGIC:
                raise HeaderError(f"{Path(path).name} is not a GGUF file")
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _parse(data)
    except (OSError, ValueError) as err:  # unreadable, empty (mmap), vanished
        raise HeaderError(f"cannot read {Path(path).name}: {err}") from err
    except (struct.error, IndexError) as err:
        raise HeaderError(f"{Path(path).name}: truncated GGUF header") from err


def _parse(data: mmap.mmap) -> GgufHeader:
    (version,) = _U32.unpack_from(data, 4)
    if version not in (2, 3):
        raise HeaderError(f"GGUF version {version} is not supported (2 or 3 are)")
    (keys,) = _U64.unpack_from(data, 16)
    if keys > MAX_KEYS:
        raise HeaderError(f"the GGUF header has {keys} keys (more than {MAX_KEYS})")
    end = min(len(data), MAX_HEADER_BYTES)
    offset = 24
    values: dict[str, object] = {}
    vocabulary: tuple[int, int, int] | None = None  # (count, first byte, end byte)
    for _ in range(keys):
        key, offset = _string(data, offset, end)
        (kind,) = _U32.unpack_from(data, offset)
        offset += 4
        if key == "tokenizer.ggml.tokens" and kind == _ARRAY:
            start = offset
            offset = _skip(data, offset, kind, end)
            (count,) = _U64.unpack_from(data, start + 4)
            vocabulary = (count, start + 12, offset)
        elif key in WANTED or key.endswith(".context_length"):
            values[key], offset = _value(data, offset, kind, end)
        else:
            offset = _skip(data, offset, kind, end)
        if vocabulary is not None and _complete(values):
            break  # the rest (merges, token types, the tensor table) is not needed
    architecture = _text(values.get("general.architecture"))
    markers: frozenset[str] = frozenset()
    if vocabulary is not None:
        span = data[vocabulary[1] : vocabulary[2]]
        markers = frozenset(
            m for m in FIM_MARKERS if span.find(_U64.pack(len(m.encode())) + m.encode()) >= 0
        )
    return GgufHeader(
        architecture=architecture,
        name=_text(values.get("general.name")),
        basename=_text(values.get("general.basename")),
        size_label=_text(values.get("general.size_label")),
        file_type=_number(values.get("general.file_type")),
        context_length=_number(values.get(f"{architecture}.context_length")),
        vocabulary_size=vocabulary[0] if vocabulary else None,
        markers=markers,
    )


def _complete(values: dict[str, object]) -> bool:
    """Whether the fields that tell a model apart (besides the vocabulary) are all read."""
    context = f"{values.get('general.architecture')}.context_length"
    return all(k in values for k in ("general.architecture", "general.file_type", context))


def _string(data: mmap.mmap, offset: int, end: int) -> tuple[str, int]:
    (length,) = _U64.unpack_from(data, offset)
    stop = offset + 8 + length
    if stop > end:
        raise HeaderError("the GGUF header is longer than it may be read")
    return data[offset + 8 : stop].decode("utf-8", "replace"), stop


def _value(data: mmap.mmap, offset: int, kind: int, end: int) -> tuple[object, int]:
    if kind == _STRING:
        return _string(data, offset, end)
    if kind in _SCALAR_FORMATS:
        (value,) = struct.unpack_from(_SCALAR_FORMATS[kind], data, offset)
        return value, offset + _SCALAR_SIZES[kind]
    return None, _skip(data, offset, kind, end)


def _skip(data: mmap.mmap, offset: int, kind: int, end: int) -> int:
    """The offset after a value of this type (arrays of strings walk their lengths)."""
    if kind in _SCALAR_SIZES:
        offset += _SCALAR_SIZES[kind]
    elif kind == _STRING:
        (length,) = _U64.unpack_from(data, offset)
        offset += 8 + length
    elif kind == _ARRAY:
        (item,) = _U32.unpack_from(data, offset)
        (count,) = _U64.unpack_from(data, offset + 4)
        offset += 12
        if item in _SCALAR_SIZES:
            offset += count * _SCALAR_SIZES[item]
        elif item == _STRING:
            if count > end:  # each string takes at least 8 bytes: this cannot fit
                raise HeaderError("the GGUF header is longer than it may be read")
            unpack = _U64.unpack_from
            for _ in range(count):
                offset += 8 + unpack(data, offset)[0]
                if offset > end:
                    break
        else:
            raise HeaderError(f"nested GGUF arrays (type {item}) are not read")
    else:
        raise HeaderError(f"unknown GGUF value type {kind}")
    if offset > end:
        raise HeaderError("the GGUF header is longer than it may be read")
    return offset


def _text(value: object) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


def _number(value: object) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None
