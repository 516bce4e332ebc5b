"""Which precision a model runs in: float32, bfloat16, or bfloat16 with int8 / int4 weights.

On a GPU `auto` is bfloat16. On a CPU it depends on the model and the machine. A tiny model is
bound by per-operator overhead: float32 is as fast as anything there and keeps speculative
decoding exactly lossless (measured with the embedded 5.5M model), so models under
SMALL_MODEL_BYTES of weights run in float32 and nothing is measured. A real model is bound by
reading its weights: bfloat16 halves the bytes and int8 quarters them, but only where the CPU
multiplies bfloat16 natively (avx512_bf16, AMX, Arm bf16; others emulate it slowly). There, the
first time a model meets the machine, each candidate is loaded and timed on a one-token and an
8-token pass over a cached prompt, and kept only if its greedy next-token choices agree with
float32's on real code (AGREEMENT_FLOOR); the fastest such candidate wins (float32 on
near-ties). The answer is cached per machine, thread count, torch version, kernels and model.

A busy machine must not fool it (a test run beside the first load once made every pass look many
times its cost, cached for good: docs/speculative.md). So each pass size is timed until its
fastest repeat stops improving (at most MAX_TURNS), and a measurement is provisional when it
cannot be trusted: other processes kept the cores busy meanwhile (inference/machine.py), a
candidate's repeats varied widely, or a pass took longer than reading the candidate's weights
at a low memory bandwidth allows (Limits). A provisional choice serves this load and is
measured again at the next one, keeping the fastest time of every attempt (a busy machine only
slows passes down); after MAX_ATTEMPTS it is kept as it stands. The cache records when and how
it was measured (`memosight models` prints it; `--remeasure` measures again).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from . import atomic_file, machine
from .fused_trunk import prepare_trunk
from .kv_cache import new_cache
from .quantize import Quantization, QuantizedEmbedding, QuantizedLinear, native_layout

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
QUANTIZATIONS = ("none", "int8", "int4", "gguf")
AGREEMENT_FLOOR = 0.95  # share of next-token argmaxes equal to float32's on the probe text
NEAR_TIE = 1.1  # a lower precision must be at least this much faster to be chosen
PROBE_TOKENS = 256  # prompt positions under the timed passes
PROBE_TEXT = Path(__file__).resolve().parent.parent / "samples" / "quickstart.py"
SMALL_MODEL_BYTES = 100 * 2**20  # weight files under this: float32, nothing measured
# Timing a candidate: turns of a one-token and an 8-token pass, the fastest of each kept, until
# neither fastest improved by more than STABLE_RATIO for STABLE_TURNS turns (MIN_TURNS to
# MAX_TURNS turns, and no new turn after TIMING_BUDGET_S).
MIN_TURNS, MAX_TURNS, STABLE_TURNS, STABLE_RATIO = 5, 30, 3, 1.02
TIMING_BUDGET_S = 10.0
MAX_ATTEMPTS = 3  # provisional measurements before one is kept as it stands
FORMAT = 2  # of a cache entry; entries of another format are measured again


@dataclass(frozen=True, kw_only=True)
class Limits:
    """When a measurement cannot be trusted (see the module docstring). Lenient on purpose: a
    quiet machine must pass them the first time."""

    busy_cores: float = machine.BUSY_CORES  # other processes' CPU use, in cores
    max_spread: float = 0.5  # (median - fastest) / fastest of a pass size's repeats
    floor_bytes_per_s: float = 3e9  # any CPU with native bfloat16 reads weights faster
    pass_overhead_ms: float = 5.0  # per pass, plus LAYER_OVERHEAD_MS a decoder layer
    layer_overhead_ms: float = 1.0
    eight_rows_factor: float = 3.0  # an 8-token pass costs at most this many one-token ones

    def ceiling_ms(self, weight_bytes: int, layers: int, rows: int) -> float:
        """The slowest a pass over `rows` tokens can plausibly be on a quiet machine."""
        one = weight_bytes / self.floor_bytes_per_s * 1000
        one += self.pass_overhead_ms + layers * self.layer_overhead_ms
        return one if rows == 1 else one * self.eight_rows_factor


@dataclass(frozen=True, kw_only=True)
class Precision:
    dtype: torch.dtype
    quantization: Quantization
    reason: str  # why: asked for, or what was measured
    # How it was measured (the cache entry's record: when, repeats, spread, load), if it was.
    measured: dict[str, Any] | None = field(default=None, compare=False)

    def describe(self) -> str:
        name = str(self.dtype).removeprefix("torch.")
        if self.quantization == "gguf":
            return f"int8 / int4 weights as the GGUF file's types, {name}"
        return name if self.quantization == "none" else f"{self.quantization} weights, {name}"


# While the native kernels build: the measurements on torch's kernels choose dense bfloat16 (it
# also loads without quantizing); the next load, on the native kernels, measures.
INTERIM = Precision(
    dtype=torch.bfloat16,
    quantization="none",
    reason="not measured: the native kernels are being built, the next load measures",
)


@dataclass(kw_only=True)
class Measurement:
    dtype: str
    quantization: str
    one_token_ms: float
    eight_tokens_ms: float
    agreement: float  # with float32's next-token choices
    repeats: int = 0  # turns timed (each a one-token and an 8-token pass)
    spread: float = 0.0  # the larger (median - fastest) / fastest of the two pass sizes
    settled: bool = True  # the fastest times stopped improving within MAX_TURNS
    weight_bytes: int = 0  # of the candidate as loaded (what a pass reads)
    layers: int = 0

    @property
    def cost(self) -> float:
        """A decoding mix: plain steps and verification passes over several drafted tokens."""
        return self.one_token_ms + self.eight_tokens_ms

    @property
    def name(self) -> str:
        return self.quantization if self.quantization != "none" else self.dtype


def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (x86 avx512_bf16 / AMX, Arm bf16)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    words = set(flags.split())
    return bool(words & {"avx512_bf16", "amx_bf16", "bf16"})


def explicit(dtype: str, quantization: str, device: torch.device) -> Precision | None:
    """The precision the settings ask for, or None when `auto` is left to measure on a CPU."""
    if quantization not in ("auto", *QUANTIZATIONS):
        raise ValueError(
            f"unknown quantization {quantization!r}; use auto, none, int8, int4 or gguf"
        )
    if dtype != "auto" and dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use auto, float32, bfloat16 or float16")
    if device.type == "cuda":
        if quantization in ("int8", "int4", "gguf"):
            raise ValueError(f"quantization {quantization!r} runs on the CPU only; use none")
        if dtype == "auto":
            bf16 = torch.cuda.is_bf16_supported()
            return Precision(
                dtype=torch.bfloat16 if bf16 else torch.float16,
                quantization="none",
                reason="auto on CUDA",
            )
        return Precision(dtype=DTYPES[dtype], quantization="none", reason="asked for")
    if quantization in ("int8", "int4", "gguf"):
        # The kernels take bfloat16 activations; without native bf16 float32 is the fallback.
        fallback = torch.bfloat16 if native_bf16() else torch.float32
        chosen = DTYPES[dtype] if dtype != "auto" else fallback
        return Precision(dtype=chosen, quantization=_quantization(quantization), reason="asked for")
    if dtype != "auto":
        return Precision(dtype=DTYPES[dtype], quantization="none", reason="asked for")
    if quantization == "none" or not native_bf16():
        reason = "asked for" if quantization == "none" else "this CPU has no native bfloat16"
        return Precision(dtype=torch.float32, quantization="none", reason=reason)
    return None


def choose(
    folder: Path,
    load: Callable[[Precision], Any | None],
    tokenizer: Callable[[], Any],
    *,
    progress: Callable[[str], None] | None = None,
    small_model_bytes: int | None = None,
    remeasure: bool = False,
    limits: Limits | None = None,
    mix: str | None = None,
    interim: bool = False,
) -> Precision:
    """The fastest candidate whose quality holds for this model on this CPU: cached, or
    measured now (`remeasure`: measured again whatever is cached) and cached; a provisional
    cached one is measured again (see the module docstring). `load(precision)` returns the
    model in that precision, or None when the model cannot take it (int4 on products its groups
    do not divide); `tokenizer()` gives the model's tokenizer, asked for only to measure. `mix`:
    the model came from a GGUF file, whose own mix of int8 and int4 ("gguf", this rule:
    inference/gguf.py mix_rule) is the quantized candidate instead of int8 and int4 for all:
    quantizing the file's weights a second time costs quality the one-token agreement does not
    see (docs/context.md, run 9). `interim`: the native kernels are being built, so what this
    load measures would be measured again by the next (the cache is per kernels) and would be
    timed beside the build: when nothing is cached, bfloat16 serves this load unmeasured
    (INTERIM, what the measurements on torch's kernels choose) and nothing is kept."""
    small = SMALL_MODEL_BYTES if small_model_bytes is None else small_model_bytes
    if weight_bytes(folder) < small:
        return Precision(
            dtype=torch.float32,
            quantization="none",
            reason="a small model: per-operator overhead dominates, float32 is as fast",
        )
    limits = limits or Limits()
    key = _cache_key(folder) + (f"|gguf {mix}" if mix else "")
    cached = None if remeasure else _valid_entry(_read_cache().get(key))
    if cached is not None and not cached["record"].get("provisional"):
        return _from_entry(cached, "measured on this machine")
    if interim and cached is None and not remeasure:
        return INTERIM
    again = cached is not None
    (progress or log.info)(
        "measuring which precision runs this model fastest here"
        + (" again (the last measurement was on a busy machine)" if again else " (once)")
    )
    load_before = machine.load_average()
    others = machine.OtherLoad()
    measured = _measure(load, tokenizer(), _candidates(gguf_mix=mix is not None))
    other_cores = others.cores()
    attempts = 1
    if cached is not None:  # keep the fastest of every attempt: busy only slows passes down
        attempts += int(cached["record"].get("attempts", 1))
        measured = _merge(measured, [Measurement(**m) for m in cached["measurements"]])
    doubt = _doubt(measured, other_cores, limits)
    best = _best(measured)
    record: dict[str, Any] = {
        "measuredAt": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "repeats": [min(m.repeats for m in measured), max(m.repeats for m in measured)],
        "spread": round(max(m.spread for m in measured), 3),
        "loadAverage": load_before,
        "otherCores": other_cores,
        "kernels": native_layout(),
        "attempts": attempts,
        "provisional": doubt if doubt and attempts < MAX_ATTEMPTS else None,
        "doubt": doubt,
    }
    entries = _read_cache()
    entries[key] = {
        "format": FORMAT,
        "choice": {"dtype": best.dtype, "quantization": best.quantization},
        "summary": f"1/8-token passes: {_summary(measured)}",
        "measurements": [asdict(m) for m in measured],
        "record": record,
    }
    _write_cache(entries)
    log.info(
        "precision for %s: %s (%s)%s",
        folder,
        best.name,
        _summary(measured),
        f"; provisional: {doubt}" if record["provisional"] else "",
    )
    return _from_entry(entries[key], "measured on this machine")


def describe_measurement(record: dict[str, Any] | None) -> str | None:
    """When and how a precision was measured, in words (`memosight models`)."""
    if not record:
        return None
    low, high = record.get("repeats") or [0, 0]
    repeats = f"{low}" if low == high else f"{low}-{high}"
    parts = [
        f"{record.get('measuredAt', '?')}",
        f"fastest of {repeats} repeats (spread {float(record.get('spread', 0)):.0%})",
    ]
    if record.get("loadAverage") is not None:
        parts.append(f"load average {record['loadAverage']}")
    if record.get("otherCores") is not None:
        parts.append(f"other processes {record['otherCores']} cores")
    if int(record.get("attempts", 1)) > 1:
        parts.append(f"{record['attempts']} attempts")
    text = ", ".join(parts)
    if record.get("provisional"):
        text += f"; provisional ({record['provisional']}): measured again at the next load"
    elif record.get("doubt"):
        text += f"; kept after {record.get('attempts')} attempts ({record['doubt']})"
    return text


def _measure(
    load: Callable[[Precision], Any | None], tokenizer: Any, candidates: list[Precision]
) -> list[Measurement]:
    ids = _probe_ids(tokenizer)
    measured: list[Measurement] = []
    reference: torch.Tensor | None = None
    for candidate in candidates:
        model = load(candidate)
        if model is None:
            continue
        choices, one, eight = _time(model, ids)
        size = _weights_in_memory(model)
        layers = int(getattr(model.config, "num_hidden_layers", 0) or 0)
        del model
        if reference is None:
            reference = choices
        agreement = float((choices == reference).float().mean())
        measured.append(
            Measurement(
                dtype=str(candidate.dtype).removeprefix("torch."),
                quantization=candidate.quantization,
                one_token_ms=round(one.fastest, 3),
                eight_tokens_ms=round(eight.fastest, 3),
                agreement=round(agreement, 4),
                repeats=min(one.repeats, eight.repeats),
                spread=round(max(one.spread, eight.spread), 3),
                settled=one.settled and eight.settled,
                weight_bytes=size,
                layers=layers,
            )
        )
    return measured


def _merge(new: list[Measurement], old: list[Measurement]) -> list[Measurement]:
    """Each candidate's fastest passes over this and earlier attempts."""
    before = {(m.dtype, m.quantization): m for m in old}
    merged = []
    for m in new:
        prior = before.get((m.dtype, m.quantization))
        if prior is not None:
            m.one_token_ms = min(m.one_token_ms, prior.one_token_ms)
            m.eight_tokens_ms = min(m.eight_tokens_ms, prior.eight_tokens_ms)
            m.repeats += prior.repeats
        merged.append(m)
    return merged


def _doubt(measured: list[Measurement], other_cores: float | None, limits: Limits) -> str | None:
    """Why this measurement cannot be trusted, or None."""
    if other_cores is not None and other_cores > limits.busy_cores:
        return f"other processes kept {other_cores:.1f} cores busy meanwhile"
    for m in measured:
        if m.spread > limits.max_spread:
            return f"{m.name}'s repeats varied by {m.spread:.0%}"
        for rows, ms in ((1, m.one_token_ms), (8, m.eight_tokens_ms)):
            ceiling = limits.ceiling_ms(m.weight_bytes, m.layers, rows)
            if ms > ceiling:
                return (
                    f"{m.name} took {ms:.0f} ms a {rows}-token pass, more than the "
                    f"{ceiling:.0f} ms reading its {m.weight_bytes / 1e6:.0f} MB allows"
                )
    return None


def _summary(measured: list[Measurement]) -> str:
    return ", ".join(
        f"{m.name} {m.one_token_ms:.1f}/{m.eight_tokens_ms:.1f} ms"
        + (f" agreement {m.agreement:.0%}" if m.dtype != "float32" else "")
        for m in measured
    )


def _valid_entry(entry: Any) -> dict[str, Any] | None:
    """A cache entry of this format with a choice, its measurements and record; an entry from
    before records were kept counts as provisional (measured again once)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("choice"), dict):
        return None
    choice = entry["choice"]
    if choice.get("dtype") not in DTYPES or choice.get("quantization") not in QUANTIZATIONS:
        return None
    try:
        [Measurement(**m) for m in entry.get("measurements", [])]
    except TypeError:
        return None
    record = entry.get("record")
    if entry.get("format") != FORMAT or not isinstance(record, dict):
        record = {"provisional": "measured before measurements were checked", "attempts": 1}
        return {**entry, "record": record, "measurements": entry.get("measurements", [])}
    return entry


def _from_entry(entry: dict[str, Any], reason: str) -> Precision:
    choice = entry["choice"]
    return Precision(
        dtype=DTYPES[choice["dtype"]],
        quantization=_quantization(choice["quantization"]),
        reason=f"{reason} ({entry.get('summary', 'cached')})",
        measured=entry["record"],
    )


def _quantization(name: str) -> Quantization:
    known: dict[str, Quantization] = {"int8": "int8", "int4": "int4", "gguf": "gguf"}
    return known.get(name, "none")


def _candidates(*, gguf_mix: bool = False) -> list[Precision]:
    reason = "candidate"
    quantized: list[Quantization] = ["gguf"] if gguf_mix else ["int8", "int4"]
    return [
        Precision(dtype=torch.float32, quantization="none", reason=reason),  # the reference
        Precision(dtype=torch.bfloat16, quantization="none", reason=reason),
        *(Precision(dtype=torch.bfloat16, quantization=q, reason=reason) for q in quantized),
    ]


def _best(measured: list[Measurement]) -> Measurement:
    """The fastest whose quality holds; float32 unless another is NEAR_TIE faster."""
    reference = measured[0]
    good = [m for m in measured[1:] if m.agreement >= AGREEMENT_FLOOR]
    fastest = min(good, key=lambda m: m.cost, default=None)
    if fastest is None or fastest.cost * NEAR_TIE > reference.cost:
        return reference
    return fastest


@dataclass(frozen=True)
class Timing:
    """A pass size's timing: the fastest repeat (ms), how many, their spread, and whether the
    fastest had stopped improving."""

    fastest: float
    repeats: int
    spread: float
    settled: bool


@torch.inference_mode()
def _time(model: Any, ids: list[int]) -> tuple[torch.Tensor, Timing, Timing]:
    """Greedy choices after every probe position [S], and the timings of a one-token and an
    8-token pass on top of the probe's cache, through the decoders' own trunk: taking turns,
    the fastest of each kept, until both stop improving (bounded: see MAX_TURNS)."""
    trunk = prepare_trunk(model)
    cache = new_cache(model)
    device = next(model.parameters()).device
    prompt = torch.tensor([ids], device=device)  # [1, S]
    choices = trunk.logits(trunk(prompt, cache)).argmax(-1)  # [S]

    def run(rows: int) -> float:
        step = torch.tensor([ids[:rows]], device=device)
        started = time.perf_counter()
        trunk.logits(trunk(step, cache)[-1:])
        elapsed = (time.perf_counter() - started) * 1000
        cache.crop(-rows)
        return elapsed

    run(1)  # warm-up
    run(8)
    samples: dict[int, list[float]] = {1: [], 8: []}
    unchanged = 0  # turns in a row that improved neither fastest by more than STABLE_RATIO
    started = time.monotonic()
    while len(samples[1]) < MAX_TURNS:
        before = {rows: min(times, default=math.inf) for rows, times in samples.items()}
        for rows, times in samples.items():
            times.append(run(rows))
        improved = any(min(samples[r]) * STABLE_RATIO < before[r] for r in samples)
        unchanged = 0 if improved else unchanged + 1
        turns = len(samples[1])
        if turns >= MIN_TURNS and unchanged >= STABLE_TURNS:
            break
        if time.monotonic() - started > TIMING_BUDGET_S and turns >= 2:
            break
    settled = unchanged >= STABLE_TURNS

    def timing(times: list[float]) -> Timing:
        fastest = min(times)
        spread = (statistics.median(times) - fastest) / fastest if fastest > 0 else 0.0
        return Timing(fastest, len(times), spread, settled)

    return choices, timing(samples[1]), timing(samples[8])


def _weights_in_memory(model: Any) -> int:
    """Bytes of the weights a pass reads, about: every parameter, and the quantized weights
    (a table that shares the LM head's counted once)."""
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    for module in model.modules():
        if isinstance(module, QuantizedLinear) or (
            isinstance(module, QuantizedEmbedding) and not module.shared
        ):
            total += module.quantized.nbytes()
    return total


def _probe_ids(tokenizer: Any) -> list[int]:
    """PROBE_TOKENS ids of real code (the shipped sample, repeated if short)."""
    text = PROBE_TEXT.read_text()
    ids = tokenizer.encode(text, add_special_tokens=False) or [0]
    while len(ids) < PROBE_TOKENS:
        ids = ids + ids
    return ids[:PROBE_TOKENS]


def weight_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.suffix in (".safetensors", ".bin"))


def model_digest(folder: Path) -> str:
    """A short hash of a model folder's config and weight files (names and sizes)."""
    digest = hashlib.sha256()
    for path in sorted(folder.iterdir()):
        if path.name == "config.json":
            digest.update(path.read_bytes())
        elif path.suffix in (".safetensors", ".bin"):
            digest.update(f"{path.name}:{path.stat().st_size}".encode())
    return digest.hexdigest()[:16]


def _cache_key(folder: Path) -> str:
    """This machine, thread count, torch, its kernels (native or torch's), and the model."""
    return f"{machine.machine_key()}|{native_layout()} kernels|{model_digest(folder)}"


def _cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memosight" / "precision.json"


def _read_cache() -> dict[str, Any]:
    try:
        data = json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(entries: dict[str, Any]) -> None:
    path = _cache_file()
    try:
        atomic_file.write_json(path, entries)
    except OSError as err:  # a read-only cache: measure again next time
        log.warning("cannot save the precision choice to %s: %s", path, err)
