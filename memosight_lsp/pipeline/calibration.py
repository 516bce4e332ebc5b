"""A server's timings of its model on this machine, never before its first answer.

What the decoding is tuned with — the speculative decoder's pass costs, a float32 trunk's
few-row kernels, the prefill rate that sizes cold prompts — is timed on the machine (a pause
of the worker's: docs/latency.md) and kept per machine, model and precision
(inference/calibration_cache.py). At load, `apply_cached` puts in whatever is kept, in
milliseconds. What is not kept runs on defaults that give the same tokens (pass costs only
shape the draft trees: CostModel(); few-row products run F.linear; prompts take the whole
budget until a prefill measures the rate), and `measure` times it on the worker after the first
answer, when it is idle: the host schedules it at the lowest priority when `answered` says it
is due, any request cancels it (between two timed passes), and it is scheduled again after the
next answer. Each step is kept as it finishes; all of them are cached once done, unless other
processes kept the machine busy meanwhile (then they serve this server only).

Switching a float32 trunk's few-row kernels changes how its cached keys were rounded, so the
engine drops its kept KV caches with the switch (`on_switch`): speculative decoding is exact
per kernel set.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import torch

from memosight_lsp.inference import calibration_cache, machine
from memosight_lsp.inference.calibration_cache import Calibration
from memosight_lsp.inference.decoder import Decoder, time_prefill
from memosight_lsp.inference.drafters import CostModel
from memosight_lsp.inference.fused_trunk import FusedTrunk, prepare_trunk
from memosight_lsp.inference.loading import LoadedModel
from memosight_lsp.inference.row_kernels import LINEAR, RowKernels
from memosight_lsp.inference.speculative import SpeculativeDecoder
from memosight_lsp.inference.timing import TimingCancelled

from .latency import PrefillRate

log = logging.getLogger(__name__)

RATE_PROBE_TOKENS = 256  # the prefill timed for the first rate sample
STEPS = ("prefill", "passCosts", "rowKernels")  # in this order: the rate matters most


class Calibrator:
    """The timings of one engine's model: applied from the cache, or measured when due.
    Runs on the model worker only."""

    def __init__(
        self,
        loaded: LoadedModel,
        decoder: Decoder,
        prefill_rate: PrefillRate,
        *,
        prompt_tokens: int,
        on_switch: Callable[[], None] = lambda: None,
    ) -> None:
        self.loaded = loaded
        self.decoder = decoder
        self.prefill_rate = prefill_rate
        self.prompt_tokens = prompt_tokens  # the pass costs are timed on a cache this long
        self.on_switch = on_switch  # the trunk's kernels changed: drop the kept KV caches
        kernels = "native" if loaded.runs_native else "torch"
        self.key = calibration_cache.key(loaded.model_digest, loaded.precision.describe(), kernels)
        self.threads = torch.get_num_threads()  # the key's
        self.found: Calibration | None = None  # what the cache held at apply_cached
        self.measured: dict[str, Any] = {}  # step -> result, this server's own
        self.on_due: Callable[[], None] | None = None  # the host's: schedule measure()
        self.source = "defaults"
        self.busy_cores = machine.BUSY_CORES  # timings taken beside more load are not kept

    # -- what each step needs -------------------------------------------------------------------

    def _trunk(self) -> FusedTrunk | None:
        trunk = prepare_trunk(self.loaded.model)
        return trunk if isinstance(trunk, FusedTrunk) and trunk.timed_kernels else None

    def _needed(self) -> list[str]:
        steps = ["prefill"]
        if isinstance(self.decoder, SpeculativeDecoder):
            steps.append("passCosts")
        if self._trunk() is not None:
            steps.append("rowKernels")
        return steps

    @property
    def pending(self) -> list[str]:
        """The steps neither cached nor measured yet."""
        have = set(self.measured)
        if self.found is not None:
            have |= {
                step
                for step, value in (
                    ("prefill", self.found.prefill),
                    ("passCosts", self.found.pass_costs),
                    ("rowKernels", self.found.row_kernels),
                )
                if value is not None
            }
        return [step for step in self._needed() if step not in have]

    # -- at load -------------------------------------------------------------------------------

    def apply_cached(self) -> bool:
        """Put in the timings kept for this model here, defaults for the rest; True when
        nothing is left to measure."""
        self.found = calibration_cache.read(self.key)
        found = self.found or Calibration()
        if isinstance(self.decoder, SpeculativeDecoder):  # the defaults until measured
            self.decoder.cost_model = CostModel(found.pass_costs)
        trunk = self._trunk()
        if trunk is not None:
            chosen = found.row_kernels or RowKernels.fixed(LINEAR).chosen
            timed = found.row_kernels is not None
            trunk.use_row_kernels(RowKernels(torch.get_num_threads(), chosen), timed=timed)
        if found.prefill is not None:
            self.prefill_rate.observe(*found.prefill)
        self.source = "cached" if self.found is not None else "defaults"
        missing = self.pending
        if missing:
            log.info("calibration: %s measured after the first answer", ", ".join(missing))
        return not missing

    # -- after an answer -----------------------------------------------------------------------

    def answered(self) -> None:
        """A completion was answered: while something is left to measure, tell the host (once
        per answer) that measure() is due when the worker is idle."""
        if self.on_due is not None and self.pending:
            self.on_due()

    def measure(self, cancelled: Callable[[], bool] | None = None, *, fresh: bool = False) -> bool:
        """Time the steps still pending (`fresh`: all of them), each put in use as it
        finishes; False when `cancelled` stopped it (what finished is kept: call again). Once
        all are done, they are cached unless other processes kept the machine busy."""
        steps = self._needed() if fresh else self.pending
        if fresh:
            self.measured.clear()
            self.found = None
        others = machine.OtherLoad()
        try:
            for step in steps:
                self._measure_step(step, cancelled)
        except TimingCancelled:
            log.info("calibration: gave way to a request; measured again after its answer")
            return False
        busy = others.cores()
        if steps:
            self._keep(busy)
        return True

    def _measure_step(self, step: str, cancelled: Callable[[], bool] | None) -> None:
        model = self.loaded.model
        if step == "prefill":
            if cancelled is not None and cancelled():
                raise TimingCancelled
            tokens, ms = time_prefill(model, RATE_PROBE_TOKENS)
            self.prefill_rate.observe(tokens, ms)
            self.measured[step] = (tokens, ms)
        elif step == "passCosts" and isinstance(self.decoder, SpeculativeDecoder):
            costs = self.decoder.measure_costs(model, self.prompt_tokens, cancelled)
            if costs is not None:
                self.decoder.cost_model = costs
                self.measured[step] = costs.costs
        elif step == "rowKernels" and (trunk := self._trunk()) is not None:
            timed = trunk.time_row_kernels(cancelled)
            if timed is not None:
                switched = trunk.kernels is not None and trunk.kernels.chosen != timed.chosen
                trunk.use_row_kernels(timed)
                self.measured[step] = timed.chosen
                if switched:
                    self.on_switch()

    def _keep(self, other_cores: float | None) -> None:
        found = self.found or Calibration()
        calibration = Calibration(
            pass_costs=self.measured.get("passCosts", found.pass_costs),
            row_kernels=self.measured.get("rowKernels", found.row_kernels),
            prefill=self.measured.get("prefill", found.prefill),
            measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            other_cores=other_cores,
        )
        if other_cores is not None and other_cores > self.busy_cores:
            self.source = f"measured, not kept (other processes kept {other_cores:.1f} cores busy)"
            log.info("calibration: %s", self.source)
            return
        if torch.get_num_threads() != self.threads:  # lowered by inference/core_share.py
            self.source = f"measured on {torch.get_num_threads()} thread(s), not kept"
            log.info("calibration: %s", self.source)
            return
        calibration_cache.write(self.key, calibration)
        self.found = calibration
        self.source = "measured and kept"

    def describe(self) -> dict[str, Any]:
        """For memosight/stats: where the timings came from and what is still pending."""
        return {"source": self.source, "pending": self.pending, "key": self.key}
