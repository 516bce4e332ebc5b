"""Load the embedded default model or any Hugging Face causal LM from a local folder, offline."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Nothing here may reach a hub (the engine package sets the offline switches; every load below
# is local_files_only) or run code from a model folder (trust_remote_code is always False).
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from .fim import FimFormat, resolve_fim_format
from .fused_trunk import trunk_for

EMBEDDED_MODEL_DIR = Path(__file__).resolve().parent.parent / "models" / "default"
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json")
# Weights stored as pickle: loading them can run code (see load_model's allow_pickle).
PICKLE_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


class ModelLoadError(Exception):
    """A model could not be loaded; the message is one line a user can act on."""


@dataclass(kw_only=True)
class LoadedModel:
    model: Any  # a transformers PreTrainedModel in eval mode
    tokenizer: Any
    fim: FimFormat | None
    source: str  # the folder it was loaded from
    name: str
    embedded: bool
    device: torch.device
    dtype: torch.dtype
    num_parameters: int
    load_seconds: float
    stop_token_ids: frozenset[int] = field(default_factory=frozenset)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "embedded": self.embedded,
            "architecture": type(self.model).__name__,
            "fimFormat": self.fim.name if self.fim else None,
            "parameters": self.num_parameters,
            "device": str(self.device),
            "dtype": str(self.dtype).removeprefix("torch."),
            "vocabSize": len(self.tokenizer),
            "loadSeconds": round(self.load_seconds, 3),
        }


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("device 'cuda' was asked for but no CUDA device is available")
    if device not in ("cpu", "cuda"):
        raise ModelLoadError(f"unknown device {device!r}; use auto, cpu or cuda")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """fp32 on CPU: bf16 is not faster there for one token and breaks losslessness; bf16 on GPU."""
    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
            dtype
        ]
    except KeyError:
        choices = "auto, float32, bfloat16 or float16"
        raise ModelLoadError(f"unknown dtype {dtype!r}; use {choices}") from None


def model_folder(path: str | os.PathLike | None) -> tuple[Path, bool]:
    """The folder to load from and whether it is the embedded default; checks it looks loadable."""
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
    folder, _ = model_folder(path)
    try:
        return AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
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
    vocab = tokenizer.get_vocab()
    for token in fim.stop_tokens if fim else ():
        if token in vocab:
            ids.add(int(vocab[token]))
    return frozenset(ids)


def load_model(
    path: str | os.PathLike | None = None,
    *,
    device: str = "auto",
    dtype: str = "auto",
    fim_format: str = "auto",
    allow_pickle: bool = False,
) -> LoadedModel:
    """Load a causal LM and its tokenizer from a local folder (None: the embedded default).

    Only safetensors weights load unless `allow_pickle` (unpickling a file can run code: the
    server passes the user-only setting model.allowPickle, the command line True, since the
    person typing --model chose the folder)."""
    started = time.perf_counter()
    hf_logging.disable_progress_bar()  # a bar per load is noise in editor logs and CLI output
    folder, embedded = model_folder(path)
    if not allow_pickle and not any(folder.glob("*.safetensors")):
        pickled = sorted(p.name for pattern in PICKLE_PATTERNS for p in folder.glob(pattern))
        if pickled:
            raise ModelLoadError(
                f"{folder} has pickle weights only ({pickled[0]}); pickle can run code, so they "
                "load only with memosight.model.allowPickle set in your user settings "
                "(or convert them to safetensors)"
            )
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    # True: refuse *.bin even where transformers would fall back to it; None: its own choice.
    safetensors_only = None if allow_pickle else True
    try:
        config = AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    except (ValueError, KeyError) as err:
        raise ModelLoadError(f"unsupported model in {folder}: {_one_line(err)}") from err
    tokenizer = load_tokenizer(folder)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            folder,
            config=config,
            dtype=torch_dtype,
            local_files_only=True,
            trust_remote_code=False,
            use_safetensors=safetensors_only,
            attn_implementation="sdpa",
        )
    except (torch.OutOfMemoryError, MemoryError) as err:
        raise ModelLoadError(f"out of memory loading {folder} on {torch_device}") from err
    except ValueError as err:
        if "sdpa" in str(err).lower() or "attention" in str(err).lower():
            model = AutoModelForCausalLM.from_pretrained(
                folder,
                config=config,
                dtype=torch_dtype,
                local_files_only=True,
                trust_remote_code=False,
                use_safetensors=safetensors_only,
            )
        else:
            raise ModelLoadError(f"unsupported model in {folder}: {_one_line(err)}") from err
    except Exception as err:
        raise ModelLoadError(f"cannot load the model in {folder}: {_one_line(err)}") from err
    try:
        model.to(torch_device)  # type: ignore[arg-type]
    except (torch.OutOfMemoryError, MemoryError) as err:
        raise ModelLoadError(f"out of memory moving the model to {torch_device}") from err
    model.eval()
    # The decoders' trunk re-lays the weights out once (fused_trunk): part of loading, not of
    # the first keystroke.
    trunk_for(model)
    try:
        fim = resolve_fim_format(tokenizer.get_vocab(), fim_format)
    except ValueError as err:
        raise ModelLoadError(str(err)) from err
    name = "memosight-default" if embedded else folder.name
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        fim=fim,
        source=str(folder),
        name=name,
        embedded=embedded,
        device=torch_device,
        dtype=torch_dtype,
        num_parameters=sum(p.numel() for p in model.parameters()),
        load_seconds=time.perf_counter() - started,
        stop_token_ids=stop_token_ids(tokenizer, fim),
    )


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
