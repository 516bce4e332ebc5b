"""The machine's timings of a model (pipeline/calibration.py, inference/calibration_cache.py):
kept per machine, model and precision; a server with none kept answers first on defaults that
give the same tokens, and times them on its idle worker after that answer, giving way to
requests."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time

import pytest
from tiny_models import STDLIB

from memosight_lsp.config import ModelSettings
from memosight_lsp.inference import calibration_cache
from memosight_lsp.inference.calibration_cache import Calibration
from memosight_lsp.inference.drafters import CostModel
from memosight_lsp.inference.fused_trunk import FusedTrunk, prepare_trunk
from memosight_lsp.inference.loading import load_model
from memosight_lsp.inference.row_kernels import FEW_ROWS, LINEAR
from memosight_lsp.pipeline.latency import MIN_CHUNK_TOKENS, MIN_PROMPT_TOKENS
from memosight_lsp.pipeline.local_backend import LocalBackend
from memosight_lsp.pipeline.prompt import MARKER_RESERVE
from memosight_lsp.pipeline.request import CompletionRequest
from memosight_lsp.session.model_host import ModelHost
from memosight_lsp.session.scheduler import Scheduler

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TEXT = (STDLIB / "shlex.py").read_text()


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(tiny_model_dir, device="cpu")


def request(line: int = 120, **options) -> CompletionRequest:
    return CompletionRequest(text=TEXT, line=line, column=0, mid_word="complete", **options)


def quiet(engine: LocalBackend) -> LocalBackend:
    """Keep what it measures whatever else runs on the (shared) test machine."""
    engine.calibration.busy_cores = math.inf
    return engine


# -- the cache --------------------------------------------------------------------------------


def test_an_entry_round_trips_and_a_bad_one_reads_as_missing(tmp_path):
    kept = Calibration(
        pass_costs={1: 2.0, 8: 3.5},
        row_kernels=(LINEAR,) * (FEW_ROWS + 1),
        prefill=(256, 40.0),
        measured_at="2026-01-01T00:00:00+00:00",
        other_cores=0.1,
    )
    calibration_cache.write("k", kept)
    assert calibration_cache.read("k") == kept
    assert calibration_cache.read("other") is None
    good = kept.to_json()
    for broken in (
        {**good, "format": 0},
        {**good, "passCosts": {"1": -1.0}},
        {**good, "passCosts": {"2": 1.0}},  # no one-token pass
        {**good, "rowKernels": [LINEAR] * 3},
        {**good, "rowKernels": [7] * (FEW_ROWS + 1)},
        {**good, "prefill": [256, "fast"]},
        {**good, "prefill": [0, 1.0]},
        "not an entry",
    ):
        assert calibration_cache.parse(broken) is None, broken


def test_a_corrupt_file_is_ignored_and_written_over():
    path = calibration_cache.cache_file()
    path.parent.mkdir(parents=True)
    path.write_text('{"k": {"format": 1, "passCosts": {"1": ')  # cut off mid-write
    assert calibration_cache.read("k") is None
    calibration_cache.write("k", Calibration(prefill=(64, 8.0)))
    assert json.loads(path.read_text())["k"]["prefill"] == [64, 8.0]
    path.write_text('{"bad": {"format": 1, "prefill": [1, -5]}, "k": []}')
    calibration_cache.write("k2", Calibration(prefill=(64, 8.0)))
    assert set(json.loads(path.read_text())) == {"k2"}  # invalid entries are not kept


def test_the_cache_keeps_a_bounded_number_of_entries():
    for i in range(calibration_cache.MAX_ENTRIES + 5):
        calibration_cache.write(f"k{i}", Calibration(prefill=(64, 8.0)))
    entries = json.loads(calibration_cache.cache_file().read_text())
    assert len(entries) == calibration_cache.MAX_ENTRIES and "k0" not in entries


# -- the engine -------------------------------------------------------------------------------


def test_nothing_kept_the_first_completion_runs_on_defaults_and_times_nothing(loaded):
    engine = LocalBackend(loaded)
    assert engine.calibration.apply_cached() is False
    assert engine.calibration.pending == ["prefill", "passCosts", "rowKernels"]
    due: list[int] = []
    engine.calibration.on_due = lambda: due.append(1)
    trunk = prepare_trunk(loaded.model)
    assert isinstance(trunk, FusedTrunk) and trunk.kernels is not None
    defaults = trunk.kernels
    first = engine.latency_budget(request())
    # The first prompt is prefilled in chunks: a newer request cancels it between two.
    assert first.prefill_chunk == MIN_CHUNK_TOKENS < first.prompt_tokens
    started = time.perf_counter()
    fast = engine.complete(request(buffer_id="file:///shlex.py"))
    plain = engine.complete(request(plain=True))
    assert fast.stats["speculative"] and fast.new_tokens > 0
    assert (fast.raw, fast.stop_reason) == (plain.raw, plain.stop_reason)  # lossless
    assert time.perf_counter() - started < 5
    assert engine.decoder.cost_model.costs == CostModel().costs  # type: ignore[attr-defined]
    assert trunk.kernels is defaults  # nothing timed
    assert due == [1, 1]  # each answer says it is due while something is pending
    assert not calibration_cache.cache_file().exists()
    # With no rate yet its prompt was small; its prefill is the first sample of the rate, and
    # the next cold prompt is sized by it (the tiny model prefills fast: the whole budget).
    assert fast.prompt_tokens <= MIN_PROMPT_TOKENS + MARKER_RESERVE
    assert engine.prefill_rate.samples >= 1
    assert engine.latency_budget(request()).prompt_tokens > MIN_PROMPT_TOKENS


def test_measuring_gives_way_keeps_each_finished_step_and_then_caches(loaded):
    engine = quiet(LocalBackend(loaded))
    engine.calibration.apply_cached()
    assert engine.calibration.measure(cancelled=lambda: True) is False
    assert engine.calibration.pending == ["prefill", "passCosts", "rowKernels"]
    asked = iter(range(10**6))
    # A request comes after a few passes: the prefill is done, the pass costs are not.
    assert engine.calibration.measure(cancelled=lambda: next(asked) >= 3) is False
    assert engine.calibration.pending == ["passCosts", "rowKernels"]
    assert not calibration_cache.cache_file().exists()  # kept only once all are done
    assert engine.calibration.measure() is True
    assert engine.calibration.pending == []
    kept = calibration_cache.read(engine.calibration.key)
    assert kept is not None and kept.pass_costs and kept.row_kernels and kept.prefill
    assert engine.decoder.cost_model.costs == kept.pass_costs  # type: ignore[attr-defined]
    # Output after the switch is still plain greedy decoding.
    fast = engine.complete(request(buffer_id="file:///shlex.py"))
    assert fast.raw == engine.complete(request(plain=True)).raw


def test_a_second_server_takes_the_kept_timings_and_times_nothing(loaded):
    first = quiet(LocalBackend(loaded))
    first.calibration.apply_cached()
    first.calibration.measure()
    kept = calibration_cache.read(first.calibration.key)
    assert kept is not None
    second = LocalBackend(loaded)
    assert second.calibration.apply_cached() is True
    assert second.calibration.describe()["source"] == "cached"
    assert second.decoder.cost_model.costs == kept.pass_costs  # type: ignore[attr-defined]
    trunk = prepare_trunk(loaded.model)
    assert trunk.kernels is not None and trunk.kernels.chosen == kept.row_kernels
    assert second.prefill_rate.settled is not None and second.prefill_rate.samples == 1
    # Its first prompt is small all the same (the process's first pass pays its first-call
    # costs); after it, prompts follow the kept rate.
    assert second.latency_budget(request()).prompt_tokens == MIN_PROMPT_TOKENS
    due: list[int] = []
    second.calibration.on_due = lambda: due.append(1)
    first_answer = second.complete(request())
    assert due == []  # nothing to measure after its answers
    assert first_answer.prompt_tokens <= MIN_PROMPT_TOKENS + MARKER_RESERVE
    assert second.latency_budget(request()).prompt_tokens > MIN_PROMPT_TOKENS


def test_timings_taken_beside_busy_processes_serve_but_are_not_kept(loaded):
    engine = LocalBackend(loaded)
    engine.calibration.apply_cached()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3)]
    try:
        time.sleep(0.5)
        assert engine.calibration.measure() is True
    finally:
        for process in busy:
            process.kill()
            process.wait()
    assert engine.calibration.pending == []  # in use for this server
    assert engine.calibration.describe()["source"].startswith("measured, not kept")
    assert calibration_cache.read(engine.calibration.key) is None


def test_dropping_the_kv_caches_forgets_every_buffer(loaded):
    engine = LocalBackend(loaded)
    engine.calibration.apply_cached()
    engine.complete(request(buffer_id="file:///a.py"))
    assert engine.decoder.prefix_cache.stats()["buffers"] == 1
    engine.drop_kv_caches()
    assert engine.decoder.prefix_cache.stats()["buffers"] == 0


# -- the server's model host ------------------------------------------------------------------


def test_the_server_times_after_its_first_answer_and_never_before(tiny_model_dir):
    scheduler = Scheduler()
    states: list[str] = []
    host = ModelHost(scheduler, lambda state, message, name: states.append(state))
    try:
        host.ensure(ModelSettings(path=str(tiny_model_dir), device="cpu"))
        host.wait(60)
        engine = host.backend
        assert isinstance(engine, LocalBackend) and states[-1] == "ready"
        engine.calibration.busy_cores = math.inf
        time.sleep(1.0)  # an idle worker before any request: still nothing timed
        assert engine.calibration.pending == ["prefill", "passCosts", "rowKernels"]
        job = scheduler.submit("file:///shlex.py", lambda cancelled: engine.complete(request()))
        answer = job.future.result(60)
        assert answer.new_tokens > 0
        deadline = time.monotonic() + 60
        key = engine.calibration.key
        while calibration_cache.read(key) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert calibration_cache.read(key) is not None  # timed on the idle worker, kept
        assert engine.calibration.pending == []
    finally:
        scheduler.stop()


def test_a_request_interrupts_the_timing_and_it_resumes_after_the_answer(tiny_model_dir):
    scheduler = Scheduler()
    host = ModelHost(scheduler, lambda *state: None)
    try:
        host.ensure(ModelSettings(path=str(tiny_model_dir), device="cpu"))
        host.wait(60)
        engine = host.backend
        assert isinstance(engine, LocalBackend)
        engine.calibration.busy_cores = math.inf
        timing = threading.Event()
        measure = engine.calibration.measure
        results: list[bool] = []

        def noted(cancelled=None, **options):
            timing.set()
            results.append(measure(cancelled, **options))
            return results[-1]

        engine.calibration.measure = noted  # type: ignore[method-assign]
        scheduler.submit("file:///a.py", lambda c: engine.complete(request())).future.result(60)
        assert timing.wait(30)
        # A request arrives while the timing runs: it cancels the timing, which resumes after.
        answer = scheduler.submit("file:///b.py", lambda c: engine.complete(request(line=200)))
        assert answer.future.result(60).model
        deadline = time.monotonic() + 60
        while engine.calibration.pending and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.calibration.pending == []
        assert results[0] is False and results[-1] is True  # gave way, then finished
    finally:
        scheduler.stop()
