"""`memosight train base`: tokenizer + a small Llama trained from scratch with a FIM objective.

Steps: collect corpus -> train tokenizer -> tokenize into one token stream per split (cached as
.npy) -> train on random windows with a cosine schedule over the wall-clock budget -> save.
Checkpoints (model, optimizer, step, elapsed time, history) are written every few minutes and
`--resume` continues from the last one, so a later session can keep training.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerBase,
)

from memosight_lsp.inference.fim import QWEN

from .corpus import SourceFile, collect_corpus, is_validation
from .fim_data import FimSettings, make_documents
from .tokenizer_training import save_tokenizer, train_tokenizer

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class BaseTrainingConfig:
    corpus: list[str]
    out: str
    minutes: float = 60.0
    resume: bool = False
    seed: int = 1234
    vocab_size: int = 8192
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 768
    seq_len: int = 1024
    batch_size: int = 4
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.1
    val_fraction: float = 0.03
    eval_every_minutes: float = 3.0
    checkpoint_every_minutes: float = 5.0
    eval_windows: int = 24
    bf16: bool = True
    threads: int = 0  # 0: torch's default
    fim: FimSettings = field(default_factory=FimSettings)


@dataclass(kw_only=True)
class TrainState:
    step: int = 0
    tokens_seen: int = 0
    elapsed_s: float = 0.0
    history: list[dict] = field(default_factory=list)


# ---------------------------------------------------------------- data


def split_files(files: list[SourceFile], val_fraction: float) -> tuple[list, list]:
    train = [f for f in files if not is_validation(f.relpath, val_fraction)]
    val = [f for f in files if is_validation(f.relpath, val_fraction)]
    if not val and len(train) > 1:  # tiny corpora still get a validation file
        val.append(train.pop())
    return train, val


def tokenize_split(
    files: list[SourceFile], tokenizer: PreTrainedTokenizerBase, cfg: BaseTrainingConfig, seed: int
) -> np.ndarray:
    rng = random.Random(seed)
    docs = [doc for f in files for doc in make_documents(f.relpath, f.text, QWEN, rng, cfg.fim)]
    return tokenize_documents(docs, tokenizer)


def tokenize_documents(docs: list[str], tokenizer: PreTrainedTokenizerBase) -> np.ndarray:
    """One token stream of all documents, in order (uint16 where the vocabulary fits)."""
    ids: list[int] = []
    batch = 512
    for i in tqdm(range(0, len(docs), batch), desc="tokenize", unit="batch"):
        for row in tokenizer(docs[i : i + batch], add_special_tokens=False)["input_ids"]:
            ids.extend(row)
    return np.asarray(ids, dtype=np.uint16 if len(tokenizer) <= 1 << 16 else np.uint32)


def prepare_data(cfg: BaseTrainingConfig, out: Path) -> tuple[PreTrainedTokenizerBase, dict]:
    """Tokenizer and token streams, built once and reused by --resume."""
    tok_dir = out / "tokenizer"
    data_dir = out / "data"
    if (data_dir / "train.npy").exists() and (tok_dir / "tokenizer.json").exists():
        tokenizer = AutoTokenizer.from_pretrained(tok_dir)
        stats = json.loads((data_dir / "stats.json").read_text())
        return tokenizer, stats
    files = collect_corpus(Path(p) for p in cfg.corpus)
    if not files:
        raise SystemExit(f"no Python files found under {cfg.corpus}")
    train_files, val_files = split_files(files, cfg.val_fraction)
    log.info("corpus: %d train files, %d validation files", len(train_files), len(val_files))
    tokenizer = train_tokenizer((f.text for f in train_files), cfg.vocab_size)
    save_tokenizer(tokenizer, tok_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    train_ids = tokenize_split(train_files, tokenizer, cfg, cfg.seed)
    val_ids = tokenize_split(val_files, tokenizer, cfg, cfg.seed + 1)
    np.save(data_dir / "train.npy", train_ids)
    np.save(data_dir / "val.npy", val_ids)
    train_bytes = sum(len(f.text.encode("utf-8")) for f in train_files)
    stats = {
        "roots": cfg.corpus,
        "train_files": len(train_files),
        "val_files": len(val_files),
        "val_relpaths": sorted(f.relpath for f in val_files),
        "train_bytes": train_bytes,
        "train_tokens": int(train_ids.size),
        "val_tokens": int(val_ids.size),
    }
    (data_dir / "stats.json").write_text(json.dumps(stats, indent=1))
    return tokenizer, stats


def get_batch(data: np.ndarray, seq_len: int, batch_size: int, gen: torch.Generator):
    starts = torch.randint(0, data.size - seq_len - 1, (batch_size,), generator=gen)
    rows = np.stack([data[s : s + seq_len + 1] for s in starts.tolist()]).astype(np.int64)
    x = torch.from_numpy(rows[:, :-1])  # [B, T]
    y = torch.from_numpy(rows[:, 1:])  # [B, T]
    return x, y


# ---------------------------------------------------------------- model


def build_model(cfg: BaseTrainingConfig, tokenizer: PreTrainedTokenizerBase) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return LlamaForCausalLM(config)


def get_lr(cfg: BaseTrainingConfig, step: int, progress: float) -> float:
    """Linear warm-up, then cosine decay over the fraction of the wall-clock budget used."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = min(max(progress, 0.0), 1.0)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return cfg.lr * (cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * cosine)


@torch.no_grad()
def estimate_loss(model, data: np.ndarray, cfg: BaseTrainingConfig) -> float:
    model.eval()
    gen = torch.Generator().manual_seed(0)  # the same windows every time
    losses = []
    for _ in range(cfg.eval_windows):
        x, y = get_batch(data, cfg.seq_len, 1, gen)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
            logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        losses.append(loss.item())
    model.train()
    return float(np.mean(losses))


