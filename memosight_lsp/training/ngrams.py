"""Count the token n-gram table that drafts for speculative decoding (inference/ngram_model.py).

Every source file under the given folders (all languages the index knows, .gitignore respected)
is tokenized with the model's tokenizer; for each context of 1..max_order tokens seen at least
min_count times the two commonest next tokens are kept. By default the "next token" is the model's
own greedy choice at that point of the file (self-distillation, as for the heads): drafts are
accepted when they match what the model will say, not what the text says, and on held-out code
such a table's chains are longer than a table of the text's (figures: docs/speculative.md). The
model reads files in shuffled order for up to `minutes`; `labels="text"` skips the model.

Files held out by a hash of their path give the report: how often the table has a guess, and how
often its first guess is the label. Installed packages (site-packages) are never counted: they are
the benchmarks' evaluation data.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from memosight_lsp.inference.fused_trunk import prepare_trunk
from memosight_lsp.inference.kv_cache import new_cache
from memosight_lsp.inference.loading import position_limit
from memosight_lsp.inference.ngram_model import (
    MAX_ORDER,
    NgramTable,
    context_keys,
)
from memosight_lsp.workspace.files import iter_source_files

from .corpus import STDLIB_EXCLUDED_TOP, is_validation, read_source, stdlib_dir

log = logging.getLogger(__name__)

EVALUATION_DIRS = {"site-packages", "dist-packages"}
DEFAULT_MIN_COUNT = 3
TOKENIZE_BATCH = 256
LABEL_WINDOW = 1024  # tokens the model reads at once when labelling
HEAD_ROWS = 256  # LM-head rows projected at once (a big vocabulary makes [S, V] large)
HELD_OUT_FILES = 20  # files the report is measured on
HELD_OUT_MINUTES = 2.0  # at most this long labelling them


@dataclass(kw_only=True)
class NgramReport:
    labels: str  # "model" or "text"
    train_files: int  # files counted
    train_tokens: int
    skipped_files: int  # not reached by the model within the time budget
    contexts: int
    held_out_tokens: int
    coverage: float  # share of held-out positions with a guess
    top1: float  # share of held-out positions whose first guess is the label
    seconds: float


def source_texts(roots: Iterable[Path]) -> Iterator[tuple[str, str]]:
    """(relative path, text) of every readable source file under the roots."""
    stdlib = stdlib_dir().resolve()
    for root in roots:
        root = root.resolve()
        for rel, _ in iter_source_files(root):
            parts = rel.split("/")
            if EVALUATION_DIRS & set(parts) or (root == stdlib and parts[0] in STDLIB_EXCLUDED_TOP):
                continue
            text = read_source(root / rel)
            if text and text.strip():
                yield f"{root.name}/{rel}", text


def tokenize(texts: Sequence[str], tokenizer, desc: str) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    for start in tqdm(range(0, len(texts), TOKENIZE_BATCH), desc=desc, unit="batch", leave=False):
        batch = tokenizer(list(texts[start : start + TOKENIZE_BATCH]), add_special_tokens=False)
        out.extend(np.asarray(ids, dtype=np.int64) for ids in batch["input_ids"] if len(ids) > 1)
    return out


@dataclass(kw_only=True)
class _OrderCounts:
    """Contexts of one length seen at least min_count times, sorted by key."""

    keys: np.ndarray  # uint32 [N]
    suffixes: np.ndarray  # uint32 [N]: key of the context without its first token
    tokens: np.ndarray  # [N, 2]: the commonest and second commonest next token
    shares: np.ndarray  # float [N, 2]: their shares (0: no second token)


def _count_order(
    sequences: Sequence[np.ndarray], labels: Sequence[np.ndarray], order: int, min_count: int
) -> _OrderCounts | None:
    ctx_parts, suffix_parts, next_parts = [], [], []
    for ids, label in zip(sequences, labels, strict=True):
        if len(ids) > order:
            ctx_parts.append(context_keys(ids[:-1], order))
            if order > 1:
                suffix_parts.append(context_keys(ids[1:-1], order - 1))
            next_parts.append(label[order - 1 : -1])
    if not ctx_parts:
        return None
    ctx, nxt = np.concatenate(ctx_parts), np.concatenate(next_parts)
    suffix = np.concatenate(suffix_parts) if suffix_parts else np.zeros_like(ctx)
    # Count each (context, next token) pair, then order the pairs by context, commonest first.
    by_pair = np.lexsort((nxt, ctx))
    ctx, nxt, suffix = ctx[by_pair], nxt[by_pair], suffix[by_pair]
    starts = np.flatnonzero(np.r_[True, (ctx[1:] != ctx[:-1]) | (nxt[1:] != nxt[:-1])])
    counts = np.diff(np.r_[starts, len(ctx)])
    ctx, nxt, suffix = ctx[starts], nxt[starts], suffix[starts]
    by_count = np.lexsort((-counts, ctx))
    ctx, nxt, suffix, counts = ctx[by_count], nxt[by_count], suffix[by_count], counts[by_count]
    first = np.flatnonzero(np.r_[True, ctx[1:] != ctx[:-1]])
    totals = np.add.reduceat(counts, first)
    sizes = np.diff(np.r_[first, len(ctx)])
    keep = totals >= min_count
    first, totals, sizes = first[keep], totals[keep], sizes[keep]
    has_second = sizes > 1
    second = np.where(has_second, first + 1, first)
    return _OrderCounts(
        keys=ctx[first],
        suffixes=suffix[first],
        tokens=np.stack([nxt[first], nxt[second]], axis=1),
        shares=np.stack([counts[first], np.where(has_second, counts[second], 0)], axis=1)
        / totals[:, None],
    )


def count_ngrams(
    sequences: Sequence[np.ndarray],
    *,
    model_fingerprint: str,
    labels: Sequence[np.ndarray] | None = None,
    max_order: int = MAX_ORDER,
    min_count: int = DEFAULT_MIN_COUNT,
    same_share: float = 0.1,
) -> NgramTable:
    """The table of the sequences' contexts seen at least min_count times.

    labels[i][j] is the token to predict after position j of sequences[i]: by default the next
    token of the text; a model's own greedy choices make a table of what the model will say. A
    context is left out when backing off to its shorter context gives the same first guess with
    a share within same_share: it would only repeat that guess.
    """
    if labels is None:
        labels = text_labels(sequences)
    keys_out, tokens_out, shares_out = [], [], []
    # What a lookup of the previous order's contexts answers (keys, first tokens, their shares),
    # after their own pruning.
    answer: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    for order in tqdm(range(1, max_order + 1), desc="count", unit="order", leave=False):
        counts = _count_order(sequences, labels, order, min_count)
        if counts is None:
            break
        first_tokens, first_shares = counts.tokens[:, 0], counts.shares[:, 0]
        keep = np.ones(len(counts.keys), dtype=bool)
        if answer is not None and len(answer[0]):
            keys, tokens, shares = answer
            at = np.minimum(keys.searchsorted(counts.suffixes), len(keys) - 1)
            keep = ~(
                (keys[at] == counts.suffixes)
                & (tokens[at] == first_tokens)
                & (np.abs(shares[at] - first_shares) < same_share)
            )
            first_tokens = np.where(keep, first_tokens, tokens[at])
            first_shares = np.where(keep, first_shares, shares[at])
        answer = (counts.keys, first_tokens, first_shares)
        keys_out.append(counts.keys[keep])
        tokens_out.append(counts.tokens[keep])
        shares_out.append(counts.shares[keep])
    if not keys_out:
        raise ValueError("no token sequences to count")
    # Contexts of different lengths hash apart (the length seeds the key); the rare 32-bit
    # collision keeps one entry.
    keys, unique = np.unique(np.concatenate(keys_out), return_index=True)
    tokens = np.concatenate(tokens_out)[unique]
    shares = np.round(np.concatenate(shares_out)[unique] * 255.0)
    shares[:, 0] = np.maximum(shares[:, 0], 1)  # a first guess is never "no token"
    token_type = np.uint16 if tokens.max(initial=0) < 2**16 else np.int32
    return NgramTable(
        keys,
        tokens.astype(token_type),
        shares.astype(np.uint8),
        model_fingerprint=model_fingerprint,
        max_order=max_order,
    )


@torch.inference_mode()
def model_labels(model, ids: np.ndarray) -> np.ndarray:
    """The model's greedy choice after every position of ids, read in windows of LABEL_WINDOW
    tokens (fewer if its positions end sooner) through the decoders' own trunk (the last label
    looks past the file: never counted)."""
    trunk = prepare_trunk(model)
    device = next(model.parameters()).device
    size = min(LABEL_WINDOW, position_limit(model.config) or LABEL_WINDOW)
    out = np.empty(len(ids), dtype=np.int64)
    for start in range(0, len(ids), size):
        window = torch.as_tensor(ids[start : start + size], device=device)[None]
        hidden = trunk(window, new_cache(model))  # [S, H]
        for row in range(0, hidden.shape[0], HEAD_ROWS):
            choice = trunk.logits(hidden[row : row + HEAD_ROWS]).argmax(-1)
            out[start + row : start + row + len(choice)] = choice.cpu().numpy()
    return out


def label_with_model(
    model, sequences: list[np.ndarray], minutes: float, desc: str
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(sequences, labels) for the sequences the model reads within the time budget."""
    deadline = time.monotonic() + minutes * 60
    kept, labels = [], []
    with tqdm(total=sum(len(ids) for ids in sequences), desc=desc, unit="tok") as bar:
        for ids in sequences:
            if time.monotonic() > deadline:
                break
            kept.append(ids)
            labels.append(model_labels(model, ids))
            bar.update(len(ids))
    return kept, labels


