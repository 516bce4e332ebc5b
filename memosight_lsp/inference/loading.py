"""Load the embedded default model or any Hugging Face causal LM from a local folder, offline."""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Nothing here may reach a hub (the engine package sets the offline switches; every load below
# is local_files_only) or run code from a model folder (trust_remote_code is always False).
import torch

from . import (
    fast_tokenizer,
    gguf,
    llama_family,
    native_kernels,
    overlap,
    precision,
    quantized_cache,
)
from .errors import ModelLoadError
from .fim import FimFormat, resolve_fim_format
from .fused_trunk import prepare_trunk
from .quantize import MixedPlan, quantize_model

log = logging.getLogger(__name__)

EMBEDDED_MODEL_DIR = Path(__file__).resolve().parent.parent / "models" / "default"
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json")
# Weights stored as pickle: loading them can run code (see load_model's allow_pickle).
PICKLE_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


@dataclass(kw_only=True)
class LoadedModel:
    model: Any  # a transformers PreTrainedModel in eval mode
    tokenizer: Any
    fim: FimFormat | None
    source: str  # the folder it was loaded from
    name: str
    embedded: bool
    device: torch.device
    dtype: torch.dtype  # of the activations and the weights left dense
    precision: precision.Precision
    num_parameters: int
    load_seconds: float
    stop_token_ids: frozenset[int] = field(default_factory=frozenset)
    gguf: gguf.GgufSummary | None = None  # set when the model came from a .gguf file
    native_kernels: str = "torch's"  # describe() of inference/native_kernels.py when it loaded
    runs_native: bool = False  # whether those are the native ones
    model_digest: str = ""  # of its folder's files (precision.model_digest): cache keys

    def kernels(self) -> str:
        """Whose kernels multiply and attend: the project's native ones serve bfloat16 and
        quantized models on a CPU that has them (inference/native_kernels.py), if they were built
        when this model loaded."""
        half = self.precision.quantization != "none" or self.dtype == torch.bfloat16
        if self.device.type != "cpu" or not half:
            return "torch's"
        return self.native_kernels

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "embedded": self.embedded,
            "gguf": self.gguf.describe() if self.gguf else None,
            "architecture": type(self.model).__name__,
            "fimFormat": self.fim.name if self.fim else None,
            "parameters": self.num_parameters,
            "device": str(self.device),
            "dtype": str(self.dtype).removeprefix("torch."),
            "precision": self.precision.describe(),
            "precisionReason": self.precision.reason,
            "precisionMeasured": precision.describe_measurement(self.precision.measured),
            "kernels": self.kernels(),
            "vocabSize": len(self.tokenizer),
            "loadSeconds": round(self.load_seconds, 3),
        }


def _may_run_native_kernels(
    asked: precision.Precision | None, folder: Path, device: torch.device
) -> bool:
    """Whether this load may quantize or run bfloat16 on the CPU (the kernels of
    inference/native_kernels.py): asked for, or `auto` measuring a model too large for float32
    alone."""
    if device.type != "cpu":
        return False
    if asked is None:
        return precision.weight_bytes(folder) >= precision.SMALL_MODEL_BYTES
    return asked.quantization != "none" or asked.dtype == torch.bfloat16


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("device 'cuda' was asked for but no CUDA device is available")
    if device not in ("cpu", "cuda"):
        raise ModelLoadError(f"unknown device {device!r}; use auto, cpu or cuda")
    return torch.device(device)


