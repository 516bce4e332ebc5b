"""The next-edit pre-warm on the model worker (session/next_edit_flow.py): queued after an
edit, it never holds up other work. A request cancels it within one prefill chunk; a precompute
queued behind it takes the worker at its next chunk; it starts again when the worker is idle
and ends once it has prefilled the prompt. The editor here is a stand-in whose prefill takes a
known time per chunk (the real one: tests/test_next_edit_prewarm.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from pygls.workspace import TextDocument

from memosight_lsp.config import Settings
from memosight_lsp.next_edit.edit_history import EditHistory
from memosight_lsp.session.next_edit_flow import MAX_PREWARM_TRIES, NextEditFlow
from memosight_lsp.session.scheduler import Scheduler
from memosight_lsp.session.stats import ServerStats

CHUNK_S = 0.05  # one prefill chunk of the stand-in
CHUNKS = 40  # a whole prompt: 2 s
URI = "file:///r/scale.py"
BEFORE = "def scale(xs):\n    factor = 2\n    return [x * factor for x in xs]\n"
AFTER = BEFORE.replace("factor = 2", "factor = 3")  # no follow-up: the model's to answer


class StandInEditor:
    """NextEditor.prewarm's contract: chunks, `cancelled` polled between two."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, int]] = []  # (how it ended, chunks) per run
        self.running = threading.Event()
        self.done = 0  # chunks of the prompt in the cache

    def prewarm(self, request: Any, *, cancelled: Any) -> dict[str, Any]:
        self.running.set()
        try:
            while self.done < CHUNKS:
                time.sleep(CHUNK_S)
                self.done += 1
                if self.done < CHUNKS and cancelled():
                    self.runs.append(("cancelled", self.done))
                    return {"prefilledTokens": 1, "cancelled": True}
            self.runs.append(("done", self.done))
            return {"prefilledTokens": 1, "cancelled": False}
        finally:
            self.running.clear()

    def prepare_head(self, request: Any, *, cancelled: Any) -> int:
        """The prompts' common head, prefilled when the worker idles: none here (0 tokens)."""
        return 0


class LocalModel:
    """A local model (not a serving engine); the flow keeps a weak reference to it."""


class Host:
    backend = LocalModel()
    message, state = None, "ready"

    def ensure(self, settings: Any) -> None:
        return


@pytest.fixture
def flow():
    holder: dict[str, NextEditFlow] = {}
    scheduler = Scheduler(on_idle=lambda: holder["flow"].idle())
    history = EditHistory()
    settings = Settings()
    flow = NextEditFlow(
        scheduler=scheduler,
        host=Host(),  # type: ignore[arg-type]
        settings=lambda: settings,
        history=history,
        stats=ServerStats(),
    )
    holder["flow"] = flow
    editor = StandInEditor()
    flow.editor = lambda backend: editor  # type: ignore[method-assign, assignment]
    flow.stand_in = editor  # type: ignore[attr-defined]
    history.opened(URI, BEFORE)
    history.changed(URI, AFTER)
    yield flow
    scheduler.stop()


def edited(flow: NextEditFlow) -> StandInEditor:
    doc = TextDocument(URI, AFTER, version=2, language_id="python")
    flow.edited(doc)
    editor: StandInEditor = flow.stand_in  # type: ignore[attr-defined]
    assert editor.running.wait(5)
    return editor


def wait_until(predicate, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_a_completion_request_cancels_the_prewarm_within_a_chunk(flow):
    editor = edited(flow)
    submitted = time.monotonic()
    job = flow.scheduler.submit(URI, lambda cancelled: time.monotonic())  # a completion
    started = job.future.result(5)
    assert started - submitted < CHUNK_S + 0.25  # one chunk at most, not the whole prompt
    assert editor.runs[0][0] == "cancelled" and editor.runs[0][1] < CHUNKS
    # The worker idle again: the pre-warm goes on from where it was, to the end.
    wait_until(lambda: editor.runs[-1][0] == "done")
    assert editor.done == CHUNKS
    assert flow._pause is None  # done: not started again
    assert flow.stats.snapshot()["nextEditPrewarms"] == len(editor.runs) >= 2


def test_a_precompute_queued_behind_it_takes_the_worker_at_the_next_chunk(flow):
    editor = edited(flow)
    time.sleep(3 * CHUNK_S)
    submitted = time.monotonic()
    # A completion's precompute does not cancel pre-warms; the pre-warm yields to it.
    job = flow.scheduler.submit(URI, lambda cancelled: time.monotonic(), kind="precompute")
    assert job.future.result(5) - submitted < CHUNK_S + 0.25
    assert editor.runs[0][0] == "cancelled"
    wait_until(lambda: editor.runs[-1][0] == "done")


def test_a_newer_edit_replaces_the_pause_and_a_request_ends_it(flow):
    editor = edited(flow)
    flow.history.changed(URI, AFTER.replace("factor = 3", "factor = 4"))
    flow.edited(TextDocument(URI, AFTER.replace("= 3", "= 4"), version=3, language_id="python"))
    pause = flow._pause
    assert pause is not None and pause.request.text.count("factor = 4") == 1
    wait_until(lambda: len(editor.runs) >= 1 and editor.running.is_set())
    assert editor.runs[0][0] == "cancelled"  # the older edit's
    flow._end_pause(URI)  # what a nextEdit request of the buffer does before it is queued
    flow.scheduler.submit(URI + "#nextEdit", lambda cancelled: None).future.result(5)
    time.sleep(3 * CHUNK_S)
    assert not editor.running.is_set() and editor.runs[-1][0] == "cancelled"


def test_a_pause_is_started_a_bounded_number_of_times(flow):
    editor = edited(flow)
    for _ in range(MAX_PREWARM_TRIES + 2):  # preempted by a request each time it starts
        flow.scheduler.submit("other", lambda cancelled: None).future.result(5)
        time.sleep(2 * CHUNK_S)
    wait_until(lambda: not editor.running.is_set())
    assert len(editor.runs) <= MAX_PREWARM_TRIES
    assert flow._pause is None or flow._pause.tries <= MAX_PREWARM_TRIES


def test_nothing_is_prewarmed_with_the_setting_off(flow):
    flow._settings().next_edit.prewarm = False
    flow.edited(TextDocument(URI, AFTER, version=2, language_id="python"))
    time.sleep(3 * CHUNK_S)
    assert flow._pause is None and flow.stand_in.runs == []  # type: ignore[attr-defined]