def evaluate(
    table: NgramTable,
    sequences: Sequence[np.ndarray],
    labels: Sequence[np.ndarray],
    limit: int = 20000,
) -> dict:
    """Coverage and first-guess accuracy on up to `limit` held-out positions."""
    seen = guessed = right = 0
    for ids, label in zip(sequences, labels, strict=True):
        tokens = ids.tolist()
        for i in range(1, len(tokens)):
            guesses = table.next_tokens(tokens[max(0, i - table.max_order) : i])
            seen += 1
            if guesses:
                guessed += 1
                right += guesses[0][0] == int(label[i - 1])
            if seen >= limit:
                break
        if seen >= limit:
            break
    return {
        "tokens": seen,
        "coverage": guessed / seen if seen else 0.0,
        "top1": right / seen if seen else 0.0,
    }


def text_labels(sequences: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.r_[ids[1:], -1] for ids in sequences]


def build_table(
    roots: Iterable[Path],
    loaded,
    *,
    model_fingerprint: str,
    labels: str = "model",
    minutes: float = 30.0,
    max_order: int = MAX_ORDER,
    min_count: int = DEFAULT_MIN_COUNT,
    val_fraction: float = 0.02,
    seed: int = 0,
) -> tuple[NgramTable, NgramReport]:
    started = time.monotonic()
    files = list(source_texts(roots))
    if not files:
        raise ValueError("no source files found in the given folders")
    random.Random(seed).shuffle(files)  # a time budget then covers a fair sample
    train = [text for rel, text in files if not is_validation(rel, val_fraction)]
    held_out = [text for rel, text in files if is_validation(rel, val_fraction)]
    held_out = held_out[:HELD_OUT_FILES]
    train_ids = tokenize(train, loaded.tokenizer, "tokenize")
    held_ids = tokenize(held_out, loaded.tokenizer, "held-out")
    if labels == "model":
        held_ids, held_labels = label_with_model(
            loaded.model, held_ids, HELD_OUT_MINUTES, "label held-out"
        )
        counted, train_labels = label_with_model(loaded.model, train_ids, minutes, "label")
    else:
        counted, train_labels = train_ids, text_labels(train_ids)
        held_labels = text_labels(held_ids)
    table = count_ngrams(
        counted,
        labels=train_labels,
        model_fingerprint=model_fingerprint,
        max_order=max_order,
        min_count=min_count,
    )
    scores = evaluate(table, held_ids, held_labels)
    report = NgramReport(
        labels=labels,
        train_files=len(counted),
        train_tokens=int(sum(len(ids) for ids in counted)),
        skipped_files=len(train_ids) - len(counted),
        contexts=len(table),
        held_out_tokens=scores["tokens"],
        coverage=round(scores["coverage"], 4),
        top1=round(scores["top1"], 4),
        seconds=round(time.monotonic() - started, 1),
    )
    return table, report