def model_folder(
    path: str | os.PathLike | None, *, progress: gguf.Progress | None = None
) -> tuple[Path, bool]:
    """The folder to load from and whether it is the embedded default; checks it looks loadable.
    A .gguf file is converted into a cached folder the first time."""
    if path is not None and gguf.is_gguf(path):
        try:
            return gguf.converted_folder(path, progress=progress), False
        except gguf.GgufError as err:
            raise ModelLoadError(str(err)) from err
    embedded = path is None
    folder = EMBEDDED_MODEL_DIR if path is None else Path(path).expanduser()
    if not folder.exists():
        if embedded:
            raise ModelLoadError(
                f"the embedded default model is missing at {folder}; "
                "reinstall memosight-lsp or pass --model PATH to a local model folder"
            )
        raise ModelLoadError(f"model folder not found: {folder}")
    if not folder.is_dir():
        raise ModelLoadError(f"model path is not a folder: {folder}")
    if not (folder / "config.json").is_file():
        raise ModelLoadError(f"{folder} has no config.json: not a Hugging Face model folder")
    if not any(any(folder.glob(pattern)) for pattern in WEIGHT_PATTERNS):
        raise ModelLoadError(f"{folder} has no weights (*.safetensors or pytorch_model*.bin)")
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ModelLoadError(f"{folder} has no tokenizer files (tokenizer.json, vocab.json ...)")
    return folder, embedded


def load_tokenizer(path: str | os.PathLike | None = None) -> Any:
    """Just the tokenizer (for token counting without loading weights)."""
    if path is not None and gguf.is_gguf(path):
        try:  # from the file itself: no need to convert the weights
            return gguf.read_tokenizer(Path(path).expanduser())
        except gguf.GgufError as err:
            raise ModelLoadError(str(err)) from err
    folder, _ = model_folder(path)

    def build() -> Any:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)

    try:  # read back in Rust when it was kept and checked (inference/fast_tokenizer.py)
        return fast_tokenizer.load(folder, build)
    except Exception as err:  # transformers raises many types for broken tokenizer files
        raise ModelLoadError(f"cannot load the tokenizer in {folder}: {_one_line(err)}") from err


def position_limit(config: Any) -> int | None:
    """The longest sequence the model's positions cover, when its config says."""
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return int(limit) if limit else None


