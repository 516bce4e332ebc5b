"""The project's own CPU kernels (native/*.cpp), built once per machine in the background.

- native/int4_vnni.cpp: torch's int4 product dequantizes the weights again for every few rows,
  so a verification pass over 8 rows costs several one-row steps; this one reads each weight
  vector once and multiplies it into up to 8 rows with AVX-512 VNNI, weights in groups of 32 with
  a scale and a minimum each, activations quantized to int8 per 32 inputs (llama.cpp's q4_1 and
  q8_0 blocks).
- native/int8_vnni.cpp: the same for int8 weights (the LM head).
- native/attention.cpp: a few query rows over a KV cache, each row over exactly the keys it sees
  and computed alike whatever the other rows (torch's batched bfloat16 attention rounds
  differently from one row at a time, and is slower for one query).

They need an x86-64 CPU with AVX-512 VNNI, a C++ compiler and ninja; without them torch's
kernels run, with a log line that says why. Measured costs: docs/speculative.md.

Building never holds up a load or an answer:
- The first load that may use them (`refresh`) starts the build in a child process at low
  priority, in its own session: a server that is closed or killed while it builds does not
  stop it, and the kernels count as built only once the child has loaded them and written
  READY, so nothing half-made is ever used. Until then models load on torch's kernels.
- A loaded model keeps the kernels it was loaded with: its int4 weights are quantized and laid
  out for one kernel set (groups of 128 for torch's, 32 for these; a different rounding, so not
  a re-layout but a new quantization from the dense weights), and a KV cache is exact only for
  the kernels that computed it. The next load adopts the built kernels. `kernels()` changes its
  answer only in `refresh`, which loads call first, so one load never mixes the two sets.
- One build per machine at a time: the child holds an OS file lock (flock on BUILD_LOCK in the
  build folder), which dies with it. A process that finds it held waits for nothing: it runs
  torch's kernels and looks again at its next load. Holding the lock, the child removes what a
  killed build may have left (torch's own lock file, which torch would wait on for good, and
  half-written objects) and builds from scratch.
- The build folder is cache_root()/torch-<version>-<hash>/, the hash over
  the sources, the compiler flags, the Python ABI and the folder the sources are in, so two
  installs (an editable one and a test clone) never share a build.ninja.

MEMOSIGHT_NATIVE_KERNELS=0 turns them off; =wait builds them in the foreground at the first
load (or `kernels()` call) that may use them, waiting at most WAIT_SECONDS (tests and
benchmarks, which measure these kernels).

This module imports nothing of the package (only the standard library and torch): the build
child runs this file as a script.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch

log = logging.getLogger(__name__)

SOURCE_DIR = Path(__file__).resolve().parent / "native"
SOURCE_NAMES = ("module.cpp", "int4_vnni.cpp", "int8_vnni.cpp", "attention.cpp")
HEADER_NAMES = ("simd.h",)
CPU_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni")
COMPILER_FLAGS = ["-O3", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512vnni"]
ENV_SWITCH = "MEMOSIGHT_NATIVE_KERNELS"
DIR_SWITCH = "MEMOSIGHT_KERNEL_DIR"
ATTENTION_HEAD_SIZES = frozenset({16, 32, 64, 80, 96, 128, 256})  # native/attention.cpp's

# Files in a build folder.
BUILD_LOCK = "build.flock"  # flock()ed by the building child for its whole life
TORCH_BATON = "lock"  # torch's cpp_extension lock file: only a killed build leaves one behind
READY = "ready.json"  # written last, once the child has loaded what it built
FAILED = "failed.json"  # the last failed build's error, so loads do not retry it at once
BUILD_LOG = "build.log"  # the compiler's output (never the server's stdout: its protocol)
KEPT = frozenset({BUILD_LOCK, BUILD_LOG})  # what clearing a half-made build leaves

BUILD_NICE = 10  # the build runs beside an editor: completions come first
RETRY_FAILED_SECONDS = 3600  # a failed build (no compiler, say) is tried again after this
WAIT_SECONDS = 900  # the longest a foreground build (=wait) is waited for
BUSY_EXIT = 3  # the child's exit status when another process holds the build lock
# The child's command line: runs this file as __main__ without putting its folder on sys.path
# (its modules' names must not shadow anything torch imports).
_BOOTSTRAP = (
    "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


@dataclass(frozen=True)
class Target:
    """What to build and where: the module's name, its build folder, its source files."""

    name: str
    folder: Path
    sources: tuple[Path, ...]


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


def target(source_dir: Path = SOURCE_DIR) -> Target:
    """The module's name and build folder for the sources in `source_dir`: one per source
    version, flags, torch, Python ABI and install (the folder's path)."""
    sources = tuple(source_dir / name for name in SOURCE_NAMES)
    digest = hashlib.sha256(" ".join(COMPILER_FLAGS).encode())
    digest.update(f"|{sys.implementation.cache_tag}|{source_dir.resolve()}|".encode())
    for source in [*sources, *(source_dir / name for name in HEADER_NAMES)]:
        digest.update(source.read_bytes())
    short = digest.hexdigest()[:12]
    folder = cache_root() / f"torch-{torch.__version__}-{short}"
    return Target(f"memosight_native_{short}", folder, sources)


