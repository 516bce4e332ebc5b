"""Quantized models kept on disk, so a second load reads int8 / int4 weights as they are.

Quantizing a real model at every load costs seconds and, worse, memory: the dense weights are
mapped in while their quantized copies are made, so the peak is far above what stays resident
(figures: docs/speculative.md). The first quantized load therefore writes one safetensors file under
$XDG_CACHE_HOME/memosight/quantized/, keyed by the model's files, the quantization and the
dtype; later loads build the model skeleton without weights (the meta device), put the stored
tensors in place and recompute the rotary tables. A file that is missing, stale or unreadable
is simply made again; it is written beside its name and renamed, so it is whole or absent.

A Llama-family model's config is kept beside its file too (`keep_config`): read back as the
project's own config class (`kept_config`, family_config.py), it spares a start-up the import of
transformers (its package and `transformers.models`, which indexes every model's folder when
imported: figures in docs/speculative.md).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from . import atomic_file, llama_family, overlap
from .family_config import LlamaFamilyConfig
from .quantize import (
    QuantizedEmbedding,
    QuantizedLinear,
    QuantizedWeight,
    native_layout,
    quantizable_linears,
)

log = logging.getLogger(__name__)

FORMAT = 6  # bump when the stored layout changes (3: vnni; 4: sums by 32; 6: int4 groups of 32)
_ROTARY_TYPES = ("RotaryEmbedding",)  # modules whose non-persistent tables are recomputed


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memosight" / "quantized"


def cache_file(folder: Path, kind: str, dtype: torch.dtype) -> Path:
    """Where the quantized form of the model in `folder` is kept (one per layout, so a machine
    that can build the native kernels later makes its own)."""
    digest = hashlib.sha256(f"{FORMAT}|{kind}|{native_layout()}|{dtype}".encode())
    for path in sorted(folder.iterdir()):
        if path.name == "config.json":
            digest.update(path.read_bytes())
        elif path.suffix in (".safetensors", ".bin"):
            stat = path.stat()
            digest.update(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return cache_root() / f"{digest.hexdigest()[:24]}.safetensors"


def save(model: Any, path: Path, num_parameters: int) -> None:
    """Store a quantized model's tensors, before its trunk fuses them (best effort: a failure
    only costs the next load its time). `num_parameters`: the count before quantization."""
    from safetensors.torch import save_file

    tensors: dict[str, torch.Tensor] = {}
    layout: dict[str, Any] = {}
    for name, module in model.named_modules():
        if isinstance(module, QuantizedLinear):
            layout[name] = {"fingerprint": module.dense_fingerprint}
            _put(tensors, layout[name], f"{name}.quantized", module.quantized)
        elif isinstance(module, QuantizedEmbedding):
            layout[name] = {"embedding": True, "shared": module.shared}
            if not module.shared:  # a tied table is the head's weight, stored with the head
                _put(tensors, layout[name], f"{name}.quantized", module.quantized)
    for name, tensor in model.state_dict().items():
        tensors[name] = tensor.contiguous()
    metadata = {"layout": json.dumps(layout), "parameters": str(num_parameters)}
    temp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(temp), metadata=metadata)
        os.replace(temp, path)
    except OSError as err:
        temp.unlink(missing_ok=True)
        log.warning("cannot keep the quantized model in %s: %s", path, err)


def load(
    path: Path, config: Any, dtype: torch.dtype, meanwhile: Callable[[], None] | None = None
) -> tuple[Any, int] | None:
    """The model rebuilt from a stored file and its parameter count before quantization, or
    None when there is no usable file. `meanwhile` runs during the file's read (read_tensors);
    not at all when there is no file."""
    if not path.is_file():
        return None
    try:
        metadata, tensors = read_tensors(path, meanwhile)
        layout = json.loads(metadata["layout"])
        num_parameters = int(metadata["parameters"])
    except (OSError, KeyError, ValueError, RuntimeError) as err:
        log.warning("ignoring the quantized cache %s: %s", path, err)
        return None
    config.tie_word_embeddings = False  # the stored head is its own (quantized) weight
    with torch.device("meta"):
        if llama_family.unsupported_reason(config) is None:
            # No transformers modeling import on the start-up path (inference/llama_family.py).
            model = llama_family.build(config, dtype)
        else:
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_config(
                config, dtype=dtype, attn_implementation="sdpa"
            )
    names = {id(module): name for name, module in model.named_modules()}
    try:
        for parent, attribute, linear in list(quantizable_linears(model)):
            name = names[id(linear)]
            entry = layout[name]
            weight = _take(tensors, entry, f"{name}.quantized")
            bias = tensors.get(f"{name}.bias")  # also loaded below, with the dense tensors
            setattr(parent, attribute, QuantizedLinear(weight, bias, entry["fingerprint"]))
        _restore_embedding(model, layout, tensors, dtype)
        model.load_state_dict(tensors, strict=True, assign=True)
    except (KeyError, RuntimeError, ValueError) as err:
        log.warning("ignoring the quantized cache %s: %s", path, err)
        return None
    _recompute_tables(model, config)
    if any(t.is_meta for t in [*model.parameters(), *model.buffers()]):
        log.warning("ignoring the quantized cache %s: the model has tables it cannot rebuild", path)
        return None
    model.config.tie_word_embeddings = False
    return model.eval(), num_parameters


def config_file(path: Path) -> Path:
    """Where the config of the model stored at `path` is kept."""
    return path.with_name(f"{path.stem}.config.json")


def keep_config(path: Path, config: Any) -> None:
    """Keep a Llama-family model's config (transformers' own class, as read from its folder)
    beside its stored file, once per transformers version (best effort)."""
    if isinstance(config, LlamaFamilyConfig):
        return  # a kept config read back: transformers' class is not at hand (nor imported)
    target = config_file(path)
    if not type(config).model_type or llama_family.unsupported_reason(config) is not None:
        return  # a generic config class, or a model built otherwise
    version = transformers_version()
    if _kept_version(target) == version:
        return
    kept = {"transformers": version, "config": config.to_dict()}
    try:
        atomic_file.write_json(target, kept, indent=None)
    except (OSError, TypeError, ValueError) as err:
        log.warning("cannot keep the model's config in %s: %s", target, err)


def transformers_version() -> str | None:
    """The installed transformers' version, read from its package metadata (importing it would
    cost what a kept config saves)."""
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return None


def _read_kept(target: Path) -> tuple[Any, Any]:
    """What keep_config wrote at `target`: the transformers version that kept it and the
    config's values (OSError, ValueError, KeyError or TypeError when it is missing or not that)."""
    kept = json.loads(target.read_text())
    return kept["transformers"], kept["config"]


