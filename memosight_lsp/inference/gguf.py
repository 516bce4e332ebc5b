"""GGUF files as models: dequantized once into a Hugging Face folder in the user cache.

A `.gguf` file (what llama.cpp, Ollama and LM Studio keep on disk) holds the config, the
tokenizer and quantized weights. The first load reads it tensor by tensor, dequantizes each and
writes a plain folder (config.json, tokenizer, safetensors shards) under
$XDG_CACHE_HOME/memosight/gguf/<sha256 of the file>/; later loads find that folder and take
seconds. Weights are stored in bfloat16 (the bits it drops lie below the file's own
quantization error), in float32 for files that were not quantized; the model is then loaded in
whatever precision the settings choose. The folder appears whole or not at all (written beside
it, then renamed), and `gguf.json` in it says where it came from and how it was quantized.

Nothing here runs code from the file: GGUF is a data format (metadata and arrays).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import atomic_file, quantized_cache
from .quantize import Int4Grid, Kind, MixedPlan

log = logging.getLogger(__name__)

# Quantization "gguf" (what `auto` measures for a GGUF file, inference/precision.py): a weight the
# file stores with more bits a weight than INT8_ABOVE_BITS (Q5_*, Q6_K, Q8_0, F16, ...) runs as
# int8, the others as int4; those of GRID_TYPES keep the file's own 4-bit grid (a scale and a
# minimum per 32 inputs, what the "vnni" int4 layout holds), so their values are the file's.
INT8_ABOVE_BITS = 4.5
GRID_TYPES = ("Q4_0", "Q4_1", "Q4_K")
MIX_FORMAT = 1  # bump when the rule changes: cache keys (precision, quantized_cache) carry it
SOURCE_FILE = "gguf.json"  # in a converted folder: the file it came from, its quantization
NAMES_FILE = "gguf-names.json"  # ... and the file's tensor names -> the model's parameters
SHARD_BYTES = 1 << 30  # safetensors shards of at most ~1 GiB keep conversion memory bounded
HASH_CHUNK = 8 << 20
# Progress callback: (message) -> None, called now and then while converting.
Progress = Callable[[str], None]


class GgufError(Exception):
    """The file cannot be used; the message is one line a user can act on."""


@dataclass(frozen=True, kw_only=True)
class GgufSummary:
    """What `memosight models` shows about a GGUF model."""

    file: str
    sha256: str
    architecture: str
    file_type: str  # llama.cpp's name for the mix, e.g. MOSTLY_Q4_K_M
    tensor_types: dict[str, float]  # quantization type -> share of the parameters

    def describe(self) -> str:
        mix = ", ".join(f"{name} {share:.0%}" for name, share in self.tensor_types.items())
        return f"{self.file_type} ({mix})" if mix else self.file_type


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memosight" / "gguf"


def is_gguf(path: str | os.PathLike) -> bool:
    """A .gguf path, or a file that starts with the GGUF magic (Ollama keeps its models as
    blobs/sha256-<hex>, without the suffix)."""
    if str(path).lower().endswith(".gguf"):
        return True
    try:
        with open(Path(path).expanduser(), "rb") as handle:
            return handle.read(4) == b"GGUF"
    except OSError:  # missing, a folder, unreadable: not a GGUF file
        return False


def file_digest(path: Path) -> str:
    """sha256 of the file, remembered by (size, mtime) so a second load does not reread it."""
    stat = path.stat()
    memo = cache_root() / "digests.json"
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    known = _read_json(memo)
    if isinstance(known.get(key), str):
        return known[key]
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    value = digest.hexdigest()
    known[key] = value
    atomic_file.write_json(memo, known)
    return value


def converted_folder(path: str | os.PathLike, *, progress: Progress | None = None) -> Path:
    """The Hugging Face folder for this GGUF file, converting it the first time."""
    source = Path(path).expanduser()
    if not source.is_file():
        raise GgufError(f"GGUF file not found: {source}")
    try:
        digest = file_digest(source)
    except OSError as err:
        raise GgufError(f"cannot read {source}: {err.strerror or err}") from err
    folder = cache_root() / digest[:24]
    if (folder / SOURCE_FILE).is_file():
        return folder
    _convert(source, digest, folder, progress or (lambda message: None))
    return folder


def summary_of(folder: Path) -> GgufSummary | None:
    """The GGUF origin of a converted folder (None for ordinary folders)."""
    data = _read_json(folder / SOURCE_FILE)
    if not data:
        return None
    try:
        return GgufSummary(
            file=str(data["file"]),
            sha256=str(data["sha256"]),
            architecture=str(data["architecture"]),
            file_type=str(data["fileType"]),
            tensor_types={str(k): float(v) for k, v in data["tensorTypes"].items()},
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def mix_rule() -> str:
    """The "gguf" mix's rule in a few characters, for cache keys."""
    return f"mix{MIX_FORMAT}>{INT8_ABOVE_BITS:g}"


