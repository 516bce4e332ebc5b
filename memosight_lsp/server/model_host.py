"""The model the server completes with: loaded lazily on the worker thread, reloaded when the
model settings change, and a failed load reported once (no retry loop until the settings change).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import astuple
from typing import Literal

from memosight_lsp.completion.scheduler import Job, Scheduler
from memosight_lsp.completion.service import CompletionEngine
from memosight_lsp.config import ModelSettings

log = logging.getLogger(__name__)

ModelState = Literal["idle", "loading", "ready", "error"]
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
        self.engine: CompletionEngine | None = None
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
            self.message = f"loading {settings.path or 'the embedded default model'}"
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
        try:
            loaded = load_model(
                settings.path,
                device=settings.device,
                dtype=settings.dtype,
                fim_format=settings.fim_format,
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
            engine.warm_up()  # passes timed here, not in the first completion (~1.3 s)
        except Exception:  # a model that loads but cannot run is reported by its completions
            log.exception("warming up the model failed")
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
