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
near-ties). The answer is cached per machine, thread count, torch version and model.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from .fused_trunk import prepare_trunk
from .kv_cache import new_cache
from .quantize import Quantization, native_layout

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
AGREEMENT_FLOOR = 0.95  # share of next-token argmaxes equal to float32's on the probe text
NEAR_TIE = 1.1  # a lower precision must be at least this much faster to be chosen
PROBE_TOKENS = 256  # prompt positions under the timed passes
PROBE_TEXT = Path(__file__).resolve().parent.parent / "samples" / "quickstart.py"
TIMING_TURNS = 5
SMALL_MODEL_BYTES = 100 * 2**20  # weight files under this: float32, nothing measured


@dataclass(frozen=True, kw_only=True)
class Precision:
    dtype: torch.dtype
    quantization: Quantization
    reason: str  # why: asked for, or what was measured

    def describe(self) -> str:
        name = str(self.dtype).removeprefix("torch.")
        return name if self.quantization == "none" else f"{self.quantization} weights, {name}"


@dataclass(kw_only=True)
class Measurement:
    dtype: str
    quantization: str
    one_token_ms: float
    eight_tokens_ms: float
    agreement: float  # with float32's next-token choices

    @property
    def cost(self) -> float:
        """A decoding mix: plain steps and verification passes over several drafted tokens."""
        return self.one_token_ms + self.eight_tokens_ms


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
    if quantization not in ("auto", "none", "int8", "int4"):
        raise ValueError(f"unknown quantization {quantization!r}; use auto, none, int8 or int4")
    if dtype != "auto" and dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use auto, float32, bfloat16 or float16")
    if device.type == "cuda":
        if quantization in ("int8", "int4"):
            raise ValueError(f"quantization {quantization!r} runs on the CPU only; use none")
        if dtype == "auto":
            bf16 = torch.cuda.is_bf16_supported()
            return Precision(
                dtype=torch.bfloat16 if bf16 else torch.float16,
                quantization="none",
                reason="auto on CUDA",
            )
        return Precision(dtype=DTYPES[dtype], quantization="none", reason="asked for")
    if quantization in ("int8", "int4"):
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
    tokenizer: Any,
    *,
    progress: Callable[[str], None] | None = None,
    small_model_bytes: int | None = None,
) -> Precision:
    """Measure the candidates for this model on this CPU (once; cached), return the fastest
    whose quality holds. `load(precision)` returns the model in that precision, or None when
    the model cannot take it (int4 on products its groups do not divide)."""
    small = SMALL_MODEL_BYTES if small_model_bytes is None else small_model_bytes
    if weight_bytes(folder) < small:
        return Precision(
            dtype=torch.float32,
            quantization="none",
            reason="a small model: per-operator overhead dominates, float32 is as fast",
        )
    key = _cache_key(folder)
    cached = _read_cache().get(key)
    if isinstance(cached, dict) and "choice" in cached:
        choice = cached["choice"]
        return Precision(
            dtype=DTYPES[choice["dtype"]],
            quantization=_quantization(choice["quantization"]),
            reason=f"measured on this machine ({cached.get('summary', 'cached')})",
        )
    (progress or log.info)("measuring which precision runs this model fastest here (once)")
    ids = _probe_ids(tokenizer)
    measured: list[Measurement] = []
    reference: torch.Tensor | None = None
    for candidate in _candidates():
        model = load(candidate)
        if model is None:
            continue
        choices, one, eight = _time(model, ids)
        del model
        if reference is None:
            reference = choices
        agreement = float((choices == reference).float().mean())
        measured.append(
            Measurement(
                dtype=str(candidate.dtype).removeprefix("torch."),
                quantization=candidate.quantization,
                one_token_ms=round(one, 3),
                eight_tokens_ms=round(eight, 3),
                agreement=round(agreement, 4),
            )
        )
    best = _best(measured)
    summary = ", ".join(
        f"{m.quantization if m.quantization != 'none' else m.dtype} "
        f"{m.one_token_ms:.1f}/{m.eight_tokens_ms:.1f} ms"
        + (f" agreement {m.agreement:.0%}" if m.dtype != "float32" else "")
        for m in measured
    )
    entries = _read_cache()
    entries[key] = {
        "choice": {"dtype": best.dtype, "quantization": best.quantization},
        "summary": f"1/8-token passes: {summary}",
        "measurements": [asdict(m) for m in measured],
    }
    _write_cache(entries)
    log.info("precision for %s: %s (%s)", folder, best.quantization, summary)
    return Precision(
        dtype=DTYPES[best.dtype],
        quantization=_quantization(best.quantization),
        reason=f"measured on this machine (1/8-token passes: {summary})",
    )