def kind_of_type(type_name: str) -> Kind:
    """int8 or int4 for a tensor of this GGUF quantization type (see INT8_ABOVE_BITS)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    if type_name in GRID_TYPES:
        return "int4"
    try:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType[type_name]]
    except KeyError:
        return "int8"
    return "int8" if size * 8 / block > INT8_ABOVE_BITS else "int4"


def mixed_plan(folder: Path) -> MixedPlan:
    """Quantization "gguf" for a converted folder: each weight's kind from its tensor type in
    the GGUF file it came from, and the file's own grid for the 4-bit ones (read from the file
    when asked for)."""
    from transformers import AutoConfig

    from .gguf_tensors import TensorReader

    origin = summary_of(folder)
    if origin is None:
        raise GgufError(f"{folder} was not converted from a GGUF file")
    source = Path(origin.file)
    try:
        if file_digest(source) != origin.sha256:
            raise GgufError(f"{source} changed since it was converted; load it again")
        reader = TensorReader(source)  # the tokenizer's arrays are not needed here
    except (OSError, ValueError) as err:
        raise GgufError(f"cannot read {source}: {_one_line(err)}") from err
    config = AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    processor = _processor(reader, config)
    names = _kept_names(folder, config, processor)
    tensors = {names[t.name]: t for t in reader.tensors if t.name in names}
    kinds = {name: kind_of_type(t.tensor_type.name) for name, t in tensors.items()}

    def grid(name: str) -> Int4Grid | None:
        tensor = tensors.get(name)
        if tensor is None or tensor.tensor_type.name not in GRID_TYPES:
            return None
        return _file_grid(tensor, processor, names)

    return MixedPlan(kinds=kinds, grid=grid)


def _file_grid(tensor: Any, processor: Any, names: dict[str, str]) -> Int4Grid | None:
    """A Q4_0 / Q4_1 / Q4_K tensor's own values, scales and minimums, laid out as the model's
    parameter (the architecture's processor reorders rows for some); None when they do not give
    back exactly the values the conversion wrote (before its bfloat16 rounding)."""
    from gguf import dequantize

    values, scales, minimums = _grid_blocks(tensor.data, tensor.tensor_type.name)
    rows = int(tensor.shape[-1]) if len(tensor.shape) > 1 else 1
    out: list[np.ndarray] = []
    for array in (values.astype(np.float32), scales, minimums):
        array = array.reshape(rows, -1)
        processed = processor.process(
            weights=array, name=tensor.name, tensor_key_mapping=names, parsed_parameters={}
        )
        out.append(np.ascontiguousarray(processed.weights, dtype=np.float32))
    expected = processor.process(
        weights=dequantize(tensor.data, tensor.tensor_type),
        name=tensor.name,
        tensor_key_mapping=names,
        parsed_parameters={},
    ).weights
    result = Int4Grid(
        values=torch.from_numpy(out[0]).to(torch.int32),
        scales=torch.from_numpy(out[1]),
        minimums=torch.from_numpy(out[2]),
    )
    exact = np.asarray(expected, dtype=np.float32).reshape(result.values.shape)
    if not torch.equal(result.dequantized(), torch.from_numpy(np.ascontiguousarray(exact))):
        log.info("the grid of %s does not give back its values: fitted instead", tensor.name)
        return None
    return result


def _grid_blocks(data: np.ndarray, type_name: str) -> tuple[np.ndarray, ...]:
    """Values 0..15 [blocks, per block], and a scale and a minimum per 32 values, of a 4-bit
    type's blocks (w = value * scale + minimum, as gguf's dequantize computes them)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import Q4_K

    _, size = GGML_QUANT_SIZES[GGMLQuantizationType[type_name]]
    blocks = np.asarray(data).reshape(-1, size)
    n = blocks.shape[0]

    def nibbles(packed: np.ndarray, width: int) -> np.ndarray:
        # Each run of `width` bytes holds `width` values in its low nibbles, then as many in
        # its high ones.
        runs = packed.reshape(n, -1, width)
        return np.stack((runs & 0x0F, runs >> 4), axis=2).reshape(n, -1)

    def half(part: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(part).view(np.float16).astype(np.float32)  # [n, 1]

    if type_name == "Q4_K":
        d, dmin = half(blocks[:, 0:2]), half(blocks[:, 2:4])
        sc, m = Q4_K.get_scale_min(blocks[:, 4:16])
        scales = d * sc.astype(np.float32)  # [n, 8]
        minimums = -(dmin * m.astype(np.float32))
        return nibbles(blocks[:, 16:], 32), scales, minimums
    d = half(blocks[:, 0:2])
    if type_name == "Q4_0":  # w = d * (q - 8)
        return nibbles(blocks[:, 2:], 16), d, d * -8
    if type_name == "Q4_1":  # w = d * q + m
        return nibbles(blocks[:, 4:], 16), d, half(blocks[:, 2:4])
    raise ValueError(f"{type_name} has no 4-bit grid")


# -- conversion ------------------------------------------------------------------------------


def _convert(source: Path, digest: str, folder: Path, progress: Progress):
    from .gguf_tensors import TensorReader

    try:
        reader = TensorReader(source)  # the tokenizer is read by transformers (read_tokenizer)
    except (ValueError, OSError) as err:  # bad magic, truncated file, ...
        raise GgufError(f"{source} is not a readable GGUF file: {_one_line(err)}") from err
    config = _config(source)
    _check_tensor_types(reader, source)
    dtype = _storage_dtype(reader)
    work = folder.with_name(f"{folder.name}.partial-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        progress(f"converting {source.name} (first load of this file)")
        read_tokenizer(source).save_pretrained(work)
        _write_weights(reader, config, dtype, work, progress)
        config.dtype = dtype
        config.save_pretrained(work)
        summary = _summary(reader, source, digest, config)
        atomic_file.write_json(
            work / SOURCE_FILE,
            {
                "file": summary.file,
                "sha256": summary.sha256,
                "architecture": summary.architecture,
                "fileType": summary.file_type,
                "tensorTypes": summary.tensor_types,
                "dtype": str(dtype).removeprefix("torch."),
            },
        )
        shutil.rmtree(folder, ignore_errors=True)  # a stale folder without gguf.json
        os.replace(work, folder)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    log.info("converted %s into %s", source, folder)


def _config(source: Path) -> Any:
    """The transformers config the file's metadata describes."""
    from transformers import AutoConfig
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    try:
        parsed = load_gguf_checkpoint(str(source), return_tensors=False)
    except ValueError as err:  # "GGUF model with architecture X is not supported yet."
        raise GgufError(f"{source.name}: {_one_line(err)}") from err
    values = dict(parsed["config"])
    model_type = values.pop("model_type", None)
    if not model_type:
        raise GgufError(f"{source.name} does not say which architecture it holds")
    try:
        return AutoConfig.for_model(model_type, **values)
    except (ValueError, KeyError) as err:
        raise GgufError(f"{source.name}: unsupported architecture {model_type!r}") from err


def _check_tensor_types(reader: Any, source: Path) -> None:
    """One clear line for a quantization type that cannot be dequantized, before any work."""
    from gguf import dequantize

    seen: set[Any] = set()
    for tensor in reader.tensors:
        qtype = tensor.tensor_type
        if qtype in seen:
            continue
        seen.add(qtype)
        try:
            dequantize(tensor.data[:1], qtype)
        except NotImplementedError as err:
            raise GgufError(
                f"{source.name}: tensor {tensor.name} uses quantization type {qtype.name}, "
                "which cannot be dequantized here; use a file quantized as Q4_0..Q8_0, "
                "Q2_K..Q6_K, F16, BF16 or F32"
            ) from err


def read_tokenizer(source: Path) -> Any:
    """The tokenizer stored in the file's metadata."""
    from transformers import AutoTokenizer

    if not source.is_file():
        raise GgufError(f"GGUF file not found: {source}")
    try:
        return AutoTokenizer.from_pretrained(
            source.parent, gguf_file=source.name, local_files_only=True
        )
    except Exception as err:  # transformers raises many types for tokenizers it cannot build
        raise GgufError(f"{source.name}: cannot build its tokenizer: {_one_line(err)}") from err


def _write_weights(reader: Any, config: Any, dtype: torch.dtype, work: Path, progress: Progress):
    """Dequantize tensor by tensor into safetensors shards of at most SHARD_BYTES."""
    from gguf import dequantize
    from safetensors.torch import save_file

    skeleton, processor, names = _name_map(reader, config)
    _keep_names(work, names)  # what the "gguf" quantization reads back (_kept_names)
    expected = set(skeleton.state_dict())
    shard: dict[str, torch.Tensor] = {}
    shard_bytes = 0
    weight_map: dict[str, str] = {}
    shards = 0
    total = len(reader.tensors)

    def flush() -> None:
        nonlocal shard, shard_bytes, shards
        if not shard:
            return
        shards += 1
        name = f"model-{shards:05d}.safetensors"
        save_file(shard, str(work / name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, name))
        shard, shard_bytes = {}, 0

    for i, tensor in enumerate(reader.tensors, 1):
        values = dequantize(tensor.data, tensor.tensor_type)
        result = processor.process(
            weights=values, name=tensor.name, tensor_key_mapping=names, parsed_parameters={}
        )
        hf_name = names.get(result.name)
        if hf_name is None:
            continue
        array = np.ascontiguousarray(result.weights)
        if not array.flags.writeable:  # a view of the memory-mapped file (F32 tensors)
            array = array.copy()
        weight = torch.from_numpy(array).to(dtype)
        shard[hf_name] = weight
        shard_bytes += weight.numel() * weight.element_size()
        if shard_bytes >= SHARD_BYTES:
            flush()
        if i % 32 == 0 or i == total:
            progress(f"dequantized {i}/{total} tensors")
    flush()
    missing = expected - set(weight_map) - _tied(skeleton, config)
    if missing:
        raise GgufError(
            f"the GGUF file lacks {len(missing)} weights the architecture needs "
            f"(e.g. {sorted(missing)[0]})"
        )
    atomic_file.write_json(
        work / "model.safetensors.index.json", {"metadata": {}, "weight_map": weight_map}
    )


def _name_map(reader: Any, config: Any) -> tuple[Any, Any, dict[str, str]]:
    """The architecture's skeleton (meta tensors), transformers' tensor processor for it and
    the map from the file's tensor names to the model's parameter names."""
    from transformers import AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import get_gguf_hf_weights_map

    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    processor = _processor(reader, config)
    return skeleton, processor, get_gguf_hf_weights_map(skeleton, processor)


def _processor(reader: Any, config: Any) -> Any:
    """transformers' tensor processor for the file's architecture (it reorders rows for some)."""
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor

    architecture = _field(reader, "general.architecture") or config.model_type
    return TENSOR_PROCESSORS.get(architecture, TensorProcessor)(config=config.to_dict())


def _kept_names(folder: Path, config: Any, processor: Any) -> dict[str, str]:
    """The map from the file's tensor names to the model's parameters, kept in the converted
    folder after the first time: transformers builds it by walking a skeleton of the model
    with a name table made again for every module (seconds, at every quantization)."""
    from transformers import AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import get_gguf_hf_weights_map

    kept = _read_json(folder / NAMES_FILE)
    # Kept with the transformers version that made it: another may map the names otherwise.
    same_maker = kept.get("transformers") == quantized_cache.transformers_version()
    names = kept.get("names") if same_maker else None
    if isinstance(names, dict) and all(isinstance(v, str) for v in names.values()) and names:
        return names
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    names = dict(get_gguf_hf_weights_map(skeleton, processor))
    _keep_names(folder, names)
    return names


def _keep_names(folder: Path, names: dict[str, str]) -> None:
    """Best effort: a folder that cannot take the file makes the map again next time."""
    try:
        maker = quantized_cache.transformers_version()
        atomic_file.write_json(folder / NAMES_FILE, {"transformers": maker, "names": names})
    except OSError as err:
        log.info("cannot keep the tensor names in %s: %s", folder, err)


def _tied(model: Any, config: Any) -> set[str]:
    """Weights that are the input embedding when the config ties them (not stored)."""
    if not getattr(config, "tie_word_embeddings", False):
        return set()
    head = model.get_output_embeddings()
    return {f"{name}.weight" for name, module in model.named_modules() if module is head}


def _summary(reader: Any, source: Path, digest: str, config: Any) -> GgufSummary:
    counts: Counter[str] = Counter()
    for tensor in reader.tensors:
        counts[tensor.tensor_type.name] += int(tensor.n_elements)
    total = sum(counts.values()) or 1
    return GgufSummary(
        file=str(source.resolve()),
        sha256=digest,
        architecture=str(_field(reader, "general.architecture") or config.model_type),
        file_type=_file_type(reader),
        tensor_types={name: round(n / total, 4) for name, n in counts.most_common()},
    )


def _file_type(reader: Any) -> str:
    from gguf import LlamaFileType

    value = _field(reader, "general.file_type")
    if value is None:
        return "unknown"
    try:
        return LlamaFileType(int(value)).name
    except ValueError:
        return f"file type {value}"


def _field(reader: Any, key: str) -> Any:
    """A scalar metadata field (str or number), None when absent."""
    field = reader.fields.get(key)
    if field is None or not field.data:
        return None
    part = field.parts[field.data[0]]
    if part.dtype == np.uint8:  # strings are stored as bytes
        return bytes(part).decode("utf-8", errors="replace")
    return part.tolist()[0] if len(part) else None


def _storage_dtype(reader: Any) -> torch.dtype:
    """float32 for files whose matrices were not quantized (F32 / F16), else bfloat16."""
    from gguf import GGMLQuantizationType

    dense = {GGMLQuantizationType.F32, GGMLQuantizationType.F16}
    matrices = [t for t in reader.tensors if len(t.shape) > 1]
    return torch.float32 if all(t.tensor_type in dense for t in matrices) else torch.bfloat16


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
