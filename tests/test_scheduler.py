"""The model worker: newest request per buffer wins, cancellation stops work early."""

from __future__ import annotations

import threading
import time

import pytest

from memosight_lsp.session.scheduler import MAX_STUCK_WORKERS, JobAbandoned, Scheduler


@pytest.fixture
def scheduler():
    s = Scheduler()
    yield s
    s.stop()
    # An abandoned worker logs as it exits: let it do so while this test's log capture is open
    # (after it, the write fails and logging prints a traceback into the run's output).
    for worker in s._stuck:
        worker.join(5)


def blocking_work(started: threading.Event, log: list, name: str):
    def work(cancelled):
        started.set()
        while not cancelled():
            time.sleep(0.005)
        log.append(f"{name} stopped early")
        return None

    return work


def cut_short_work(started: threading.Event):
    """Work that runs until cancelled, then returns a result anyway (as a decoder returns what
    it verified)."""

    def work(cancelled):
        started.set()
        while not cancelled():
            time.sleep(0.005)
        return "cut short"

    return work


def test_runs_jobs_off_the_calling_thread(scheduler):
    job = scheduler.submit("b", lambda cancelled: threading.current_thread().name)
    assert job.future.result(5) == "memosight-model"


def test_newer_request_for_the_same_buffer_cancels_the_running_one(scheduler):
    started, log = threading.Event(), []
    first = scheduler.submit("b", blocking_work(started, log, "first"))
    assert started.wait(5)
    second = scheduler.submit("b", lambda cancelled: "second")
    assert second.future.result(5) == "second"
    assert first.future.result(5) is None
    assert log == ["first stopped early"]


def test_pending_superseded_job_never_runs(scheduler):
    started, log = threading.Event(), []
    scheduler.submit("other", blocking_work(started, log, "other"))
    assert started.wait(5)
    ran = []
    stale = scheduler.submit("b", lambda c: ran.append("stale"))
    fresh = scheduler.submit("b", lambda c: "fresh")
    scheduler.cancel_buffer("other")
    assert fresh.future.result(5) == "fresh"
    assert stale.future.result(5) is None and ran == []


def test_other_buffers_are_not_cancelled(scheduler):
    gate = threading.Event()
    a = scheduler.submit("a", lambda c: gate.wait(5) and "a")
    b = scheduler.submit("b", lambda c: "b")
    gate.set()
    assert a.future.result(5) == "a" and b.future.result(5) == "b"


def test_same_key_joins_the_live_job(scheduler):
    gate = threading.Event()
    first = scheduler.submit("b", lambda c: gate.wait(5) and "shared", key="k")
    second = scheduler.submit("b", lambda c: "new", key="k")
    assert second is first and first.waiters == 2
    second.release()  # one waiter gone: the job goes on
    assert not first.cancelled
    gate.set()
    assert first.future.result(5) == "shared"


def test_release_by_the_last_waiter_cancels(scheduler):
    started, log = threading.Event(), []
    job = scheduler.submit("b", blocking_work(started, log, "job"))
    assert started.wait(5)
    job.release()
    assert job.future.result(5) is None and log == ["job stopped early"]


def test_request_joins_and_promotes_a_precompute(scheduler):
    gate = threading.Event()
    blocker = scheduler.submit("x", lambda c: gate.wait(5))
    pre = scheduler.submit("b", lambda c: "next", kind="precompute", key="after-accept")
    joined = scheduler.submit("b", lambda c: "fresh", key="after-accept")
    assert joined is pre and pre.kind == "request"
    gate.set()
    assert blocker.future.result(5) and joined.future.result(5) == "next"


def test_a_request_takes_the_result_of_a_reusable_job_that_just_finished(scheduler):
    # The precompute ended between the caller's look at its cache and this request: the
    # request takes its result instead of running the work once more.
    pre = scheduler.submit(
        "b", lambda c: "next", kind="precompute", key="after-accept", reusable=bool
    )
    assert pre.future.result(5) == "next"
    ran = []
    joined = scheduler.submit("b", lambda c: ran.append("ran") or "fresh", key="after-accept")
    assert joined is pre and joined.future.result(5) == "next" and ran == []