def _quantization(name: str) -> Quantization:
    return "int8" if name == "int8" else "int4" if name == "int4" else "none"


def _candidates() -> list[Precision]:
    reason = "candidate"
    return [
        Precision(dtype=torch.float32, quantization="none", reason=reason),  # the reference
        Precision(dtype=torch.bfloat16, quantization="none", reason=reason),
        Precision(dtype=torch.bfloat16, quantization="int8", reason=reason),
        Precision(dtype=torch.bfloat16, quantization="int4", reason=reason),
    ]


def _best(measured: list[Measurement]) -> Measurement:
    """The fastest whose quality holds; float32 unless another is NEAR_TIE faster."""
    reference = measured[0]
    good = [m for m in measured[1:] if m.agreement >= AGREEMENT_FLOOR]
    fastest = min(good, key=lambda m: m.cost, default=None)
    if fastest is None or fastest.cost * NEAR_TIE > reference.cost:
        return reference
    return fastest


@torch.inference_mode()
def _time(model: Any, ids: list[int]) -> tuple[torch.Tensor, float, float]:
    """Greedy choices after every probe position [S], and the fastest one-token and 8-token
    pass (ms) on top of the probe's cache, through the decoders' own trunk."""
    trunk = prepare_trunk(model)
    cache = new_cache(model)
    device = next(model.parameters()).device
    prompt = torch.tensor([ids], device=device)  # [1, S]
    choices = trunk.logits(trunk(prompt, cache)).argmax(-1)  # [S]

    def run(rows: int) -> float:
        best = float("inf")
        for _ in range(TIMING_TURNS):
            step = torch.tensor([ids[:rows]], device=device)
            started = time.perf_counter()
            trunk.logits(trunk(step, cache)[-1:])
            best = min(best, time.perf_counter() - started)
            cache.crop(-rows)
        return best * 1000

    run(1)  # warm-up
    return choices, run(1), run(8)


def _probe_ids(tokenizer: Any) -> list[int]:
    """PROBE_TOKENS ids of real code (the shipped sample, repeated if short)."""
    text = PROBE_TEXT.read_text()
    ids = tokenizer.encode(text, add_special_tokens=False) or [0]
    while len(ids) < PROBE_TOKENS:
        ids = ids + ids
    return ids[:PROBE_TOKENS]


def weight_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.suffix in (".safetensors", ".bin"))


def _cache_key(folder: Path) -> str:
    """This machine, thread count, torch, its kernels (native or torch's), and the model's
    files (config and weight sizes)."""
    digest = hashlib.sha256()
    for path in sorted(folder.iterdir()):
        if path.name == "config.json":
            digest.update(path.read_bytes())
        elif path.suffix in (".safetensors", ".bin"):
            digest.update(f"{path.name}:{path.stat().st_size}".encode())
    machine = f"{_cpu_name()}|{torch.get_num_threads()} threads|torch {torch.__version__}"
    machine += f"|{native_layout()} kernels"
    return f"{machine}|{digest.hexdigest()[:16]}"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        temp.write_text(json.dumps(entries, indent=2) + "\n")
        os.replace(temp, path)
    except OSError as err:  # a read-only cache: measure again next time
        log.warning("cannot save the precision choice to %s: %s", path, err)