def _kept_version(target: Path) -> str | None:
    """The transformers version that kept the config at `target` (None: none readable)."""
    try:
        return str(_read_kept(target)[0])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def kept_config(path: Path) -> LlamaFamilyConfig | None:
    """The config kept beside the model stored at `path`, as the project's own config class
    (family_config.py: what llama_family builds from and a KV cache reads, without importing
    transformers; llama_family.transformers_config gives transformers' class back); None when
    none is kept for this transformers version."""
    try:
        version, values = _read_kept(config_file(path))
        if version != transformers_version() or not path.is_file():
            return None
        if not isinstance(values, dict) or not isinstance(values.get("model_type"), str):
            raise ValueError("no model type")
        config = LlamaFamilyConfig(values)
    except (OSError, ValueError, KeyError, TypeError) as err:
        log.debug("no kept config for %s: %s", path, err)
        return None
    return config if llama_family.unsupported_reason(config) is None else None


_DTYPES = {
    "F32": torch.float32,
    "BF16": torch.bfloat16,
    "F16": torch.float16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "I32": torch.int32,
    "I64": torch.int64,
}


def read_tensors(
    path: Path, meanwhile: Callable[[], None] | None = None
) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    """A safetensors file read into memory torch allocated, tensor by tensor in one scatter
    read: mapped tensors would be misaligned for the int8 / int4 kernels (they crash on them),
    and copying mapped ones would hold the whole file twice at the peak. `meanwhile` runs on
    this thread while the read runs on another (inference/overlap.py)."""
    tensors: dict[str, torch.Tensor] = {}
    buffers: list[memoryview] = []
    with path.open("rb") as handle:
        size = int.from_bytes(handle.read(8), "little")
        header = json.loads(handle.read(size))
        start = 8 + size
        metadata = header.pop("__metadata__", {}) or {}
        expected = start
        for name, info in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
            begin, end = info["data_offsets"]
            tensor = torch.empty(info["shape"], dtype=_DTYPES[info["dtype"]])
            view = tensor.view(-1).view(torch.uint8).numpy().data  # a memoryview
            if start + begin != expected or view.nbytes != end - begin:
                raise ValueError(f"{path.name} has a gap or an overlap at {name}")
            expected = start + end
            buffers.append(view)
            tensors[name] = tensor
        read = overlap.read_meanwhile(handle.fileno(), buffers, start, meanwhile)
    if read != expected - start:
        raise ValueError(f"{path.name} is truncated")
    return metadata, tensors


