"""What this machine runs interactively: its cores, memory and whether it has a GPU, and the
rule that says whether a model of a given size fits. No torch: the GPU is seen from the driver's
files, the memory from the OS.

The rule, extrapolated from one measurement of Qwen2.5-Coder-0.5B on a 2-core CPU (figures:
docs/discovery.md): decoding slows in proportion to the parameter count, so a model of up to
CPU_PARAMETERS_PER_CORE parameters a core decodes fast enough to type along, and past
CPU_MAX_PARAMETERS memory bandwidth keeps any CPU below that whatever its cores. The first load
also holds the model once in float32 while it measures precisions (inference/precision.py): 4 bytes
a parameter must fit in half the memory. On an NVIDIA GPU the model runs in bfloat16: up to 8B
parameters (~16 GB) count as interactive (its memory is not asked for).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CPU_PARAMETERS_PER_CORE = 0.75e9
CPU_MAX_PARAMETERS = 3e9
GPU_MAX_PARAMETERS = 8e9
FLOAT32_BYTES = 4  # a parameter while the first load measures precisions
MEMORY_SHARE = 0.5  # of the machine's memory a model may take


@dataclass(frozen=True, kw_only=True)
class Machine:
    cores: int
    memory_bytes: int | None
    gpu: bool

    def describe(self) -> str:
        memory = f"{self.memory_bytes / 2**30:.0f} GiB" if self.memory_bytes else "unknown memory"
        return f"{self.cores} cores, {memory}, {'an NVIDIA GPU' if self.gpu else 'no GPU'}"

    def parameter_limit(self) -> float:
        """The most parameters that run interactively here."""
        if self.gpu:
            return GPU_MAX_PARAMETERS
        limit = min(CPU_MAX_PARAMETERS, CPU_PARAMETERS_PER_CORE * self.cores)
        if self.memory_bytes:
            limit = min(limit, self.memory_bytes * MEMORY_SHARE / FLOAT32_BYTES)
        return limit

    def fits(self, parameters: int | None) -> tuple[bool, str]:
        """Whether a model of this many parameters runs interactively here, and why not."""
        if parameters is None:
            return True, "size unknown"
        limit = self.parameter_limit()
        where = "the GPU" if self.gpu else "this CPU"
        if parameters <= limit:
            return True, f"fits {where} (up to {format_parameters(limit)} parameters)"
        return False, (
            f"too large for interactive completion on {where} ({self.describe()}: up to "
            f"{format_parameters(limit)} parameters)"
        )


def this_machine(device: str = "auto") -> Machine:
    """This machine as `model.device` uses it: `cpu` leaves the GPU out."""
    return Machine(
        cores=_cores(), memory_bytes=_memory_bytes(), gpu=device != "cpu" and _nvidia_gpu()
    )


def format_parameters(count: float) -> str:
    return f"{count / 1e9:.1f}B" if count >= 1e9 else f"{count / 1e6:.0f}M"


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # not a POSIX system
        return None


def _nvidia_gpu() -> bool:
    """Whether an NVIDIA driver with a device is present (what CUDA needs)."""
    return Path("/proc/driver/nvidia/version").is_file() or Path("/dev/nvidia0").exists()
