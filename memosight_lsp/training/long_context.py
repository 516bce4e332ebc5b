"""`memosight train long-context`: teach a trained model to use prompts longer than its windows.

The embedded model learned from 1,024-token windows of ~3,000-character chunks, so it never saw
a position past 1,024 nor a reason to look far back. This stage continues training an existing
model (the embedded one by default) on long windows (8,192 tokens) of long documents: the files
of one folder in name order, each under its path marker, the way the context packer lays out
other files above the current one. Half of the documents are in FIM order with the middle taken
from the last file, so the far context sits in the FIM prefix as it does in the engine's prompts.

Positions beyond the source model's `max_position_embeddings` are opened up to the window
length (rotary positions need no new weights). Before and after, the validation loss is measured
per position bucket: a model that uses long context has lower loss late in a window.
"""

from __future__ import annotations

import itertools
import json
import logging
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from memosight_lsp.inference.fim import QWEN, FimFormat
from memosight_lsp.inference.loading import load_tokenizer, model_folder, position_limit

from .base import (
    BaseTrainingConfig,
    TrainState,
    export_final,
    load_streams,
    make_optimizer,
    resume,
    run_training,
    split_files,
    start_run,
    tokenize_documents,
)
from .corpus import SourceFile, collect_corpus
from .fim_data import FimSettings, choose_middle, path_marker
from .ngrams import EVALUATION_DIRS
from .tokenizer_training import END_OF_TEXT

log = logging.getLogger(__name__)

POSITION_BUCKETS = (0, 512, 1024, 2048, 4096, 8192)


@dataclass(kw_only=True)
class LongContextConfig(BaseTrainingConfig):
    """The loop's settings; the architecture comes from the source model, not these fields."""

    model: str | None = None  # source model folder; None: the embedded default
    seq_len: int = 8192
    batch_size: int = 1
    lr: float = 3e-4  # a fine-tune: well under the base run's 2e-3 peak
    warmup_steps: int = 30
    eval_windows: int = 8
    group_chars: int = 30_000  # documents of about one 8k-token window of code


def folder_groups(files: list[SourceFile], group_chars: int) -> list[list[SourceFile]]:
    """The files of each folder in name order, cut into runs of about group_chars characters
    (a longer file stays whole)."""
    by_folder: dict[PurePosixPath, list[SourceFile]] = defaultdict(list)
    for f in files:
        by_folder[PurePosixPath(f.relpath).parent].append(f)
    groups: list[list[SourceFile]] = []
    for folder in sorted(by_folder):
        current: list[SourceFile] = []
        size = 0
        for f in sorted(by_folder[folder], key=lambda f: f.relpath):
            if current and size + len(f.text) > group_chars:
                groups.append(current)
                current, size = [], 0
            current.append(f)
            size += len(f.text)
        groups.append(current)
    return groups


def long_document(
    group: list[SourceFile], fim: FimFormat, rng: random.Random, settings: FimSettings
) -> str:
    """A folder run as one document; in FIM order (at settings.fim_rate) the middle is cut from
    the last file, so everything above it is prefix."""
    before = "".join(path_marker(f.relpath) + _ended(f.text) for f in group[:-1])
    last = group[-1]
    marker = path_marker(last.relpath)
    if rng.random() >= settings.fim_rate:
        return before + marker + _ended(last.text) + END_OF_TEXT
    start, end = choose_middle(last.text, rng, settings)
    prefix = before + marker + last.text[:start]
    return fim.build_psm(prefix, last.text[end:]) + last.text[start:end] + END_OF_TEXT