@pytest.mark.parametrize(
    "reusable, result, other_key_first",
    [(None, "next", False), (bool, "", False), (bool, "next", True)],
    ids=["not-reusable", "result-refused", "another-request-since"],
)
def test_a_finished_job_is_run_again_when_it_may_not_be_reused(
    scheduler, reusable, result, other_key_first
):
    done = scheduler.submit("b", lambda c: result, kind="precompute", key="k", reusable=reusable)
    assert done.future.result(5) == result
    if other_key_first:
        assert scheduler.submit("b", lambda c: "other", key="other").future.result(5) == "other"
    fresh = scheduler.submit("b", lambda c: "fresh", key="k")
    assert fresh is not done and fresh.future.result(5) == "fresh"


def test_a_cancelled_job_leaves_the_last_finished_one_in_place(scheduler):
    done = scheduler.submit("b", lambda c: "whole", kind="precompute", key="k", reusable=bool)
    assert done.future.result(5) == "whole"
    started = threading.Event()
    guess = scheduler.submit(
        "b", cut_short_work(started), kind="precompute", key="g", reusable=bool
    )
    assert started.wait(5)
    guess.cancel()  # while it runs: it returns, cut short
    assert guess.future.result(5) == "cut short"
    assert scheduler.submit("b", lambda c: "fresh", key="k") is done


def test_a_session_that_ends_leaves_no_result_to_the_next(scheduler):
    done = scheduler.submit("b", lambda c: "old session's", key="k", reusable=bool)
    assert done.future.result(5) == "old session's"
    scheduler.cancel_all()
    assert scheduler.submit("b", lambda c: "fresh", key="k").future.result(5) == "fresh"


def test_a_cancelled_or_failed_job_is_not_reused(scheduler):
    def failing(cancelled):
        raise ValueError("boom")

    failed = scheduler.submit("b", failing, key="k", reusable=bool)
    with pytest.raises(ValueError):
        failed.future.result(5)
    assert scheduler.submit("b", lambda c: "fresh", key="k").future.result(5) == "fresh"

    started = threading.Event()  # its result passes the test: the cancel alone refuses it
    stopped = scheduler.submit("c", cut_short_work(started), key="k", reusable=bool)
    assert started.wait(5)
    stopped.cancel()
    assert stopped.future.result(5) == "cut short"
    assert scheduler.submit("c", lambda c: "fresh", key="k").future.result(5) == "fresh"


def test_requests_run_before_precomputes_and_control_first(scheduler):
    gate = threading.Event()
    order: list[str] = []
    scheduler.submit("x", lambda c: gate.wait(5))
    scheduler.submit("r", lambda c: order.append("request"))
    scheduler.submit("p", lambda c: order.append("precompute"), kind="precompute")
    last = scheduler.submit("m", lambda c: order.append("control"), kind="control")
    gate.set()
    last.future.result(5)
    time.sleep(0.1)
    assert order == ["control", "request", "precompute"]


def test_a_request_cancels_the_buffers_precompute(scheduler):
    started, log = threading.Event(), []
    pre = scheduler.submit("b", blocking_work(started, log, "pre"), kind="precompute")
    assert started.wait(5)
    assert scheduler.submit("b", lambda c: "req").future.result(5) == "req"
    assert pre.future.result(5) is None and log == ["pre stopped early"]


def test_a_request_anywhere_cancels_every_precompute(scheduler):
    started, log = threading.Event(), []
    pre = scheduler.submit("a", blocking_work(started, log, "pre"), kind="precompute")
    assert started.wait(5)
    assert scheduler.submit("b", lambda c: "req").future.result(5) == "req"
    assert pre.future.result(5) is None and log == ["pre stopped early"]


def test_debounce_delays_and_a_newer_request_skips_the_wait(scheduler):
    ran: list[str] = []
    begun = time.monotonic()
    first = scheduler.submit("b", lambda c: ran.append("first"), delay_s=0.3)
    second = scheduler.submit("b", lambda c: ran.append("second") or "second", delay_s=0.1)
    assert second.future.result(5) == "second"
    assert time.monotonic() - begun >= 0.1
    assert first.future.result(5) is None and ran == ["second"]