def stop_token_ids(tokenizer: Any, fim: FimFormat | None) -> frozenset[int]:
    """EOS plus the family's end-of-middle tokens, where the vocabulary has them."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    vocab = fast_tokenizer.token_lookup(tokenizer)
    for token in fim.stop_tokens if fim else ():
        if token in vocab:
            ids.add(int(vocab[token]))
    return frozenset(ids)


def load_model(
    path: str | os.PathLike | None = None,
    *,
    device: str = "auto",
    dtype: str = "auto",
    quantization: str = "auto",
    fim_format: str = "auto",
    progress: gguf.Progress | None = None,
    allow_pickle: bool = False,
    remeasure: bool = False,
) -> LoadedModel:
    """Load a causal LM and its tokenizer from a local folder or a .gguf file (None: the
    embedded default), in the precision the settings ask for or, for `auto`, the one measured
    fastest for it here (inference/precision.py). `progress` hears about long steps.

    Only safetensors weights load unless `allow_pickle` (unpickling a file can run code: the
    server passes the user-only setting model.allowPickle, the command line True, since the
    person typing --model chose the folder). `remeasure`: measure the `auto` precision again
    whatever is cached."""
    started = time.perf_counter()
    torch_device = resolve_device(device)
    try:
        asked = precision.explicit(dtype, quantization, torch_device)
    except ValueError as err:
        raise ModelLoadError(str(err)) from err
    folder, embedded = model_folder(path, progress=progress)
    if not allow_pickle and not any(folder.glob("*.safetensors")):
        pickled = sorted(p.name for pattern in PICKLE_PATTERNS for p in folder.glob(pattern))
        if pickled:
            raise ModelLoadError(
                f"{folder} has pickle weights only ({pickled[0]}); pickle can run code, so they "
                "load only with memosight.model.allowPickle set in your user settings "
                "(or convert them to safetensors)"
            )
    # Read while the weights' file reads (inference/overlap.py), or where first needed.
    tokenizer_load = overlap.Deferred(lambda: load_tokenizer(folder))
    config = functools.cache(lambda: read_config(folder))  # read when a load needs it
    origin = gguf.summary_of(folder)
    asked, note = _gguf_only(asked, origin, path, dtype, torch_device)

    @functools.cache
    def plan() -> MixedPlan:
        # Quantization "gguf": read from the file once, whichever loads below ask for it.
        try:
            return gguf.mixed_plan(folder)
        except gguf.GgufError as err:
            raise ModelLoadError(f"cannot quantize {folder} as gguf: {err}") from err

    def load(candidate: precision.Precision) -> Any | None:
        try:
            # Measured candidates are not kept on disk: only the chosen one is.
            return _load_weights(
                folder,
                config(),
                candidate,
                torch_device,
                keep=False,
                allow_pickle=allow_pickle,
                plan=plan,
            )
        except ModelLoadError as err:
            if candidate.quantization == "none":
                raise
            log.info("precision %s skipped: %s", candidate.describe(), err)
            return None

    if _may_run_native_kernels(asked, folder, torch_device):
        # Adopts kernels built since the last load, or starts building them in the background:
        # this load and its model run on torch's kernels meanwhile (inference/native_kernels.py).
        native_kernels.refresh(progress)
    # A GGUF file's own mix of int8 and int4 is `auto`'s quantized candidate, where the file
    # is still there to read its types and grids from.
    mix = gguf.mix_rule() if origin and Path(origin.file).is_file() else None
    chosen = asked or precision.choose(
        folder,
        load,
        tokenizer_load.result,
        progress=progress,
        remeasure=remeasure,
        mix=mix,
        interim=native_kernels.being_built(),
    )
    if note:
        chosen = dataclasses.replace(chosen, reason=f"{chosen.reason}; {note}")
    model, num_parameters = _load_weights(
        folder,
        _kept_config(folder, chosen) or config(),
        chosen,
        torch_device,
        count=True,
        allow_pickle=allow_pickle,
        plan=plan,
        meanwhile=tokenizer_load.run,
    )
    tokenizer = tokenizer_load.result()
    try:
        fim = resolve_fim_format(fast_tokenizer.token_lookup(tokenizer), fim_format)
    except ValueError as err:
        raise ModelLoadError(str(err)) from err
    half = _may_run_native_kernels(chosen, folder, torch_device)
    kernels_used = native_kernels.describe() if half else "torch's"
    runs_native = half and native_kernels.kernels() is not None
    if embedded:
        name = "memosight-default"
    else:
        name = Path(origin.file).name.removesuffix(".gguf") if origin else folder.name
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        fim=fim,
        source=origin.file if origin else str(folder),
        name=name,
        embedded=embedded,
        device=torch_device,
        dtype=chosen.dtype,
        precision=chosen,
        num_parameters=num_parameters,
        load_seconds=time.perf_counter() - started,
        stop_token_ids=stop_token_ids(tokenizer, fim),
        gguf=origin,
        native_kernels=kernels_used,
        runs_native=runs_native,
        model_digest=precision.model_digest(folder),
    )


def _gguf_only(
    asked: precision.Precision | None,
    origin: gguf.GgufSummary | None,
    path: str | os.PathLike | None,
    dtype: str,
    device: torch.device,
) -> tuple[precision.Precision | None, str | None]:
    """What the settings ask of this model, and a note for its precision's reason. Quantization
    "gguf" keeps a GGUF file's own mix; a setting outlives the model it was chosen for (auto's
    pick, the embedded fallback), so on any other model it means auto, with one warning."""
    if asked is None or asked.quantization != "gguf" or origin is not None:
        return asked, None
    model = "the embedded model" if path is None else str(path)
    note = f"quantization gguf applies to GGUF files only ({model} is not one): loaded as auto"
    log.warning("%s", note)
    return precision.explicit(dtype, "auto", device), note


def read_config(folder: Path) -> Any:
    """The model's config, as transformers reads it from the folder."""
    from transformers import AutoConfig

    _quiet_transformers()
    try:
        return AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    except (ValueError, KeyError) as err:
        raise ModelLoadError(f"unsupported model in {folder}: {_one_line(err)}") from err


