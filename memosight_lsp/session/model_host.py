"""The model the server completes with: loaded lazily on the worker thread, reloaded when the
model settings change, and a failed load reported once (no retry loop until the settings change).

With `model.backend` naming a serving engine there is nothing to load: the host builds a
EngineBackend (pipeline/engine_backend.py) that asks the engine what it serves, and follows
the engine's health (ready / error with its message) as the state; requests keep reaching that
engine, which retries with backoff, so completions resume when the engine is back.

`model.path: "auto"` is resolved on the worker when the load starts (discovery/resolve.py): the
code model found on this machine, a loopback engine serving one, or the embedded model with a
notice (`notice`, `fix`: one line each, in the status) that says so and what fixes it; a pick
that does not load falls back to the embedded model the same way.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from dataclasses import astuple, dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from memosight_lsp.config import ModelSettings
from memosight_lsp.discovery.resolve import AUTO, Resolved, load_resolved, resolve
from memosight_lsp.engines import BackendConfigError, open_engine
from memosight_lsp.inference.errors import ModelLoadError
from memosight_lsp.pipeline.engine_backend import EngineBackend
from memosight_lsp.session.scheduler import Job, Scheduler

# The model's modules (torch, transformers: seconds to import) are imported on the worker that
# loads it, so the server answers `initialize` before it has imported them.
if TYPE_CHECKING:
    from memosight_lsp.pipeline.local_backend import LocalBackend

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
        self.backend: LocalBackend | EngineBackend | None = None
        self.model_name: str | None = None
        # Whenever the embedded model serves: one line saying so, and the one action that fixes
        # it (discovery/resolve.py); None otherwise.
        self.notice: str | None = None
        self.fix: str | None = None
        self.precision: str | None = None  # what the loaded model runs in (None: an engine)

    def attach(self, on_state: StateListener) -> None:
        """A new session takes this host over (a kept model, host_process/): its state changes
        go to `on_state` from now on, and a load that failed is tried again (starting the editor
        again is what a user does after fixing the model)."""
        with self._lock:
            self._on_state = on_state
            if self.state == "error":
                self._spec = None
                self.state = "idle"
                self.message = "no model loaded yet"

    def tag(self) -> str:
        """A short name of the settings loaded or being loaded (two hosts compare them)."""
        with self._lock:
            spec = repr(self._spec)
        return hashlib.sha256(spec.encode("utf-8", "replace")).hexdigest()[:12]

    def ensure(self, settings: ModelSettings) -> None:
        """Start loading when these settings were not loaded or attempted yet."""
        spec = astuple(settings)
        with self._lock:
            if spec == self._spec:
                return
            self._spec = spec
            self.backend = None
            self.state = "loading"
            self.notice = self.fix = self.precision = None
            if settings.backend != "local":
                self.message = (
                    f"connecting to {settings.backend} at {settings.url or 'its default URL'}"
                )
            elif settings.path == AUTO:
                self.message = "looking for a code model on this machine (model.path: auto)"
            else:
                self.message = f"loading {settings.path or 'the embedded default model'}"
            self._job = self._scheduler.submit(
                "__model__", lambda cancelled: self._load(spec, settings), kind="control"
            )

    def wait(self, timeout: float | None = None) -> None:
        job = self._job
        if job is not None:
            job.future.result(timeout)

    def _load(self, spec: tuple, settings: ModelSettings) -> None:
        if spec != self._spec:
            return  # superseded by newer settings before it started
        self._on_state("loading", self.message, None)
        if settings.backend != "local":
            self._connect(spec, settings)
            return
        resolved = self._resolve(spec, settings)
        if resolved is None:
            return
        if resolved.backend != "local":  # auto: a loopback engine serves the code model
            remote = replace(
                settings, backend=resolved.backend, url=resolved.url, name=resolved.name
            )
            self._connect(spec, remote)
            return
        from memosight_lsp.inference.machine import OtherLoad
        from memosight_lsp.pipeline.local_backend import LocalBackend

        busy_since = OtherLoad()  # how busy the machine is while the model loads
        try:
            loaded = self._load_resolved(spec, resolved, settings)
        except ModelLoadError as err:
            self._fail(spec, str(err))
            return
        except Exception as err:  # anything else from a broken model folder: same treatment
            log.exception("model load failed")
            self._fail(spec, f"cannot load the model: {type(err).__name__}: {err}".splitlines()[0])
            return
        backend = LocalBackend(loaded, share_cores=True, busy_since=busy_since)
        try:
            # The machine's timings of this model if kept, else defaults: timed on this worker
            # when it is idle after the first answer, never before it (pipeline/calibration.py).
            if not backend.calibration.apply_cached():
                backend.calibration.on_due = lambda: self._calibrate_when_idle(spec, backend)
        except Exception:  # a model that loads but cannot run is reported by its completions
            log.exception("applying the model's timings failed")
        with self._lock:
            if spec != self._spec:
                return
            self.backend = backend
            self.model_name = loaded.name
            self.precision = loaded.precision.describe()
            self.state = "ready"
            self.message = (
                f"{loaded.name} ready ({loaded.num_parameters / 1e6:.1f}M parameters, "
                f"{loaded.device}, loaded in {loaded.load_seconds:.1f}s)"
            )
        log.info("%s", self.message)
        self._on_state("ready", self.message, loaded.name)

    def _calibrate_when_idle(self, spec: tuple, backend: LocalBackend) -> None:
        """After an answer: time what is not kept yet at the lowest priority (any request
        cancels it; the next answer schedules it again). Not while other processes keep the
        machine busy: such timings are not kept, and would take the cores from requests."""

        def work(cancelled: Callable[[], bool]) -> None:
            if spec != self._spec or self.backend is not backend:
                return
            if backend.machine_busy():
                log.debug("calibration: put off while other processes keep the machine busy")
                return
            try:
                backend.calibration.measure(cancelled)
            except Exception:  # the model answers on defaults; no retry after every answer
                log.exception("timing the model failed: it runs on default timings")
                backend.calibration.on_due = None

        self._scheduler.submit(CALIBRATION_JOB, work, kind="prewarm", timing=True)

    def _resolve(self, spec: tuple, settings: ModelSettings) -> Resolved | None:
        """What model.path names (auto: discovery's pick, under a second); None when newer
        settings superseded these meanwhile."""
        resolved = resolve(settings.path, device=settings.device)
        with self._lock:
            if spec != self._spec:
                return None
            self.notice, self.fix = resolved.notice, resolved.fix
        log.info("model: %s", resolved.describe())
        if resolved.source:
            self._progress(f"loading {resolved.name} from {resolved.source} (found by auto)")
        return resolved

    def _load_resolved(self, spec: tuple, resolved: Resolved, settings: ModelSettings) -> Any:
        """The resolved model loaded (auto's pick that does not load: the embedded model, with
        the notice saying so)."""
        from memosight_lsp.inference.loading import load_model

        def load(path: str | None) -> Any:
            return load_model(
                path,
                device=settings.device,
                dtype=settings.dtype,
                quantization=settings.quantization,
                fim_format=settings.fim_format,
                progress=self._progress,
                allow_pickle=settings.allow_pickle,
            )

        loaded, final = load_resolved(resolved, load, progress=self._progress)
        with self._lock:
            if spec == self._spec:
                self.notice, self.fix = final.notice, final.fix
        return loaded

    def _connect(self, spec: tuple, settings: ModelSettings) -> None:
        """A serving engine instead of a model: probed now (bounded by model.timeoutMs), its
        health the state from then on."""
        try:
            client = open_engine(settings)
        except BackendConfigError as err:
            self._fail(spec, str(err))
            return
        backend = EngineBackend(
            client,
            timeout_s=settings.timeout_ms / 1000,
            on_health=lambda up, message: self._engine_health(spec, backend, up, message),
        )
        with self._lock:
            if spec != self._spec:
                return
            self.backend = backend
        backend.warm_up()

    def _engine_health(self, spec: tuple, backend: EngineBackend, up: bool, message: str) -> None:
        with self._lock:
            if spec != self._spec or self.backend is not backend:
                return
            state: ModelState = "ready" if up else "error"
            self.state, self.message = state, message
            self.model_name = backend.name if up else None
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
            self.backend = None
            self.model_name = None
        log.error("model: %s", message)
        self._on_state("error", message, None)


@dataclass
class KeptModel:
    """A loaded model and its worker, kept by a host process from one editor's session to the
    next (host_process/): the next session answers without importing or loading anything."""

    scheduler: Scheduler
    host: ModelHost
