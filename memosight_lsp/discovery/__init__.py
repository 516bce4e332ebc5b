"""The user's own code models, found offline: what `model.path: "auto"` loads.

`discover()` looks in the places people keep local models (places.py: Ollama, LM Studio,
llama.cpp's cache, the Hugging Face cache, $MEMOSIGHT_MODELS), judges each model from its header
or small files without loading weights (judge.py: code model, FIM tokens, loadable here, fits
this machine), asks the serving engines on their default loopback ports what they serve
(servers.py), and picks the best with the reason. It reads headers and small files only, walks
a bounded number of directory entries, gives each loopback engine PROBE_S, and makes no other
network call: it answers in well under a second (measured in docs/discovery.md).

No torch here (nor below): the server and the command line call this before any model loads.
MEMOSIGHT_DISCOVERY=0 turns discovery off (`auto` then finds nothing: the embedded model).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from . import servers
from .judge import Candidate, judge, judge_served, rank
from .machine import Machine, format_parameters, this_machine
from .places import Budget, find_models, places

SWITCH = "MEMOSIGHT_DISCOVERY"  # "0" (or off, false, no): discovery finds nothing


@dataclass(frozen=True, kw_only=True)
class Discovery:
    candidates: tuple[Candidate, ...]  # model files and folders, best first
    served: tuple[Candidate, ...]  # models the loopback engines serve, best first
    choice: Candidate | None  # what `auto` loads; None: nothing usable
    reason: str  # why that one, or why none
    machine: Machine
    places: tuple[tuple[str, str, bool], ...]  # (source, folder, exists) looked at
    notes: tuple[str, ...] = ()  # what was skipped or cut short
    seconds: float = 0.0
    enabled: bool = True
    code_models: int = 0  # code models found (usable or not)

    def to_json(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "choice": self.choice.to_json() if self.choice else None,
            "reason": self.reason,
            "candidates": [c.to_json() for c in self.candidates],
            "served": [c.to_json() for c in self.served],
            "machine": {
                "cores": self.machine.cores,
                "memoryBytes": self.machine.memory_bytes,
                "gpu": self.machine.gpu,
                "parameterLimit": int(self.machine.parameter_limit()),
            },
            "places": [{"source": s, "path": p, "exists": e} for s, p, e in self.places],
            "notes": list(self.notes),
            "seconds": round(self.seconds, 4),
        }


def enabled(env: Mapping[str, str]) -> bool:
    return env.get(SWITCH, "").strip().lower() not in ("0", "off", "false", "no")


def discover(
    *,
    env: Mapping[str, str] | None = None,
    device: str = "auto",
    engines: Sequence[tuple[str, str]] = servers.DEFAULT_ENGINES,
    machine: Machine | None = None,
) -> Discovery:
    """Everything found, judged and ranked, and the pick. `env` (default os.environ) gives the
    places (HOME, XDG_CACHE_HOME, ...); `engines` the loopback engines to ask; `device` is
    model.device (`cpu` judges sizes for the CPU even where a GPU is)."""
    env = os.environ if env is None else env
    started = time.perf_counter()
    machine = machine or this_machine(device)
    looked = tuple((source, str(root), root.exists()) for source, root in places(env))
    if not enabled(env):
        return Discovery(
            candidates=(),
            served=(),
            choice=None,
            reason=f"model discovery is off ({SWITCH}={env.get(SWITCH)})",
            machine=machine,
            places=looked,
            enabled=False,
        )
    budget = Budget()
    with ThreadPoolExecutor(max_workers=max(1, len(engines))) as pool:
        asked = [pool.submit(servers.probe, engine, url) for engine, url in engines]
        candidates = rank([judge(found, machine) for found in find_models(env, budget)])
        served = rank([judge_served(s, machine) for job in asked for s in job.result()])
    choice, reason = choose(candidates, served)
    return Discovery(
        candidates=tuple(candidates),
        served=tuple(served),
        choice=choice,
        reason=reason,
        machine=machine,
        places=looked,
        notes=tuple(budget.notes),
        seconds=time.perf_counter() - started,
        code_models=sum(c.code for c in candidates),
    )


def choose(
    candidates: Sequence[Candidate], served: Sequence[Candidate]
) -> tuple[Candidate | None, str]:
    """The best usable model file or folder (ranked lists), else the best code model a loopback
    engine serves (this process runs a local file faster than an engine: docs/speculative.md);
    and why, or why none."""
    usable = [c for c in candidates if c.usable]
    if usable:
        best = usable[0]
        others = f"; the best of {len(usable)} usable code models" if len(usable) > 1 else ""
        return best, f"{_qualities(best)}, {best.fit}{others}"
    engines = [c for c in served if c.code]
    if engines:
        best = engines[0]
        why = _why_none(candidates)
        return best, f"{why}; {best.fit} serves {best.name}, a code model"
    return None, _why_none(candidates)


def _qualities(c: Candidate) -> str:
    fim = f"FIM ({c.fim})" if c.fim else "no FIM tokens (prompts with the code before the cursor)"
    size = f"{format_parameters(c.parameters)} parameters" if c.parameters else "size unknown"
    return f"a code model with {fim}, {size}"


def _why_none(candidates: Sequence[Candidate]) -> str:
    if not candidates:
        return "no model found"
    code = [c for c in candidates if c.code]
    if not code:
        return f"{len(candidates)} model(s) found, none a code model"
    best = code[0]
    blocker = best.problem or best.fit
    return f"no usable code model: {best.name} ({best.source}): {blocker}"


__all__ = ["SWITCH", "Candidate", "Discovery", "Machine", "choose", "discover", "enabled"]