def _quiet_transformers() -> None:
    """No progress bars from transformers: a bar per load is noise in editor logs and CLI
    output (called where a load imports transformers; a cached one need not)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def _kept_config(folder: Path, chosen: precision.Precision) -> Any | None:
    """The config kept beside the quantized model this load reads (quantized_cache.kept_config:
    no import of transformers' model packages), if one is."""
    if chosen.quantization == "none":
        return None
    return quantized_cache.kept_config(
        quantized_cache.cache_file(folder, _kept_kind(chosen), chosen.dtype)
    )


def _kept_kind(chosen: precision.Precision) -> str:
    """The name a quantized form is kept under: "gguf" forms per rule (another rule makes
    another form)."""
    kind: str = chosen.quantization
    return f"gguf {gguf.mix_rule()}" if kind == "gguf" else kind


def _from_folder(
    folder: Path,
    config: Any,
    chosen: precision.Precision,
    device: torch.device,
    allow_pickle: bool,
    plan: Callable[[], MixedPlan] | None = None,
) -> tuple[Any, int]:
    """The model from its folder's weights, quantized as chosen (`plan()`: quantization
    "gguf"'s kinds); and its parameter count."""
    from transformers import AutoModelForCausalLM

    _quiet_transformers()
    config = llama_family.transformers_config(config)
    # True: refuse *.bin even where transformers would fall back to it; None: its own choice.
    safetensors_only = None if allow_pickle else True
    options: dict[str, Any] = dict(
        config=config,
        dtype=chosen.dtype,
        local_files_only=True,
        trust_remote_code=False,
        use_safetensors=safetensors_only,
    )
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa", **options)
    except (torch.OutOfMemoryError, MemoryError) as err:
        raise ModelLoadError(f"out of memory loading {folder} on {device}") from err
    except ValueError as err:
        if "sdpa" in str(err).lower() or "attention" in str(err).lower():
            model = AutoModelForCausalLM.from_pretrained(folder, **options)
        else:
            raise ModelLoadError(f"unsupported model in {folder}: {_one_line(err)}") from err
    except Exception as err:
        raise ModelLoadError(f"cannot load the model in {folder}: {_one_line(err)}") from err
    num_parameters = sum(p.numel() for p in model.parameters())
    try:
        model.to(device)  # type: ignore[arg-type]
    except (torch.OutOfMemoryError, MemoryError) as err:
        raise ModelLoadError(f"out of memory moving the model to {device}") from err
    model.eval()
    try:
        mixed = plan() if chosen.quantization == "gguf" and plan is not None else None
        quantize_model(model, chosen.quantization, plan=mixed)
    except ValueError as err:
        raise ModelLoadError(f"cannot quantize {folder} as {chosen.quantization}: {err}") from err
    return model, num_parameters


def _load_weights(
    folder: Path,
    config: Any,
    chosen: precision.Precision,
    device: torch.device,
    *,
    count: bool = False,
    keep: bool = True,
    allow_pickle: bool = False,
    plan: Callable[[], MixedPlan] | None = None,
    meanwhile: Callable[[], None] | None = None,
) -> Any:
    """The model in eval mode on `device` in the chosen precision, its trunk built (with
    `count`: also the number of parameters it had before quantization). A quantized model is
    read from its quantized form when one was kept (quantized_cache), else made and, with
    `keep`, kept. `meanwhile` runs during the kept form's read, if there is one."""
    kept = None
    if chosen.quantization != "none":
        kept_file = quantized_cache.cache_file(folder, _kept_kind(chosen), chosen.dtype)
        kept = quantized_cache.load(kept_file, copy.deepcopy(config), chosen.dtype, meanwhile)
    if kept is not None:
        model, num_parameters = kept
        model.to(device)  # type: ignore[arg-type]
        quantized_cache.keep_config(kept_file, config)  # the next load reads it back
    else:
        model, num_parameters = _from_folder(folder, config, chosen, device, allow_pickle, plan)
        if keep and chosen.quantization != "none":
            quantized_cache.save(model, kept_file, num_parameters)
    # The decoders' trunk re-lays the weights out once (fused_trunk): part of loading, not of
    # the first keystroke.
    prepare_trunk(model)
    return (model, num_parameters) if count else model


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
