"""Self-distillation of Medusa heads: the heads learn what the frozen base model will say.

For a window of code, the base model's greedy choice at every position is the target: head i at
position t learns the model's choice at t+i (the token at t+1+i). The loss weights head i by
gamma^i (far heads are harder and matter less: a draft is only accepted up to its first miss),
and a curriculum trains heads 1-2 first and adds one head at a time. Checkpoints carry the heads,
the optimiser and the clock, so `--resume` continues where a run stopped.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from memosight_lsp.inference.fim import resolve_fim_format
from memosight_lsp.inference.heads import (
    HeadsConfig,
    MedusaHeads,
    lm_head_fingerprint,
    model_dims,
    output_folder,
    save_heads,
)
from memosight_lsp.inference.loading import load_model

from .corpus import collect_corpus, is_validation
from .fim_data import FimSettings, make_documents

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class HeadsTrainingConfig:
    model: str | None  # model folder (None: the embedded default)
    data: list[str]  # folders of source code
    out: str | None = None  # where heads go (default: next to the model, else the cache)
    num_heads: int = 4
    minutes: float = 15.0
    seq_len: int = 256
    batch_size: int = 8
    positions_per_batch: int = 1024  # head losses on a sample of positions: the LM head is big
    lr: float = 3e-3
    gamma: float = 0.8
    val_fraction: float = 0.05
    val_windows: int = 48
    top_k: int = 5
    seed: int = 0
    resume: bool = False
    threads: int = 0


@dataclass(kw_only=True)
class HeadsState:
    step: int = 0
    elapsed_s: float = 0.0


def token_windows(docs: list[str], tokenizer, seq_len: int, rng: random.Random) -> list[list[int]]:
    """Cut the token stream of the documents into windows of seq_len + 1 tokens."""
    stream: list[int] = []
    for start in range(0, len(docs), 256):  # batches: the Rust tokenizer runs them in parallel
        for ids in tokenizer(docs[start : start + 256], add_special_tokens=False)["input_ids"]:
            stream.extend(ids)
    windows = [stream[i : i + seq_len] for i in range(0, len(stream) - seq_len, seq_len)]
    rng.shuffle(windows)
    return windows


def build_documents(files, fim, rng: random.Random) -> list[str]:
    if fim is None:
        return [f.text for f in files]
    docs: list[str] = []
    for f in files:
        docs.extend(make_documents(f.relpath, f.text, fim, rng, FimSettings()))
    return docs


@torch.no_grad()
def base_outputs(model, batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Last hidden states [B, S, H] and the base model's greedy choices [B, S]."""
    hidden = model.base_model(input_ids=batch, use_cache=False).last_hidden_state
    choices = model.get_output_embeddings()(hidden).argmax(-1)
    return hidden, choices


def head_losses(
    heads: MedusaHeads,
    lm_head,
    hidden: torch.Tensor,
    choices: torch.Tensor,
    active: int,
    positions: int,
    gen: torch.Generator,
) -> list[torch.Tensor]:
    """Cross-entropy of each active head against the base model's choice i steps later."""
    _, seq, size = hidden.shape
    losses = []
    for i in range(1, active + 1):
        flat_h = hidden[:, : seq - i].reshape(-1, size)  # positions that have a target i later
        flat_y = choices[:, i:].reshape(-1)
        pick = torch.randint(0, flat_h.shape[0], (min(positions, flat_h.shape[0]),), generator=gen)
        logits = lm_head(heads.blocks[i - 1](flat_h[pick]))  # [P, V]
        losses.append(F.cross_entropy(logits, flat_y[pick]))
    return losses


@torch.no_grad()
def evaluate(
    heads: MedusaHeads, model, windows: list[list[int]], top_k: int
) -> list[dict[str, float]]:
    """Held-out top-1 / top-k agreement of every head with the base model's choices."""
    lm_head = model.get_output_embeddings()
    hits1 = [0] * heads.num_heads
    hitsk = [0] * heads.num_heads
    total = [0] * heads.num_heads
    for start in range(0, len(windows), 8):
        batch = torch.tensor(windows[start : start + 8])
        hidden, choices = base_outputs(model, batch)
        seq = batch.shape[1]
        for i in range(1, heads.num_heads + 1):
            logits = lm_head(heads.blocks[i - 1](hidden[:, : seq - i]))  # [B, S-i, V]
            target = choices[:, i:]
            topk = logits.topk(top_k, dim=-1).indices
            hits1[i - 1] += int((topk[..., 0] == target).sum())
            hitsk[i - 1] += int((topk == target[..., None]).any(-1).sum())
            total[i - 1] += target.numel()
    return [
        {"head": i + 1, "top1": hits1[i] / total[i], f"top{top_k}": hitsk[i] / total[i]}
        for i in range(heads.num_heads)
    ]


