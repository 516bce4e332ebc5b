"""What the decoders timed on this machine for a model, kept so a new server needs no timing.

Three timings steer decoding without changing its output: the pass costs the speculative
decoder sizes its draft trees with (drafters.CostModel), the kernel each few-row product runs
in a float32 trunk (row_kernels.RowKernels), and one prefill, the first sample of the prefill
rate that sizes cold prompts (pipeline/latency.py). They are kept in
$XDG_CACHE_HOME/memosight/calibration.json under a key of the machine (CPU model, thread count,
torch version), the kernels, the model (its files' digest, as inference/precision.py keys it) and
its precision. Every entry is validated when read: a file that does not parse, or an entry of
the wrong shape, counts as missing and is written over with the next measurement.
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import atomic_file, machine
from .row_kernels import COPY, FEW_ROWS, LINEAR, TRANSPOSED

log = logging.getLogger(__name__)

FORMAT = 1  # bump when an entry's shape changes
MAX_ENTRIES = 64  # the oldest go first: machines and models come and go


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """One model's timings on this machine; None where a step was not measured."""

    pass_costs: dict[int, float] | None = None  # ms of a pass over q tokens (CostModel.costs)
    row_kernels: tuple[int, ...] | None = None  # RowKernels.chosen, under the key's threads
    prefill: tuple[int, float] | None = None  # (tokens, ms) of one prefill
    measured_at: str = ""
    other_cores: float | None = None  # other processes' CPU use while it was measured

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "passCosts": {str(q): ms for q, ms in (self.pass_costs or {}).items()} or None,
            "rowKernels": list(self.row_kernels) if self.row_kernels else None,
            "prefill": list(self.prefill) if self.prefill else None,
            "measuredAt": self.measured_at,
            "otherCores": self.other_cores,
        }


def key(model_digest: str, precision: str, kernels: str) -> str:
    """The cache key of a model (precision.model_digest), its precision and its kernels here."""
    return f"{machine.machine_key()}|{kernels}|{model_digest}|{precision}"


def read(entry_key: str) -> Calibration | None:
    """The kept timings for this key, or None (none kept, or not valid)."""
    return parse(_read_file().get(entry_key))


def write(entry_key: str, calibration: Calibration) -> None:
    """Keep these timings (best effort: a read-only cache measures again next time)."""
    entries = {k: v for k, v in _read_file().items() if parse(v) is not None}
    entries.pop(entry_key, None)
    entries[entry_key] = calibration.to_json()
    while len(entries) > MAX_ENTRIES:
        entries.pop(next(iter(entries)))
    path = cache_file()
    try:
        atomic_file.write_json(path, entries)
    except OSError as err:
        log.warning("cannot keep the calibration in %s: %s", path, err)


def parse(entry: Any) -> Calibration | None:
    """A Calibration from a cache entry, or None when it is not one of this format."""
    if not isinstance(entry, dict) or entry.get("format") != FORMAT:
        return None
    try:
        costs = _pass_costs(entry.get("passCosts"))
        kernels = _row_kernels(entry.get("rowKernels"))
        prefill = _prefill(entry.get("prefill"))
    except (TypeError, ValueError):
        return None
    other = entry.get("otherCores")
    return Calibration(
        pass_costs=costs,
        row_kernels=kernels,
        prefill=prefill,
        measured_at=str(entry.get("measuredAt", "")),
        other_cores=float(other) if isinstance(other, (int, float)) else None,
    )


def _positive(value: Any) -> float:
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"not a positive time: {value!r}")
    return number


def _pass_costs(value: Any) -> dict[int, float] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not value:
        raise ValueError("pass costs must be a non-empty object")
    costs = {int(q): _positive(ms) for q, ms in value.items()}
    if any(q < 1 for q in costs) or 1 not in costs:
        raise ValueError("pass sizes start at 1")
    return costs


def _row_kernels(value: Any) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != FEW_ROWS + 1:
        raise ValueError("one kernel per row count")
    if any(k not in (LINEAR, TRANSPOSED, COPY) or isinstance(k, bool) for k in value):
        raise ValueError("unknown kernel")
    return tuple(int(k) for k in value)


def _prefill(value: Any) -> tuple[int, float] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError("a prefill is [tokens, ms]")
    tokens = int(value[0])
    if tokens < 1:
        raise ValueError("a prefill has tokens")
    return tokens, _positive(value[1])


def cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memosight" / "calibration.json"


def _read_file() -> dict[str, Any]:
    try:
        data = json.loads(cache_file().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