def _put(tensors: dict, layout: dict, prefix: str, weight: QuantizedWeight) -> None:
    layout.update(kind=weight.kind, outFeatures=weight.out_features, inFeatures=weight.in_features)
    layout["layout"] = weight.layout
    if weight.sums is not None:
        tensors[f"{prefix}.sums"] = weight.sums.contiguous()
    tensors[f"{prefix}.data"] = weight.data.contiguous()
    tensors[f"{prefix}.scales"] = weight.scales.contiguous()
    if weight.wide is not None:
        layout["wide"] = {}
        _put(tensors, layout["wide"], f"{prefix}.wide", weight.wide)


def _take(tensors: dict, layout: dict, prefix: str) -> QuantizedWeight:
    wide = _take(tensors, layout["wide"], f"{prefix}.wide") if "wide" in layout else None
    return QuantizedWeight(
        kind=layout["kind"],
        data=tensors.pop(f"{prefix}.data"),
        scales=tensors.pop(f"{prefix}.scales"),
        out_features=int(layout["outFeatures"]),
        in_features=int(layout["inFeatures"]),
        wide=wide,
        layout=layout.get("layout", "aten"),
        sums=tensors.pop(f"{prefix}.sums", None),
    )


def _restore_embedding(model: Any, layout: dict, tensors: dict, dtype: torch.dtype) -> None:
    """The int8 embedding table as it was stored (files from before it was quantized keep
    their dense one)."""
    name = _name_of(model, model.get_input_embeddings())
    entry = layout.get(name)
    if entry is None or not entry.get("embedding"):
        return
    if entry["shared"]:
        head = model.get_output_embeddings()
        if not isinstance(head, QuantizedLinear):
            raise ValueError("the embedding table shares a head that is not quantized")
        weight = head.quantized
    else:
        weight = _take(tensors, entry, f"{name}.quantized")
    model.set_input_embeddings(QuantizedEmbedding(weight, dtype, shared=entry["shared"]))


def _name_of(model: Any, target: Any) -> str:
    for name, module in model.named_modules():
        if module is target:
            return name
    raise KeyError("module not found")


def _recompute_tables(model: Any, config: Any) -> None:
    """Rotary tables are not stored (non-persistent buffers): make them again for real."""
    for parent in list(model.modules()):
        for attribute, child in list(parent.named_children()):
            if type(child).__name__.endswith(_ROTARY_TYPES):
                setattr(parent, attribute, type(child)(config=config))
