"""The real server with a fault injected from outside: torch or the process limits are patched
here, then memosight_lsp.cli.lsp_main runs unchanged (no test hooks in the production code).

Environment:
- MEMOSIGHT_FAULT_FILE=PATH: every attention call of every forward pass (prefill and decode
  steps alike, transformers' and the fused trunk's; not the model's timings, which run when
  the worker is idle) reads PATH when it exists:
  `raise-after N` lets N more calls through, then raises RuntimeError; `oom-after N` raises
  torch.OutOfMemoryError (what CUDA raises); `memory-after N` raises MemoryError (the CPU's);
  `hang-after N` blocks that call, polling nothing, until the file changes or goes (a worker
  stuck in a kernel or a lock: only the scheduler's watchdog gets the server past it).
  Each firing writes one line "injected fault fired: ..." to stderr, and the fault fires once
  per content of the file (rewrite the file to arm it again).
- MEMOSIGHT_FSIZE_LIMIT=BYTES: RLIMIT_FSIZE, so a write past BYTES fails with EFBIG, as a full
  disk fails a write (SIGXFSZ ignored, as a server must).
"""

from __future__ import annotations

import importlib.util
import os
import resource
import signal
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def install_forward_fault(control: Path) -> None:
    import torch
    import torch.nn.functional as F

    real = F.scaled_dot_product_attention
    lock = threading.Lock()
    state = {"armed": "", "left": 0}
    errors = {"raise": RuntimeError, "oom": torch.OutOfMemoryError, "memory": MemoryError}

    def read() -> str:
        try:
            return control.read_text().strip()
        except OSError:
            return ""

    # Found by module name, not a path literal: a move of the module must not silently let the
    # timings take the fault meant for a request (that made the tests flaky once).
    spec = importlib.util.find_spec("memosight_lsp.pipeline.calibration")
    if spec is None or spec.origin is None:
        raise RuntimeError("fault_server: memosight_lsp.pipeline.calibration not found")
    calibration_file = spec.origin

    def timing() -> bool:
        """Whether this call is the model's timings (pipeline/calibration.py), which run
        whenever the worker is idle after an answer: faults are meant for requests."""
        frame = sys._getframe(2)
        while frame is not None:
            if frame.f_code.co_filename == calibration_file:
                return True
            frame = frame.f_back
        return False

    def attention(*args, **kwargs):
        order = read()
        if order and not timing():
            with lock:
                if order != state["armed"]:  # a new order: count from now
                    kind, _, count = order.partition("-after ")
                    state.update(armed=order, kind=kind, left=int(count or 0), fired=False)
                fire = not state["fired"] and state["left"] <= 0
                state["left"] -= 1
                if fire:
                    state["fired"] = True
            if fire:
                kind = str(state["kind"])
                sys.stderr.write(f"injected fault fired: {kind}\n")
                sys.stderr.flush()
                if kind == "hang":
                    while read() == order:
                        time.sleep(0.05)
                    return real(*args, **kwargs)
                error = errors[kind]
                raise error(f"injected {kind} fault in a forward pass")
        return real(*args, **kwargs)

    F.scaled_dot_product_attention = attention
    torch.nn.functional.scaled_dot_product_attention = attention


def main() -> int:
    limit = os.environ.get("MEMOSIGHT_FSIZE_LIMIT")
    if limit:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(limit), int(limit)))
    control = os.environ.get("MEMOSIGHT_FAULT_FILE")
    if control:
        install_forward_fault(Path(control))
    from memosight_lsp.cli import lsp_main

    # The faults are patched into this process: it must serve, not relay to a model host.
    os.environ["MEMOSIGHT_KEEP_ALIVE"] = "0"

    return lsp_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
