"""The model the server completes with: loaded lazily on the worker thread, reloaded when the
model settings change, and a failed load reported once (no retry loop until the settings change).

With `model.backend` naming a serving engine there is nothing to load: the host builds a
RemoteCompletionEngine (completion/remote.py) that asks the engine what it serves, and follows
the engine's health (ready / error with its message) as the state; requests keep reaching that
engine, which retries with backoff, so completions resume when the engine is back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import astuple
from typing import Literal

from memosight_lsp.backends import BackendConfigError, open_backend
from memosight_lsp.completion.remote import RemoteCompletionEngine
from memosight_lsp.completion.scheduler import Job, Scheduler
from memosight_lsp.completion.service import CompletionEngine
from memosight_lsp.config import ModelSettings

log = logging.getLogger(__name__)

ModelState = Literal["idle", "loading", "ready", "error"]
CALIBRATION_JOB = "__calibration__"  # the scheduler's buffer id of the timing job
# (state, message, model name) -> None; called from the worker thread.
StateListener = Callable[[ModelState, str, "str | None"], None]


class ModelHost:
    def __init__(self, scheduler: Scheduler, on_state: StateListener) -> None:
        self._scheduler = scheduler
        self._on_state = on_state
        self._lock = threading.Lock()
        self._spec: tuple | None = None  # the settings of the current or last attempted load
        self._job: Job | None = None
        self.state: ModelState = "idle"
        self.message = "no model loaded yet"
        self.engine: CompletionEngine | RemoteCompletionEngine | None = None
        self.model_name: str | None = None

    def ensure(self, settings: ModelSettings) -> None:
        """Start loading when these settings were not loaded or attempted yet."""
        spec = astuple(settings)
        with self._lock:
            if spec == self._spec:
                return
            self._spec = spec
            self.engine = None
            self.state = "loading"
            self.message = (
                f"loading {settings.path or 'the embedded default model'}"
                if settings.backend == "local"
                else f"connecting to {settings.backend} at {settings.url or 'its default URL'}"
            )
            self._job = self._scheduler.submit(
                "__model__", lambda cancelled: self._load(spec, settings), kind="control"
            )

    def wait(self, timeout: float | None = None) -> None:
        job = self._job
        if job is not None:
            job.future.result(timeout)

    def _load(self, spec: tuple, settings: ModelSettings) -> None:
        from memosight_lsp.engine.loading import ModelLoadError, load_model

        if spec != self._spec:
            return  # superseded by newer settings before it started
        self._on_state("loading", self.message, None)
        if settings.backend != "local":
            self._connect(spec, settings)
            return
        try:
            loaded = load_model(
                settings.path,
                device=settings.device,
                dtype=settings.dtype,
                quantization=settings.quantization,
                fim_format=settings.fim_format,
                progress=self._progress,
                allow_pickle=settings.allow_pickle,
            )
        except ModelLoadError as err:
            self._fail(spec, str(err))
            return
        except Exception as err:  # anything else from a broken model folder: same treatment
            log.exception("model load failed")
            self._fail(spec, f"cannot load the model: {type(err).__name__}: {err}".splitlines()[0])
            return
        engine = CompletionEngine(loaded)
        try:
            # The machine's timings of this model if kept, else defaults: timed on this worker
            # when it is idle after the first answer, never before it (completion/calibration.py).
            if not engine.calibration.apply_cached():
                engine.calibration.on_due = lambda: self._calibrate_when_idle(spec, engine)
        except Exception:  # a model that loads but cannot run is reported by its completions
            log.exception("applying the model's timings failed")
        with self._lock:
            if spec != self._spec:
                return
            self.engine = engine
            self.model_name = loaded.name
            self.state = "ready"
            self.message = (
                f"{loaded.name} ready ({loaded.num_parameters / 1e6:.1f}M parameters, "
                f"{loaded.device}, loaded in {loaded.load_seconds:.1f}s)"
            )
        log.info("%s", self.message)
        self._on_state("ready", self.message, loaded.name)

    def _calibrate_when_idle(self, spec: tuple, engine: CompletionEngine) -> None:
        """After an answer: time what is not kept yet at the lowest priority (any request
        cancels it; the next answer schedules it again)."""

        def work(cancelled: Callable[[], bool]) -> None:
            if spec == self._spec and self.engine is engine:
                engine.calibration.measure(cancelled)

        self._scheduler.submit(CALIBRATION_JOB, work, kind="prewarm")

    def _connect(self, spec: tuple, settings: ModelSettings) -> None:
        """A serving engine instead of a model: probed now (bounded by model.timeoutMs), its
        health the state from then on."""
        try:
            backend = open_backend(settings)
        except BackendConfigError as err:
            self._fail(spec, str(err))
            return
        engine = RemoteCompletionEngine(
            backend,
            timeout_s=settings.timeout_ms / 1000,
            on_health=lambda up, message: self._engine_health(spec, engine, up, message),
        )
        with self._lock:
            if spec != self._spec:
                return
            self.engine = engine
        engine.warm_up()

    def _engine_health(
        self, spec: tuple, engine: RemoteCompletionEngine, up: bool, message: str
    ) -> None:
        with self._lock:
            if spec != self._spec or self.engine is not engine:
                return
            state: ModelState = "ready" if up else "error"
            self.state, self.message = state, message
            self.model_name = engine.name if up else None
            name = self.model_name
        self._on_state(state, message, name)

    def _progress(self, message: str) -> None:
        """A long loading step (converting a GGUF file, measuring precisions) as the status."""
        with self._lock:
            self.message = message
        log.info("model: %s", message)
        self._on_state("loading", message, None)

    def _fail(self, spec: tuple, message: str) -> None:
        with self._lock:
            if spec != self._spec:
                return
            self.state = "error"
            self.message = message
            self.engine = None
            self.model_name = None
        log.error("model: %s", message)
        self._on_state("error", message, None)
