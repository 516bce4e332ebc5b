"""Medusa-style prediction heads: cheap guesses of tokens t+2, t+3, ... from one hidden state.

Head i (1-based) maps the base model's last hidden state h at position t through a residual block,
h + SiLU(W_i h + b_i), and the model's own (frozen) LM head; it predicts the token the model will
produce at t+1+i. A residual block costs hidden^2 parameters instead of hidden x vocab, and with
W_i = 0 a head starts as the base prediction. The base model is never changed: heads only draft,
verification decides.

Files: `heads.safetensors` + `heads.json` next to the model, or in the user cache folder for
models whose folder is read-only. heads.json records the base model's shape and a fingerprint of
its LM head; heads that do not match the loaded model are ignored.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from .drafters import MIN_PROBABILITY, DraftCandidate, DraftSource, DraftState, HiddenStateDrafter
from .fused_trunk import prepare_trunk
from .quantize import QuantizedLinear, weight_fingerprint

log = logging.getLogger(__name__)

HEADS_WEIGHTS = "heads.safetensors"
HEADS_CONFIG = "heads.json"
FORMAT_VERSION = 1


@dataclass(kw_only=True)
class HeadsConfig:
    num_heads: int
    hidden_size: int
    vocab_size: int
    fingerprint: str  # of the base model's LM head: heads are only valid for that model
    format_version: int = FORMAT_VERSION
    report: dict | None = None  # held-out accuracy per head, written by training


class ResidualBlock(nn.Module):
    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size)
        nn.init.zeros_(self.linear.weight)  # start as the identity: the base model's guess
        nn.init.zeros_(self.linear.bias)
        self.act = nn.SiLU()

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden + self.act(self.linear(hidden))


class MedusaHeads(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(ResidualBlock(hidden_size) for _ in range(num_heads))

    @property
    def num_heads(self) -> int:
        return len(self.blocks)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., H] -> [K, ..., H]: the hidden state each head feeds to the LM head."""
        return torch.stack([block(hidden) for block in self.blocks])


def lm_head_fingerprint(model: Any) -> str:
    """A short hash of the LM head weights (the tokens heads predict live there); the same for
    the model loaded in float32, bfloat16 or quantized (files fitted to it are found in all)."""
    head = model.get_output_embeddings()
    if isinstance(head, QuantizedLinear):
        return head.dense_fingerprint
    return weight_fingerprint(head.weight)


def model_dims(model: Any) -> tuple[int, int]:
    head = model.get_output_embeddings()
    return int(head.in_features), int(head.out_features)  # hidden, vocab


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memosight" / "heads"


def heads_folders(model: Any) -> list[Path]:
    """Where files fitted to this model (heads, n-gram table) live: next to it, then the
    per-model cache folder."""
    folders = []
    source = getattr(model.config, "_name_or_path", "") or getattr(model, "name_or_path", "")
    if source and Path(source).is_dir():
        folders.append(Path(source))
    folders.append(cache_root() / lm_head_fingerprint(model))
    return folders


def output_folder(model_source: str | os.PathLike, model: Any) -> Path:
    """Where to save files fitted to a model: its own folder when writable, else the cache."""
    folder = Path(model_source)
    probe = folder / ".memosight-write-test"
    try:
        probe.touch()
        probe.unlink()
        return folder
    except OSError:
        return cache_root() / lm_head_fingerprint(model)


def save_heads(heads: MedusaHeads, config: HeadsConfig, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in heads.state_dict().items()}
    save_file(state, str(folder / HEADS_WEIGHTS))
    (folder / HEADS_CONFIG).write_text(json.dumps(asdict(config), indent=2) + "\n")
    return folder


def load_heads(folder: Path, model: Any) -> tuple[MedusaHeads, HeadsConfig] | None:
    """Heads saved in `folder` if they exist and were trained for this very model."""
    config_path, weights_path = folder / HEADS_CONFIG, folder / HEADS_WEIGHTS
    if not (config_path.is_file() and weights_path.is_file()):
        return None
    try:
        config = HeadsConfig(**json.loads(config_path.read_text()))
    except (ValueError, TypeError) as err:
        log.warning("ignoring unreadable %s: %s", config_path, err)
        return None
    hidden, vocab = model_dims(model)
    if (config.hidden_size, config.vocab_size, config.format_version) != (
        hidden,
        vocab,
        FORMAT_VERSION,
    ) or config.fingerprint != lm_head_fingerprint(model):
        log.info("heads in %s were trained for another model; not using them", folder)
        return None
    heads = MedusaHeads(config.hidden_size, config.num_heads)
    try:
        heads.load_state_dict(load_file(str(weights_path)))
    except Exception as err:  # truncated or foreign file: drafting without heads is still exact
        log.warning("ignoring unreadable %s: %s", weights_path, str(err).splitlines()[0])
        return None
    param = next(model.parameters())
    heads.to(device=param.device, dtype=param.dtype).eval()
    return heads, config