def _ended(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def check_corpus_roots(roots: list[str]) -> None:
    """Missing folders and installed packages (evaluation data) are refused."""
    for root in roots:
        folder = Path(root)
        if not folder.is_dir():
            raise ValueError(f"corpus folder not found: {root}")
        if EVALUATION_DIRS & set(folder.resolve().parts):
            raise ValueError(f"{root} is inside installed packages: evaluation data, not training")


def prepare_long_data(cfg: LongContextConfig, tokenizer, out: Path) -> dict:
    """Train / validation token streams of long documents, built once and reused by --resume."""
    data_dir = out / "data"
    stats_path = data_dir / "stats.json"
    if stats_path.exists() and (data_dir / "train.npy").exists():
        return json.loads(stats_path.read_text())
    check_corpus_roots(cfg.corpus)
    files = collect_corpus(Path(p) for p in cfg.corpus)
    if not files:
        raise ValueError(f"no Python files found under {cfg.corpus}")
    train_files, val_files = split_files(files, cfg.val_fraction)
    data_dir.mkdir(parents=True, exist_ok=True)
    stats: dict = {"roots": cfg.corpus}
    stats.update(train_files=len(train_files), val_files=len(val_files))
    for name, split, seed in (("train", train_files, cfg.seed), ("val", val_files, cfg.seed + 1)):
        rng = random.Random(seed)
        docs = [
            long_document(group, QWEN, rng, cfg.fim)
            for group in folder_groups(split, cfg.group_chars)
        ]
        ids = tokenize_documents(docs, tokenizer)
        np.save(data_dir / f"{name}.npy", ids)
        stats[f"{name}_documents"] = len(docs)
        stats[f"{name}_tokens"] = int(ids.size)
    stats_path.write_text(json.dumps(stats, indent=1))
    return stats


@torch.no_grad()
def loss_by_position(
    model, data: np.ndarray, seq_len: int, windows: int, buckets: tuple[int, ...] = POSITION_BUCKETS
) -> dict[str, float]:
    """Mean next-token loss per position bucket ("0-512", "512-1024", ...) over the same
    validation windows every time; buckets past seq_len are left out."""
    was_training = model.training
    model.eval()
    gen = torch.Generator().manual_seed(0)
    seq_len = min(seq_len, data.size - 2)
    totals = torch.zeros(seq_len)
    for _ in range(windows):
        start = int(torch.randint(0, data.size - seq_len - 1, (1,), generator=gen))
        row = torch.from_numpy(data[start : start + seq_len + 1].astype(np.int64))
        logits = model(input_ids=row[None, :-1]).logits[0].float()
        totals += torch.nn.functional.cross_entropy(logits, row[1:], reduction="none")
    model.train(was_training)
    means = totals / windows
    result = {}
    for low, high in itertools.pairwise(buckets):
        if low < seq_len:
            result[f"{low}-{high}"] = round(float(means[low:high].mean()), 4)
    return result


def train_long_context(cfg: LongContextConfig) -> Path:
    out = start_run(cfg)
    source, _ = model_folder(cfg.model)
    # Refuse a model whose positions cannot grow before minutes of tokenizing.
    open_positions(AutoConfig.from_pretrained(source, local_files_only=True), cfg.seq_len)
    tokenizer = load_tokenizer(source)
    stats = prepare_long_data(cfg, tokenizer, out)
    train_data, val_data = load_streams(out)
    if val_data.size <= cfg.seq_len + 1 or train_data.size <= cfg.seq_len + 1:
        raise ValueError(
            f"the corpus is too small for {cfg.seq_len}-token windows "
            f"({train_data.size} training, {val_data.size} validation tokens)"
        )
    log.info("long documents: %d train, %d validation tokens", train_data.size, val_data.size)

    gen = torch.Generator().manual_seed(cfg.seed)
    report_path = out / "positions.json"
    resumed = resume(out, cfg, gen)
    if resumed is not None:
        model, optimizer, state = resumed
        fresh: dict[str, Any] = {"source": str(source)}
        report = json.loads(report_path.read_text()) if report_path.exists() else fresh
    else:
        # Trained as it was saved (not through load_model: no decoding trunk, fp32, train mode).
        model = AutoModelForCausalLM.from_pretrained(
            source, dtype=torch.float32, local_files_only=True
        )
        open_positions(model.config, cfg.seq_len)
        optimizer = make_optimizer(model, cfg)
        state = TrainState()
        report = {"source": str(source), "before": _position_losses(model, val_data, cfg)}
        report_path.write_text(json.dumps(report, indent=1))
    run_training(model, optimizer, state, gen, train_data, val_data, cfg, out)
    report["after"] = _position_losses(model, val_data, cfg)
    report_path.write_text(json.dumps(report, indent=1))
    final = export_final(out, model, tokenizer, cfg, state)
    (final / "corpus.json").write_text(json.dumps(stats, indent=1))
    (final / "positions.json").write_text(json.dumps(report, indent=1))
    log.info("validation loss by position: %s", json.dumps(report))
    return final


def open_positions(config, seq_len: int) -> None:
    """Let a rotary model take seq_len positions; learned position tables cannot grow."""
    limit = position_limit(config) or 0
    if seq_len <= limit:
        return
    rotary = getattr(config, "rope_parameters", None) or getattr(config, "rope_theta", None)
    if not rotary or not hasattr(config, "max_position_embeddings"):
        raise ValueError(
            f"the model's positions are learned up to {limit}; use --seq-len {limit} or less"
        )
    config.max_position_embeddings = seq_len


def _position_losses(model, val_data: np.ndarray, cfg: LongContextConfig) -> dict[str, float]:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
        return loss_by_position(model, val_data, cfg.seq_len, cfg.eval_windows)
