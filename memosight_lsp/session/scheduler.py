"""One model worker thread, off the event loop: the newest request per buffer wins.

Jobs are plain callables `work(cancelled) -> result`; `cancelled()` turns true as soon as a job is
superseded (a newer request for the same buffer), cancelled by the client, or the scheduler stops,
and the decoder polls it between forward passes so abandoned work ends early. A job cancelled
before it started resolves to None without running.

Order: control jobs (model loading) first, then requests, then speculative precomputes, then
pre-warms (prefilling a buffer's prompt ahead of its first request), each first-in first-out. A
request cancels every precompute and pre-warm (they are guesses about what the user does next,
and must not delay what the user does now); a precompute or pre-warm cancels the older one of its
kind for the same buffer. A request whose key equals a live job's key (the same buffer state: an
inline and a fallback request at one cursor, or the precompute the user just caught up with)
joins that job instead of starting a new one. So does a request whose key equals that of the
buffer's last finished job when the job was submitted `reusable` and its result passes that
test: the caller looks for a finished job's result (the type-through cache) before it plans
and submits a request, and a job that ends in between would otherwise be run once more.

A request that has answered early (its first-response deadline) and decodes on for the
type-through cache calls `demote_current()`: it is a precompute from then on, so the next request
cancels it like one.

When the worker runs out of due jobs it calls `on_idle` (the allocator gives freed memory back:
inference/memory.py; the next edit's pre-warm is queued), outside the lock, so a request
arriving then waits at most for that. A job may give the worker up to any other that is due
(`waiting`, polled between its steps): the next-edit pre-warm does.

Nothing wedges the worker. A job submitted with `give_up_s` that is still running that long after
it started is abandoned by a watchdog thread: it is cancelled (work that polls `cancelled()` ends
by itself), its future fails with JobAbandoned at once, and a new worker thread serves the jobs
that follow. The old thread is left to finish on its own (Python cannot stop a thread) and exits
when its job returns. At most MAX_STUCK_WORKERS such threads may be alive; past that the
scheduler is wedged: every job fails with JobAbandoned at once instead of queueing behind them.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

log = logging.getLogger(__name__)

JobKind = Literal["control", "request", "precompute", "prewarm"]
PRIORITY: dict[str, int] = {"control": 0, "request": 1, "precompute": 2, "prewarm": 3}
# Abandoned workers that may still be alive before the scheduler stops starting new ones: each
# holds its memory (and maybe the CPU) until its job returns.
MAX_STUCK_WORKERS = 2
SPECULATIVE: tuple[JobKind, ...] = ("precompute", "prewarm")  # what a request cancels
Work = Callable[[Callable[[], bool]], Any]


class JobAbandoned(RuntimeError):
    """The job ran past its bound (give_up_s) and was abandoned, or the worker is wedged."""


@dataclass(eq=False, kw_only=True)
class Job:
    buffer_id: str
    kind: JobKind
    work: Work
    key: Hashable | None = None
    not_before: float = 0.0  # time.monotonic() before which the job does not start (debounce)
    future: Future = field(default_factory=Future)
    waiters: int = 1
    started: bool = False
    give_up_s: float | None = None  # abandoned this long after it starts (None: never)
    timing: bool = False  # it times the model: the process's other work waits for it (urgent)
    give_up_at: float = math.inf  # time.monotonic() once started
    # Whether a request with this key may take the result once the job has finished (None: no).
    reusable: Callable[[Any], bool] | None = None
    _cancel: threading.Event = field(default_factory=threading.Event)

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    @property
    def live(self) -> bool:
        return not self.cancelled and not self.future.done()

    def cancel(self) -> None:
        self._cancel.set()

    def release(self) -> None:
        """One waiter gave up (e.g. $/cancelRequest); the job stops when nobody waits on it."""
        self.waiters -= 1
        if self.waiters <= 0:
            self.cancel()


class Scheduler:
    def __init__(
        self, name: str = "memosight-model", *, on_idle: Callable[[], Any] = lambda: None
    ) -> None:
        self.on_idle = on_idle  # settable: a kept model's next session takes the worker over
        self._jobs: list[Job] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._name = name
        self._thread = self._new_worker()
        self._watchdog = threading.Thread(target=self._watch, name=f"{name}-watchdog", daemon=True)
        self._stuck: list[threading.Thread] = []  # abandoned workers, maybe still running
        self._started = False
        self.current: Job | None = None
        self._finished: dict[str, Job] = {}  # buffer -> its last reusable job that finished
        self.abandoned = 0  # jobs abandoned so far

    def _new_worker(self) -> threading.Thread:
        return threading.Thread(target=self._run, name=self._name, daemon=True)

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._thread.start()
            self._watchdog.start()

    @property
    def wedged(self) -> bool:
        """Too many workers are stuck: jobs fail at once (see the module doc)."""
        with self._cond:
            return self._wedged_locked()

    def _wedged_locked(self) -> bool:
        self._stuck = [t for t in self._stuck if t.is_alive()]
        return len(self._stuck) >= MAX_STUCK_WORKERS

    def submit(
        self,
        buffer_id: str,
        work: Work,
        *,
        kind: JobKind = "request",
        key: Hashable | None = None,
        delay_s: float = 0.0,
        give_up_s: float | None = None,
        timing: bool = False,
        reusable: Callable[[Any], bool] | None = None,
    ) -> Job:
        """Queue `work` (see the module doc); `give_up_s`: abandon it that long after it starts;
        `timing`: it times the model, so it counts as urgent whatever its kind; `reusable`:
        whether a request with the same key may take its result after it finished."""
        with self._cond:
            joined = self._join(buffer_id, kind, key)
            if joined is not None:
                return joined
            if kind == "request":
                # The user did something else: every precompute and pre-warm is now a guess
                # about the past, and it must not delay this request.
                self._cancel_locked(buffer_id, ("request",))
                self._cancel_speculative_locked()
            elif kind in SPECULATIVE:
                self._cancel_locked(buffer_id, (kind,))
            job = Job(
                buffer_id=buffer_id,
                kind=kind,
                work=work,
                key=key,
                not_before=time.monotonic() + max(0.0, delay_s),
                give_up_s=give_up_s,
                timing=timing,
                reusable=reusable,
            )
            if self._wedged_locked():
                job.future.set_exception(
                    JobAbandoned(f"the model worker is stuck ({len(self._stuck)} jobs never ended)")
                )
                return job
            self._jobs.append(job)
            self._revive_locked()
            self._cond.notify_all()
        self.start()
        return job

    def _revive_locked(self) -> None:
        """A new worker when the last one was abandoned while the scheduler was wedged."""
        if self._started and not self._stopping and self._thread in self._stuck:
            self._thread = self._new_worker()
            self._thread.start()

    def _join(self, buffer_id: str, kind: JobKind, key: Hashable | None) -> Job | None:
        if key is None or kind == "control":
            return None
        for job in [*self._jobs, self.current]:
            if job is None or job.buffer_id != buffer_id or job.key != key or not job.live:
                continue
            if kind == "request":
                job.kind = "request" if job.kind == "precompute" else job.kind
                job.waiters += 1
            return job
        finished = self._finished.get(buffer_id)
        if (
            kind == "request"
            and finished is not None
            and finished.key == key
            and _reusable(finished)
        ):
            return finished
        return None

    def cancel_buffer(
        self, buffer_id: str, kinds: tuple[str, ...] = ("request", "precompute", "prewarm")
    ):
        with self._cond:
            self._cancel_locked(buffer_id, kinds)

    def _cancel_locked(self, buffer_id: str, kinds: tuple[str, ...]) -> None:
        if "request" in kinds:
            self._finished.pop(buffer_id, None)
        for job in [*self._jobs, self.current]:
            if job is not None and job.buffer_id == buffer_id and job.kind in kinds:
                job.cancel()
        self._cond.notify_all()

    def _cancel_speculative_locked(self) -> None:
        for job in [*self._jobs, self.current]:
            if job is not None and job.kind in SPECULATIVE:
                job.cancel()

    def demote_current(self) -> None:
        """The running request has answered (its first-response deadline) and goes on decoding
        for the type-through cache: it becomes a precompute, which the next request cancels.
        Called from the job itself, on the worker thread."""
        with self._cond:
            if self.current is not None and self.current.kind == "request":
                self.current.kind = "precompute"

    def cancel_all(self) -> None:
        """Cancel every request, precompute and pre-warm (a session that ends: its editor is
        gone); control jobs (a model load under way) go on. No result of this session's is
        taken by the next one's requests."""
        with self._cond:
            self._finished.clear()
            for job in [*self._jobs, self.current]:
                if job is not None and job.kind != "control":
                    job.cancel()
            self._cond.notify_all()

    def waiting(self) -> bool:
        """Whether a job is due beside the running one: work that gives the worker up to any
        other (a next-edit pre-warm) polls it between two steps."""
        with self._cond:
            now = time.monotonic()
            return any(job.live and job.not_before <= now for job in self._jobs)

    def wait_calm(self, timeout: float) -> bool:
        """Block until nothing is urgent (or the scheduler stops), at most `timeout` seconds,
        without waking in between: whether it is calm now (0: just look). Urgent: a load, a
        request, a request's decode (a precompute) or a timing of the model, running or queued:
        what background work of the server's own (a workspace scan) gives way to (beside a
        timing it would skew the timings the machine keeps). Pre-warms are guesses: they do not
        count."""
        with self._cond:
            return self._cond.wait_for(
                lambda: self._stopping or not self._urgent_locked(), max(0.0, timeout)
            )

    def _urgent_locked(self) -> bool:
        return any(
            job is not None and job.live and (job.kind != "prewarm" or job.timing)
            for job in [*self._jobs, self.current]
        )

    def jobs(self, buffer_id: str | None = None) -> list[Job]:
        with self._cond:
            live = [j for j in [*self._jobs, self.current] if j is not None and j.live]
        return [j for j in live if buffer_id is None or j.buffer_id == buffer_id]

    def stop(self, timeout: float | None = 2.0) -> None:
        with self._cond:
            self._stopping = True
            for job in [*self._jobs, self.current]:
                if job is not None:
                    job.cancel()
            self._cond.notify_all()
        if self._started:
            self._thread.join(timeout)

    # -- worker -----------------------------------------------------------------------------

    def _next_job(self) -> Job | None:
        """The next due job (None when stopping); waits while nothing is due."""
        with self._cond:
            while True:
                if self._stopping:
                    return None
                for job in [j for j in self._jobs if j.cancelled]:
                    self._jobs.remove(job)
                    _resolve(job, None)
                now = time.monotonic()
                due = [j for j in self._jobs if j.not_before <= now]
                if due:
                    job = min(due, key=lambda j: PRIORITY[j.kind])
                    self._jobs.remove(job)
                    job.started = True
                    if job.give_up_s is not None:
                        job.give_up_at = now + job.give_up_s
                    self.current = job
                    self._cond.notify_all()  # the watchdog learns of the new bound
                    return job
                waits = [j.not_before - now for j in self._jobs]
                self._cond.wait(timeout=min(waits) if waits else None)

    def _cancel_check(self, job: Job) -> Callable[[], bool]:
        return lambda: job.cancelled or self._stopping

    def _run(self) -> None:
        while (job := self._next_job()) is not None:
            try:
                if job.cancelled:
                    _resolve(job, None)
                    continue
                result = job.work(self._cancel_check(job))
                _resolve(job, result)
            except BaseException as err:  # the worker must survive any job
                log.exception("model job failed")
                if not job.future.done():
                    job.future.set_exception(err)
            finally:
                with self._cond:
                    replaced = threading.current_thread() is not self._thread
                    # Kept for a late request with its key: the last job that ran whole.
                    ran_whole = not (replaced or job.cancelled)
                    if ran_whole and job.reusable is not None and job.key is not None:
                        self._finished[job.buffer_id] = job
                    if not replaced:
                        self.current = None
                        self._cond.notify_all()  # work waiting for a calm worker (wait_calm)
                    now = time.monotonic()
                    idle = not self._stopping and not any(j.not_before <= now for j in self._jobs)
            if replaced:
                log.warning("an abandoned model job ended after all; its worker exits")
                return
            if idle:
                self._idle()
        with self._cond:
            for job in self._jobs:
                _resolve(job, None)
            self._jobs.clear()

    def _watch(self) -> None:
        """The watchdog: abandons the running job once it passes its bound (module doc)."""
        with self._cond:
            while not self._stopping:
                job = self.current
                now = time.monotonic()
                if job is not None and now >= job.give_up_at:
                    self._abandon_locked(job, now)
                    continue
                wait = None if job is None or job.give_up_at == math.inf else job.give_up_at - now
                self._cond.wait(timeout=wait)

    def _abandon_locked(self, job: Job, now: float) -> None:
        ran = now - (job.give_up_at - (job.give_up_s or 0.0))
        log.error(
            "a %s job ran %.1f s, past its bound of %.1f s: abandoned, a new worker serves on",
            job.kind,
            ran,
            job.give_up_s,
        )
        self.abandoned += 1
        job.cancel()
        if not job.future.done():
            job.future.set_exception(
                JobAbandoned(f"the model worker spent {ran:.1f} s on one job; it was abandoned")
            )
        self._stuck.append(self._thread)
        self.current = None
        if self._wedged_locked():
            log.error("%d model workers are stuck: jobs fail at once from now on", len(self._stuck))
            for queued in self._jobs:
                if not queued.future.done():
                    queued.future.set_exception(JobAbandoned("the model worker is stuck"))
            self._jobs.clear()
            return
        self._thread = self._new_worker()
        self._thread.start()

    def _idle(self) -> None:
        try:
            self.on_idle()
        except Exception:  # housekeeping: the worker goes on whatever happens
            log.exception("idle work failed")


def _reusable(job: Job) -> bool:
    """A finished job whose result another request may take: it ran to its end, uncancelled,
    and its result passes the job's own test."""
    future = job.future
    if job.reusable is None or job.cancelled or not future.done() or future.cancelled():
        return False
    return future.exception() is None and job.reusable(future.result())


def _resolve(job: Job, result: Any) -> None:
    if not job.future.done():
        job.future.set_result(result)