def learning_rate(cfg: HeadsTrainingConfig, elapsed_s: float) -> float:
    progress = min(1.0, elapsed_s / (cfg.minutes * 60))
    warm = min(1.0, elapsed_s / 20.0)
    return cfg.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def active_heads(cfg: HeadsTrainingConfig, elapsed_s: float) -> int:
    """Curriculum: heads 1-2 first, one more head at each equal share of the time budget."""
    if cfg.num_heads <= 2:
        return cfg.num_heads
    share = cfg.minutes * 60 / (cfg.num_heads - 1)
    return min(cfg.num_heads, 2 + int(elapsed_s / share))


def batches(windows: list[list[int]], size: int, rng: random.Random) -> Iterator[torch.Tensor]:
    while True:
        order = list(range(len(windows)))
        rng.shuffle(order)
        for start in range(0, len(order) - size + 1, size):
            yield torch.tensor([windows[j] for j in order[start : start + size]])


def train_heads(cfg: HeadsTrainingConfig) -> Path:
    """Train heads for cfg.model on cfg.data; returns the folder holding heads.safetensors."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    rng = random.Random(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    loaded = load_model(cfg.model, device="cpu", dtype="float32", allow_pickle=True)
    model = loaded.model
    model.requires_grad_(False)
    hidden_size, vocab = model_dims(model)
    files = collect_corpus(Path(d) for d in cfg.data)
    if not files:
        raise ValueError(f"no Python source files found under {', '.join(cfg.data)}")
    fim = resolve_fim_format(loaded.tokenizer.get_vocab(), "auto")
    train_files = [f for f in files if not is_validation(f.relpath, cfg.val_fraction)]
    val_files = [f for f in files if is_validation(f.relpath, cfg.val_fraction)] or files[:1]
    # A shuffled sample of files keeps tokenising short on a big corpus: the text the time budget
    # trains on at 2,500 tokens a second of 4 characters, plus 400,000 characters.
    rng.shuffle(train_files)
    budget_chars = int(cfg.minutes * 60 * 2500 * 4) + 400_000
    picked, chars = [], 0
    for f in train_files:
        picked.append(f)
        chars += len(f.text)
        if chars > budget_chars:
            break
    train = token_windows(build_documents(picked, fim, rng), loaded.tokenizer, cfg.seq_len, rng)
    val = token_windows(build_documents(val_files, fim, rng), loaded.tokenizer, cfg.seq_len, rng)
    val = val[: cfg.val_windows]
    if not train or not val:
        raise ValueError("not enough source text to train heads (need a few thousand tokens)")
    log.info("heads: %d train windows, %d held-out windows", len(train), len(val))
    out = Path(cfg.out) if cfg.out else output_folder(loaded.source, model)
    ckpt = out / "heads-checkpoint.pt"
    heads = MedusaHeads(hidden_size, cfg.num_heads)
    optimizer = torch.optim.AdamW(heads.parameters(), lr=cfg.lr, weight_decay=0.0)
    state = HeadsState()
    if cfg.resume and ckpt.is_file():
        saved = torch.load(ckpt, map_location="cpu")
        heads.load_state_dict(saved["heads"])
        optimizer.load_state_dict(saved["optimizer"])
        state = HeadsState(**saved["state"])
        log.info("resumed heads at step %d (%.1f min)", state.step, state.elapsed_s / 60)
    lm_head = model.get_output_embeddings()
    stream = batches(train, cfg.batch_size, rng)
    bar = tqdm(total=int(cfg.minutes * 60), initial=int(state.elapsed_s), unit="s", desc="heads")
    started = time.perf_counter() - state.elapsed_s
    last_ckpt = time.perf_counter()
    while state.elapsed_s < cfg.minutes * 60:
        active = active_heads(cfg, state.elapsed_s)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(cfg, state.elapsed_s)
        hidden, choices = base_outputs(model, next(stream))
        losses = head_losses(heads, lm_head, hidden, choices, active, cfg.positions_per_batch, gen)
        loss = torch.stack([cfg.gamma**i * part for i, part in enumerate(losses)]).sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        state.step += 1
        now = time.perf_counter()
        bar.update(int(now - started) - bar.n)
        state.elapsed_s = now - started
        bar.set_postfix(heads=active, loss=f"{float(loss.detach()):.3f}")
        if now - last_ckpt > 120:
            save_checkpoint(ckpt, heads, optimizer, state)
            last_ckpt = now
    bar.close()
    save_checkpoint(ckpt, heads, optimizer, state)
    report = evaluate(heads, model, val, cfg.top_k)
    config = HeadsConfig(
        num_heads=cfg.num_heads,
        hidden_size=hidden_size,
        vocab_size=vocab,
        fingerprint=lm_head_fingerprint(model),
        report={
            "heldOut": report,
            "steps": state.step,
            "minutes": round(state.elapsed_s / 60, 2),
            "gamma": cfg.gamma,
            "data": [str(d) for d in cfg.data],
        },
    )
    save_heads(heads, config, out)
    (out / "heads-report.json").write_text(json.dumps(config.report, indent=2) + "\n")
    return out


def save_checkpoint(path: Path, heads, optimizer, state: HeadsState) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(
        {"heads": heads.state_dict(), "optimizer": optimizer.state_dict(), "state": asdict(state)},
        tmp,
    )
    tmp.replace(path)
