"""How the lean trunk multiplies a few rows by a weight on a CPU: the fastest of three kernels.

A decoding pass multiplies 1-64 rows by each weight W [out, in]. MKL runs the same product at
very different speeds depending on how it is asked, and which kernel wins depends on the row
count and the thread count (figures: docs/speculative.md):

- LINEAR, x @ W^T (F.linear; a matrix-vector kernel for one row).
- TRANSPOSED, W @ x^T (MKL's small-N kernels; one row padded to two). Was the best with 2
  threads for 1-32 rows.
- COPY, x @ W' with W' a transposed copy of W. Was the best with 1 thread. Costs the copy's
  memory.

So each trunk times the kernels on its own passes, for row counts 1, 2, 4 ... 64, once per
machine, model and thread count (a server keeps the choice in the calibration cache, and times
it on its idle worker after its first answer: inference/calibration_cache.py), and frees the copies
if no row count chose them. Longer inputs (prefills) always run LINEAR.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .timing import affordable_turns, check

LINEAR, TRANSPOSED, COPY = 0, 1, 2
FEW_ROWS = 64
TIMED_ROWS = (1, 2, 4, 8, 16, 32, 64)  # each stands for the row counts above the previous one
REPEATS = 5  # the kernels take turns; the fastest of the repeats counts (noise only slows down)
COPY_MAX_BYTES = 256 * 2**20  # transposed copies are made for a model's products up to this


class Product:
    """One linear map, weight [out, in] (shared with the model) and bias, computed by `kernel`."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        self.weight = weight
        self.bias = bias
        self.copy: torch.Tensor | None = None  # [in, out], for COPY
        self._copied_version = -1

    def make_copy(self) -> None:
        """(Re)make the transposed copy. Only for weights that count their in-place edits (not
        inference tensors): an edited weight is copied again before its next COPY product."""
        if self.weight.is_inference():
            return
        self.copy = self.weight.detach().t().contiguous()
        self._copied_version = self.weight._version

    def __call__(self, x: torch.Tensor, kernel: int = LINEAR) -> torch.Tensor:
        if kernel == TRANSPOSED:
            rows = x.numel() // x.shape[-1]
            flat = x.reshape(rows, x.shape[-1])
            if rows == 1:
                flat = torch.cat((flat, flat))
            # Contiguous again: attention's fast kernel falls back to plain math on transposed
            # inputs.
            out = torch.mm(self.weight, flat.t()).t()[:rows].contiguous()
            out = out.view(*x.shape[:-1], self.weight.shape[0])
        elif kernel == COPY and self.copy is not None:
            if self.weight._version != self._copied_version:  # edited in place since
                self.make_copy()
            out = x @ self.copy
        else:
            return F.linear(x, self.weight, self.bias)
        return out + self.bias if self.bias is not None else out


@dataclass(frozen=True)
class RowKernels:
    """The kernel (LINEAR / TRANSPOSED / COPY) chosen for each row count 0..FEW_ROWS, under
    `threads`."""

    threads: int
    chosen: tuple[int, ...]

    def kernel(self, rows: int) -> int:
        return self.chosen[rows] if rows <= FEW_ROWS else LINEAR

    @classmethod
    def fixed(cls, kernel: int) -> RowKernels:
        """One kernel for every row count (no timing), under the current thread count."""
        return cls(torch.get_num_threads(), (kernel,) * (FEW_ROWS + 1))

    @classmethod
    def timed(
        cls,
        run: Callable[[int, int], None],
        kernels: Sequence[int],
        repeats: int = REPEATS,
        cancelled: Callable[[], bool] | None = None,
    ) -> RowKernels:
        """Time run(rows, kernel) (one pass over `rows` rows) for each of `kernels` and
        TIMED_ROWS. A model too slow for one turn within timing's budget gets LINEAR everywhere
        (what transformers does). Raises timing.TimingCancelled when `cancelled()` turns true
        between passes."""
        started = time.perf_counter()
        run(1, LINEAR)
        first = time.perf_counter() - started
        turns = affordable_turns(first, len(TIMED_ROWS) * len(kernels), repeats)
        if turns == 0:
            return cls.fixed(LINEAR)
        best: dict[tuple[int, int], float] = {}
        for rows in TIMED_ROWS:
            for kernel in kernels:  # warm-up
                check(cancelled)
                run(rows, kernel)
            for _ in range(turns):
                for kernel in kernels:
                    check(cancelled)
                    started = time.perf_counter()
                    run(rows, kernel)
                    elapsed = time.perf_counter() - started
                    best[rows, kernel] = min(best.get((rows, kernel), elapsed), elapsed)
        chosen = [LINEAR] * (FEW_ROWS + 1)
        low = 1
        for rows in TIMED_ROWS:
            fastest = min(kernels, key=lambda kernel: best[rows, kernel])
            chosen[low : rows + 1] = [fastest] * (rows + 1 - low)
            low = rows + 1
        return cls(torch.get_num_threads(), tuple(chosen))
