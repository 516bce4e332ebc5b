"""The project's own CPU kernels (native/*.cpp), compiled once per machine on first use.

- native/int4_vnni.cpp: torch's int4 product dequantizes the weights again for every few rows,
  so a verification pass over 8 rows costs ~4x a one-row step; this one reads each weight vector
  once and multiplies it into up to 8 rows with AVX-512 VNNI, weights in groups of 32 with a
  scale and a minimum each, activations quantized to int8 per 32 inputs (llama.cpp's q4_1 and
  q8_0 blocks).
- native/int8_vnni.cpp: the same for int8 weights (the LM head): torch's int8 product of 8 rows
  costs 2.5x one row, this one about the same.
- native/attention.cpp: a few query rows over a KV cache, each row over exactly the keys it sees
  and computed alike whatever the other rows (torch's bfloat16 attention takes ~0.75 ms a layer
  for one query over 900 keys here, and batched it rounds differently from one row at a time).

They need an x86-64 CPU with AVX-512 VNNI, a C++ compiler and ninja; without them torch's
kernels run, with a log line that says why. The build (~40 s) goes to
$XDG_CACHE_HOME/memosight/kernels/<torch version>-<source hash>/, so it happens once per machine
and torch. MEMOSIGHT_NATIVE_KERNELS=0 turns them off.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch

log = logging.getLogger(__name__)

SOURCES = [
    Path(__file__).resolve().parent / "native" / name
    for name in ("module.cpp", "int4_vnni.cpp", "int8_vnni.cpp", "attention.cpp")
]
HEADERS = [SOURCES[0].parent / "simd.h"]
CPU_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni")
COMPILER_FLAGS = ["-O3", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512vnni"]
ENV_SWITCH = "MEMOSIGHT_NATIVE_KERNELS"
STALE_LOCK_SECONDS = 600  # a build takes about a minute: a lock this old was abandoned
ATTENTION_HEAD_SIZES = frozenset({16, 32, 64, 80, 96, 128, 256})  # native/attention.cpp's


def unsupported_reason() -> str | None:
    """Why the native kernels cannot run here (None: they can, once built)."""
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return f"{ENV_SWITCH}=0"
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return f"they are for x86-64 Linux (this is {platform.system()} {platform.machine()})"
    missing = [flag for flag in CPU_FLAGS if flag not in _cpu_flags()]
    if missing:
        return f"the CPU lacks {', '.join(missing)}"
    return None


def kernels() -> ModuleType | None:
    """The compiled module (int4_matmul, int8_matmul, attend), or None where it cannot run or be
    built; the reason is logged once."""
    return _build()[0]


def describe() -> str:
    """Which kernels run here, in words (`memosight models`)."""
    module, reason = _build()
    return "native (AVX-512 VNNI)" if module is not None else f"torch's ({reason})"


@functools.cache  # one build (or one failure) per process
def _build() -> tuple[ModuleType | None, str]:
    reason = unsupported_reason()
    if reason is None:
        try:
            return _compile(), ""
        except Exception as err:  # a compiler error, a missing ninja or compiler, a full disk
            last = str(err).strip().splitlines()[-1:] or [type(err).__name__]
            reason = f"building them failed: {last[0]}"
    log.info("torch's kernels run: the native ones cannot run here (%s)", reason)
    return None, reason


def ensure_built(progress: Callable[[str], None] | None = None) -> ModuleType | None:
    """kernels(), telling `progress` first when this call is the one that compiles them."""
    if progress is not None and unsupported_reason() is None and _build.cache_info().currsize == 0:
        name, folder = _target()
        if not any(folder.glob(f"{name}*.so")):
            progress("building the native CPU kernels, once for this machine (about a minute)")
    return kernels()


def _target() -> tuple[str, Path]:
    """The module's name and build folder: one per source version, flags and torch."""
    digest = hashlib.sha256(" ".join(COMPILER_FLAGS).encode())
    for source in [*SOURCES, *HEADERS]:
        digest.update(source.read_bytes())
    short = digest.hexdigest()[:12]
    return f"memosight_native_{short}", _cache_root() / f"torch-{torch.__version__}-{short}"


def _compile() -> ModuleType:
    from torch.utils import cpp_extension

    name, folder = _target()
    folder.mkdir(parents=True, exist_ok=True)
    _drop_stale_lock(folder / "lock")
    started = time.perf_counter()
    built = any(folder.glob(f"{name}*.so"))
    if not built:
        log.info("compiling the native kernels once for this machine (about a minute)")
    # The build tools must never write to stdout: it is the language server's protocol.
    with contextlib.redirect_stdout(sys.stderr):
        module = cpp_extension.load(
            name=name,
            sources=[str(source) for source in SOURCES],
            extra_cflags=[*COMPILER_FLAGS, "-fopenmp"],
            extra_ldflags=["-fopenmp"],
            build_directory=str(folder),
            verbose=False,
        )
    if not built:
        log.info("native kernels built in %.0f s (%s)", time.perf_counter() - started, folder)
    return module


def _drop_stale_lock(lock: Path) -> None:
    """torch waits for a build's lock file without end: one left by a process killed while
    building (an editor closed during the first minute) would hang every later load."""
    try:
        if time.time() - lock.stat().st_mtime > STALE_LOCK_SECONDS:
            lock.unlink()
            log.warning("removed the stale build lock %s", lock)
    except FileNotFoundError:
        pass


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memosight" / "kernels"


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()