# ---------------------------------------------------------------- checkpoints


def save_checkpoint(out: Path, model, optimizer, state: TrainState, gen: torch.Generator) -> None:
    ckpt = out / "checkpoint"
    tmp = out / "checkpoint.tmp"
    model.save_pretrained(tmp)
    torch.save(
        {"optimizer": optimizer.state_dict(), "generator": gen.get_state(), "state": asdict(state)},
        tmp / "trainer_state.pt",
    )
    if ckpt.exists():
        old = out / "checkpoint.old"
        ckpt.rename(old)
        tmp.rename(ckpt)
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
    else:
        tmp.rename(ckpt)


def load_checkpoint(out: Path, gen: torch.Generator) -> tuple[Any, TrainState, dict]:
    ckpt = out / "checkpoint"
    # Auto: the long-context stage also resumes checkpoints of models that are not Llama.
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32)
    blob = torch.load(ckpt / "trainer_state.pt", weights_only=False)
    gen.set_state(blob["generator"])
    return model, TrainState(**blob["state"]), blob["optimizer"]


def export_final(out: Path, model, tokenizer, cfg: BaseTrainingConfig, state: TrainState) -> Path:
    """The shippable model: bf16 safetensors + tokenizer + the training record."""
    final = out / "final"
    final.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(final)
    model.to(torch.float32)
    tokenizer.save_pretrained(final)
    record = {"config": asdict(cfg), "state": asdict(state)}
    (final / "training.json").write_text(json.dumps(record, indent=1))
    return final


# ---------------------------------------------------------------- loop


def make_optimizer(model, cfg: BaseTrainingConfig) -> torch.optim.Optimizer:
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95))


def start_run(cfg: BaseTrainingConfig) -> Path:
    """The output folder, created; the seed and thread count set."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    return out


def load_streams(out: Path) -> tuple[np.ndarray, np.ndarray]:
    """The training and validation token streams prepared under out/data."""
    return np.load(out / "data" / "train.npy"), np.load(out / "data" / "val.npy")


def resume(
    out: Path, cfg: BaseTrainingConfig, gen: torch.Generator
) -> tuple[Any, torch.optim.Optimizer, TrainState] | None:
    """Model, optimizer and state from out/checkpoint when cfg.resume asks and one exists."""
    if not (cfg.resume and (out / "checkpoint").exists()):
        return None
    model, state, opt_state = load_checkpoint(out, gen)
    optimizer = make_optimizer(model, cfg)
    optimizer.load_state_dict(opt_state)
    log.info("resumed at step %d (%.1f min)", state.step, state.elapsed_s / 60)
    return model, optimizer, state


def train_base(cfg: BaseTrainingConfig) -> Path:
    out = start_run(cfg)
    tokenizer, stats = prepare_data(cfg, out)
    train_data, val_data = load_streams(out)
    log.info("tokens: %d train, %d validation", train_data.size, val_data.size)

    gen = torch.Generator().manual_seed(cfg.seed)
    resumed = resume(out, cfg, gen)
    if resumed is not None:
        model, optimizer, state = resumed
    else:
        model = build_model(cfg, tokenizer)
        optimizer = make_optimizer(model, cfg)
        state = TrainState()
    params = sum(p.numel() for p in model.parameters())
    log.info("model: %.2fM parameters", params / 1e6)
    run_training(model, optimizer, state, gen, train_data, val_data, cfg, out)
    final = export_final(out, model, tokenizer, cfg, state)
    (final / "corpus.json").write_text(json.dumps(stats, indent=1))
    return final


def run_training(
    model,
    optimizer: torch.optim.Optimizer,
    state: TrainState,
    gen: torch.Generator,
    train_data: np.ndarray,
    val_data: np.ndarray,
    cfg: BaseTrainingConfig,
    out: Path,
) -> None:
    """Random windows until the wall-clock budget is spent: evaluations appended to
    out/history.jsonl, checkpoints every few minutes and at the end."""
    model.train()

    budget_s = cfg.minutes * 60.0
    history_path = out / "history.jsonl"
    started = time.monotonic() - state.elapsed_s
    last_eval = last_ckpt = time.monotonic()
    bar = tqdm(
        total=int(budget_s), initial=int(state.elapsed_s), unit="s", desc="train", mininterval=5
    )
    while state.elapsed_s < budget_s:
        lr = get_lr(cfg, state.step, state.elapsed_s / budget_s)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = get_batch(train_data, cfg.seq_len, cfg.batch_size, gen)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
            logits = model(input_ids=x).logits  # [B, T, V]
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        state.step += 1
        state.tokens_seen += x.numel()
        now = time.monotonic()
        state.elapsed_s = now - started
        bar.n = int(state.elapsed_s)
        bar.set_postfix(loss=f"{loss.item():.3f}", step=state.step, lr=f"{lr:.1e}")
        if now - last_eval > cfg.eval_every_minutes * 60 or state.elapsed_s >= budget_s:
            val = estimate_loss(model, val_data, cfg)
            row = {
                "step": state.step,
                "tokens": state.tokens_seen,
                "minutes": round(state.elapsed_s / 60, 2),
                "train_loss": round(loss.item(), 4),
                "val_loss": round(val, 4),
            }
            state.history.append(row)
            with history_path.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
            log.info("eval %s", row)
            last_eval = time.monotonic()
        if now - last_ckpt > cfg.checkpoint_every_minutes * 60:
            save_checkpoint(out, model, optimizer, state, gen)
            last_ckpt = time.monotonic()
    bar.close()
    save_checkpoint(out, model, optimizer, state, gen)