def find_heads(model: Any) -> HeadsDrafter | None:
    for folder in heads_folders(model):
        found = load_heads(folder, model)
        if found is not None:
            log.info("using %d prediction heads from %s", found[1].num_heads, folder)
            # The decoders' own LM-head product (a faster layout on CPUs, see fused_trunk).
            return HeadsDrafter(found[0], prepare_trunk(model).logits)
    return None


class HeadsDrafter(HiddenStateDrafter):
    """Turns the heads' top-k tokens into candidates: the top-1 chain plus one-token detours.

    Softmax confidences are rescaled per head by online counts (accepted / predicted, given the
    previous heads were right), so a weak or overconfident head stops growing the tree.
    """

    def __init__(
        self,
        heads: MedusaHeads,
        lm_head: Callable[[torch.Tensor], torch.Tensor],
        top_k: int = 3,
    ) -> None:
        self.heads = heads
        self.lm_head = lm_head  # hidden states [R, H] -> logits [R, V]
        self.top_k = top_k
        self.predicted = [0.0] * heads.num_heads
        self.accepted = [0.0] * heads.num_heads
        self._last: list[tuple[int, float]] = []  # (top-1 token, raw prob) per head

    def scale(self, head: int) -> float:
        return min(1.5, (self.accepted[head] + 1.0) / (self.predicted[head] + 1.0))

    @torch.inference_mode()
    def candidates(self, hidden: torch.Tensor, limit: int) -> list[DraftCandidate]:
        depth = min(self.heads.num_heads, limit)
        if depth <= 0:
            return []
        states = self.heads(hidden)[:depth]  # [K, H]
        # Heads are projected one at a time, only while the top-1 chain is still likely: an
        # LM-head row is most of a head's cost.
        ts: list[list[int]] = []
        ps: list[list[float]] = []
        self._last = []
        chain, cum, p = [], [], 1.0
        for d in range(depth):
            probs = torch.softmax(self.lm_head(states[d : d + 1])[0].float(), dim=-1)  # [V]
            top_p, top_t = probs.topk(self.top_k)
            ts.append(top_t.tolist())
            raw = top_p.tolist()
            ps.append([min(1.0, q * self.scale(d)) for q in raw])
            self._last.append((ts[d][0], raw[0]))
            p *= ps[d][0]
            if p < MIN_PROBABILITY:
                break
            chain.append(ts[d][0])
            cum.append(p)
        out = [DraftCandidate(tokens=chain, probs=cum, source="heads")] if chain else []
        for d in range(len(ts)):
            before = cum[d - 1] if d else 1.0
            for j in range(1, self.top_k):
                q = before * ps[d][j]
                if q >= MIN_PROBABILITY:
                    tokens = [*chain[:d], ts[d][j]]
                    out.append(DraftCandidate(tokens=tokens, probs=[*cum[:d], q], source="heads"))
        return out

    def feedback(self, truth: Sequence[int]) -> None:
        """The model's actual next tokens after the last candidates() call."""
        for d, ((token, prob), actual) in enumerate(zip(self._last, truth, strict=False)):
            self.predicted[d] += prob
            if token != actual:
                break
            self.accepted[d] += 1.0
        self._last = []


class PredictionHeads(DraftSource):
    """The draft source of prediction heads: those saved for the model ("auto", see find_heads)
    or any HiddenStateDrafter given. Metered: each call costs LM-head products."""

    name = "heads"
    metered = True

    def __init__(self, drafter: HiddenStateDrafter | Literal["auto"] = "auto") -> None:
        self.option = drafter
        self.drafter: HiddenStateDrafter | None = None if drafter == "auto" else drafter

    def fit(self, model: Any) -> bool:
        if self.option == "auto":
            self.drafter = find_heads(model)
        return self.drafter is not None

    def candidates(self, state: DraftState, room: int) -> list[DraftCandidate]:
        if self.drafter is None or state.hidden is None:
            return []
        return self.drafter.candidates(state.hidden, room)

    def feedback(self, truth: Sequence[int]) -> None:
        if self.drafter is not None:
            self.drafter.feedback(truth)