def test_a_failing_job_does_not_kill_the_worker(scheduler):
    def boom(cancelled):
        raise RuntimeError("boom")

    failed = scheduler.submit("b", boom)
    with pytest.raises(RuntimeError):
        failed.future.result(5)
    assert scheduler.submit("c", lambda c: "alive").future.result(5) == "alive"


def test_stop_cancels_running_work():
    s = Scheduler()
    started, log = threading.Event(), []
    job = s.submit("b", blocking_work(started, log, "job"))
    assert started.wait(5)
    s.stop()
    assert job.future.result(5) is None and log == ["job stopped early"]


def test_the_worker_calls_on_idle_once_it_runs_out_of_jobs():
    idle: list[int] = []
    done: list[str] = []
    gate = threading.Event()

    def on_idle():
        idle.append(len(done))
        if len(done) == 1:
            raise RuntimeError("housekeeping failed")  # must not stop the worker

    scheduler = Scheduler(on_idle=on_idle)
    try:

        def work(name):
            def run(cancelled):
                gate.wait(5)
                done.append(name)
                return name

            return run

        first = scheduler.submit("a", work("a"))
        second = scheduler.submit("b", work("b"))  # queued behind a: no idle between them
        gate.set()
        assert first.future.result(5) == "a" and second.future.result(5) == "b"
        time.sleep(0.1)
        assert idle == [2]
        third = scheduler.submit("c", work("c"))
        assert third.future.result(5) == "c"
        time.sleep(0.1)
        assert idle == [2, 3]
    finally:
        scheduler.stop()


def stuck_work(started: threading.Event, release: threading.Event, log: list):
    """Work that never polls `cancelled`: a packing or a lock wait that does not end."""

    def work(cancelled):
        started.set()
        release.wait(30)
        log.append("the stuck job returned")
        return "late"

    return work


def test_a_job_past_its_bound_is_abandoned_and_the_next_one_is_served(scheduler):
    started, release, log = threading.Event(), threading.Event(), []
    stuck = scheduler.submit("a", stuck_work(started, release, log), give_up_s=0.3)
    waiting = scheduler.submit("b", lambda cancelled: "served")
    assert started.wait(5)
    began = time.monotonic()
    with pytest.raises(JobAbandoned):
        stuck.future.result(5)
    assert time.monotonic() - began < 2.0
    assert stuck.cancelled
    assert waiting.future.result(5) == "served"
    assert scheduler.abandoned == 1
    # The stuck job ends after all: its thread exits and leaves the new worker alone.
    release.set()
    deadline = time.monotonic() + 5
    while "the stuck job returned" not in log and time.monotonic() < deadline:
        time.sleep(0.01)
    assert log == ["the stuck job returned"]
    assert scheduler.submit("c", lambda cancelled: "still serving").future.result(5) == (
        "still serving"
    )
    assert not scheduler.wedged


def test_a_job_within_its_bound_and_one_without_a_bound_are_left_alone(scheduler):
    slow = scheduler.submit("a", lambda cancelled: time.sleep(0.2) or "done", give_up_s=2.0)
    assert slow.future.result(5) == "done"
    unbounded = scheduler.submit("b", lambda cancelled: time.sleep(0.3) or "loaded")
    assert unbounded.future.result(5) == "loaded"
    assert scheduler.abandoned == 0


def test_too_many_stuck_workers_fail_jobs_at_once_until_they_end(scheduler):
    release, log = threading.Event(), []
    for i in range(MAX_STUCK_WORKERS):
        started = threading.Event()
        job = scheduler.submit(f"buffer{i}", stuck_work(started, release, log), give_up_s=0.2)
        assert started.wait(5)
        with pytest.raises(JobAbandoned):
            job.future.result(5)
    assert scheduler.wedged
    began = time.monotonic()
    refused = scheduler.submit("next", lambda cancelled: "never runs")
    with pytest.raises(JobAbandoned, match="stuck"):
        refused.future.result(1)
    assert time.monotonic() - began < 0.5
    release.set()  # the stuck jobs end: the scheduler serves again (a new worker is started)
    deadline = time.monotonic() + 5
    while scheduler.wedged and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not scheduler.wedged
    assert scheduler.submit("next", lambda cancelled: "served").future.result(5) == "served"