class _Kernels:
    """This process's view of the kernels: the module once adopted, else why not, and the
    build child it started (at most one at a time)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.module: ModuleType | None = None
        self.reason = "not looked for yet"
        self.checked = False
        self.builder: subprocess.Popen[bytes] | None = None
        self.building = False  # by this process or another: the next load may use them


_STATE = _Kernels()


def kernels() -> ModuleType | None:
    """The compiled module (int4_matmul, int8_matmul, attend) this process runs, or None. Never
    builds or waits (but with ENV_SWITCH=wait the first call builds in the foreground); the
    answer changes only when a load calls `refresh`."""
    if not _STATE.checked:
        refresh(build=_wait_mode())
    return _STATE.module


def being_built() -> bool:
    """Whether the kernels were not here at the last `refresh` but are being built (by this
    process or another), so that a later load will most likely run them."""
    return _STATE.module is None and _STATE.building


def describe() -> str:
    """Which kernels run here, in words (`memosight models`)."""
    module = kernels()
    return "native (AVX-512 VNNI)" if module is not None else f"torch's ({_STATE.reason})"


def refresh(
    progress: Callable[[str], None] | None = None, *, build: bool = True
) -> ModuleType | None:
    """At the start of a load that may use the native kernels: adopt them if they were built
    since this process last looked (by any process), else, with `build`, start building them
    in the background (or, ENV_SWITCH=wait, build them now) and tell `progress`. Returns
    kernels()."""
    state = _STATE
    with state.lock:
        state.checked = True
        if state.module is not None:
            return state.module
        reason = unsupported_reason()
        if reason is not None:
            state.reason = reason
            return None
        try:
            built = target()
        except OSError as err:  # the sources are missing from this install
            state.reason = f"their sources are unreadable: {err}"
            return None
        if _adopt(state, built) is None:
            if not build:
                state.reason = "not built here yet: a load that may use them builds them"
            elif _wait_mode():
                _build_now(state, built, progress)
            else:
                _build_in_background(state, built, progress)
        if state.module is None:
            log.info("torch's kernels run: the native ones are not here (%s)", state.reason)
        return state.module


def _wait_mode() -> bool:
    return os.environ.get(ENV_SWITCH, "1") == "wait"


def _adopt(state: _Kernels, built: Target) -> ModuleType | None:
    """The module from a finished build of `built` (READY), loaded into this process."""
    try:
        ready = json.loads((built.folder / READY).read_text())
        library = built.folder / str(ready["library"])
        name = str(ready["module"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        spec = importlib.util.spec_from_file_location(name, library)
        if spec is None or spec.loader is None:
            raise ImportError(f"no module in {library}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (ImportError, OSError) as err:  # removed or damaged since: build it again
        log.warning("the native kernels in %s do not load (%s): building them again", library, err)
        (built.folder / READY).unlink(missing_ok=True)
        return None
    state.module = module
    state.reason = ""
    state.building = False
    log.info("native kernels in use (%s)", built.folder)
    return module


def _build_in_background(
    state: _Kernels, built: Target, progress: Callable[[str], None] | None
) -> None:
    """Start the build child unless one runs, another process holds the build lock, or the
    last build failed recently; state.reason says which."""
    state.building = False
    if state.builder is not None and state.builder.poll() is None:
        state.reason = "being built in the background; the next load uses them"
        state.building = True
        return
    failure = _recent_failure(built)
    if failure is not None:
        state.reason = f"building them failed: {failure}"
        return
    if _lock_held(built.folder):
        state.reason = "being built by another process; the next load uses them"
        state.building = True
        return
    try:
        state.builder = _spawn(built, wait=False)
    except OSError as err:
        state.reason = f"the build could not start: {err}"
        return
    state.reason = "being built in the background; the next load uses them"
    state.building = True
    message = "building the native CPU kernels in the background, once for this machine"
    (progress or log.info)(message)
    threading.Thread(
        target=_reap, args=(state.builder, built), name="memosight-kernel-build", daemon=True
    ).start()


def _build_now(state: _Kernels, built: Target, progress: Callable[[str], None] | None) -> None:
    """ENV_SWITCH=wait: build (or wait for the process building) now, for at most
    WAIT_SECONDS, then adopt the result."""
    failure = _recent_failure(built)
    if failure is None:
        (progress or log.info)("building the native CPU kernels, once for this machine")
        try:
            child = _spawn(built, wait=True)
            child.wait(WAIT_SECONDS + 60)
        except (OSError, subprocess.TimeoutExpired) as err:
            state.reason = f"the build did not finish: {err}"
            return
        if _adopt(state, built) is not None:
            return
        failure = _recent_failure(built)
    state.reason = f"building them failed: {failure or 'see ' + str(built.folder / BUILD_LOG)}"


def _spawn(built: Target, *, wait: bool) -> subprocess.Popen[bytes]:
    built.folder.mkdir(parents=True, exist_ok=True)
    sources = [str(source) for source in built.sources]
    command = [sys.executable, "-c", _BOOTSTRAP, __file__, str(built.folder), built.name]
    with (built.folder / BUILD_LOG).open("ab") as output:
        return subprocess.Popen(
            [*command, *sources, "--wait" if wait else "--once"],
            cwd=built.folder,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
            start_new_session=True,  # a server's process group ending does not end the build
        )


def _reap(child: subprocess.Popen[bytes], built: Target) -> None:
    """Wait for the background build (a daemon thread: it never holds the process up)."""
    status = child.wait()
    if status == 0:
        log.info("native kernels built (%s); the next model load uses them", built.folder)
    elif status != BUSY_EXIT:
        failure = _recent_failure(built) or f"exit status {status}"
        log.warning("building the native kernels failed: %s", failure)


def _recent_failure(built: Target) -> str | None:
    """The last build's error, if it failed within RETRY_FAILED_SECONDS."""
    try:
        failed = json.loads((built.folder / FAILED).read_text())
        if time.time() - float(failed["at"]) < RETRY_FAILED_SECONDS:
            return str(failed["error"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _lock_held(folder: Path) -> bool:
    """Whether a live process holds the build lock now (taken and let go at once if not)."""
    import fcntl  # Unix only, like the kernels (unsupported_reason)

    try:
        with (folder / BUILD_LOCK).open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(handle, fcntl.LOCK_UN)
    except BlockingIOError:
        return True
    except OSError:  # no folder yet, or not writable: nobody builds there
        return False
    return False


# -- the build child --------------------------------------------------------------------------


def _take_lock(handle, wait_s: float) -> bool:
    """flock the build lock, polling for at most `wait_s` (0: one try)."""
    import fcntl

    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.5)


def _clear(folder: Path) -> None:
    """Everything a killed or failed build left in the folder, torch's lock file included."""
    for path in folder.iterdir():
        if path.name in KEPT:
            continue
        if path.is_dir() and not path.is_symlink():
            for inner in sorted(path.rglob("*"), reverse=True):
                inner.rmdir() if inner.is_dir() and not inner.is_symlink() else inner.unlink()
            path.rmdir()
        else:
            path.unlink()


def _write_json(path: Path, data: dict) -> None:
    # Its own writer, not atomic_file.py: the build child runs this file alone (_BOOTSTRAP),
    # outside the package, so it imports nothing of it.
    temp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    temp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(temp, path)


def _say(line: str) -> None:
    """A line in the build log (the child's stderr)."""
    sys.stderr.write(f"{line}\n")
    sys.stderr.flush()


def _child_main(argv: list[str]) -> int:
    """`native_kernels.py FOLDER NAME SOURCE... --wait|--once`: build under the lock (wait for
    it, or give up at once when another process holds it); 0 when built, BUSY_EXIT when another
    process builds, 1 when the build failed (FAILED says why)."""
    *positional, mode = argv
    folder, name, sources = Path(positional[0]), positional[1], positional[2:]
    with contextlib.suppress(OSError):
        os.nice(BUILD_NICE)
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / BUILD_LOCK).open("a") as handle:
        if not _take_lock(handle, WAIT_SECONDS if mode == "--wait" else 0):
            return BUSY_EXIT
        if (folder / READY).is_file():
            return 0  # built while this child waited for the lock
        _clear(folder)  # no READY: whatever is here is half-made
        started = time.time()
        _say(f"building {name} in {folder} (pid {os.getpid()})")
        try:
            from torch.utils import cpp_extension

            module = cpp_extension.load(
                name=name,
                sources=sources,
                extra_cflags=[*COMPILER_FLAGS, "-fopenmp"],
                extra_ldflags=["-fopenmp"],
                build_directory=str(folder),
                verbose=False,
            )
        except Exception as err:  # a compiler error, a missing ninja or compiler, a full disk
            last = str(err).strip().splitlines()[-1:] or [type(err).__name__]
            _write_json(folder / FAILED, {"error": last[0], "at": time.time()})
            _say(f"build failed: {err}")
            return 1
        library = Path(str(module.__file__)).name
        seconds = round(time.time() - started, 1)
        (folder / FAILED).unlink(missing_ok=True)
        _write_json(
            folder / READY, {"module": module.__name__, "library": library, "seconds": seconds}
        )
        _say(f"built in {seconds} s")
    return 0


def cache_root() -> Path:
    """Where build folders go: $MEMOSIGHT_KERNEL_DIR, else $XDG_CACHE_HOME/memosight/kernels."""
    if os.environ.get(DIR_SWITCH):
        return Path(os.environ[DIR_SWITCH])
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


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
