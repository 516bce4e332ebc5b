"""The server's per-folder indexes, in process: LSP changes to index edits, buffer updates
through the index thread, huge buffers skipped, scans reported."""

from __future__ import annotations

import threading
import time

from lsprotocol import types
from pygls.workspace import PositionCodec

from memosight_lsp.server import scan_priority
from memosight_lsp.server.indexes import Change, WorkspaceIndexes, to_edits
from memosight_lsp.session.scheduler import Scheduler
from memosight_lsp.workspace import Buffer, WorkspaceIndex, language_for
from memosight_lsp.workspace.watcher import Watcher, watch_plan


def change(start: tuple[int, int], end: tuple[int, int], text: str) -> Change:
    return Change(types.Range(start=types.Position(*start), end=types.Position(*end)), text)


def scan_ends():
    """A progress listener that keeps each scan's "end" message: (messages, an Event set at
    the first, the listener)."""
    ends: list[str] = []
    done = threading.Event()

    def progress(root, phase, percent, message) -> None:
        if phase == "end":
            ends.append(message)
            done.set()

    return ends, done, progress


def test_lsp_changes_become_index_edits_in_utf16_and_in_order():
    text = "s = '😀x'\nt = 1\n"
    changes = [
        change((0, 7), (0, 8), "y"),  # UTF-16 unit 7 is the 'x' after the emoji
        change((1, 0), (1, 0), "u = 2\n"),  # read against the text after the first change
        change((2, 4), (2, 5), "3"),
    ]
    buffer = Buffer(language_for("x.py"), text)
    buffer.apply(to_edits(text, changes, PositionCodec(types.PositionEncodingKind.Utf16)))
    assert buffer.text == "s = '😀y'\nu = 2\nt = 3\n"


def test_buffers_follow_edits_and_huge_ones_are_skipped(tmp_path):
    (tmp_path / "a.py").write_text("def old():\n    pass\n")
    ends, done, progress = scan_ends()
    indexes = WorkspaceIndexes(progress, watch=False)
    try:
        indexes.set_roots([tmp_path, tmp_path / "missing"])
        assert done.wait(30) and "indexed 1 files" in ends[0]
        path = str(tmp_path / "a.py")
        index = indexes.index_for(path)
        assert index is not None and indexes.index_for("/elsewhere/x.py") is None
        codec = PositionCodec(types.PositionEncodingKind.Utf16)
        indexes.opened(path, "def old():\n    pass\n", "python")
        new_text = "def old():\n    pass\ndef fresh(x):\n    return x\n"
        indexes.changed(
            path,
            [change((2, 0), (2, 0), "def fresh(x):\n    return x\n")],
            new_text,
            "python",
            codec,
        )
        indexes.wait_idle(10)
        assert [d.name for d in index.symbols(path).definitions] == ["old", "fresh"]
        assert index.files_defining("fresh") == ["a.py"]
        assert indexes.recent_edits() == ((path, 2),)
        huge = new_text + "x = 1\n" * 200_000
        indexes.changed(path, [Change(None, huge)], huge, "python", codec)
        indexes.wait_idle(10)
        assert index.buffer(path) is None  # over 1 MB: the disk copy stands
        assert [d.name for d in index.symbols(path).definitions] == ["old"]
        indexes.opened(path, new_text, "python")
        indexes.closed(path)
        indexes.wait_idle(10)
        assert index.files_defining("fresh") == []
    finally:
        indexes.stop()


def test_watcher_skips_vendored_folders_and_follows_new_ones(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text("def m():\n    pass\n")
    (tmp_path / ".venv" / "lib").mkdir(parents=True)
    (tmp_path / "tools" / "node_modules" / "x").mkdir(parents=True)
    plan = dict(watch_plan(str(tmp_path)))
    assert plan == {
        str(tmp_path): False,
        str(tmp_path / "pkg"): True,
        str(tmp_path / "tools"): False,
    }
    index = WorkspaceIndex(tmp_path, use_cache=False)
    index.scan()
    watcher = Watcher(index.root, index, debounce_s=0.05)
    watcher.start()
    try:
        (tmp_path / "fresh").mkdir()  # a new top-level folder: watched once created
        time.sleep(0.3)
        (tmp_path / "fresh" / "f.py").write_text("def fresh():\n    pass\n")
        time.sleep(0.3)
        (tmp_path / "fresh" / "f.py").write_text("def fresher():\n    pass\n")
        deadline = time.monotonic() + 10
        while not index.definitions("fresher") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert index.definitions("fresher") and not index.definitions("fresh")
        (tmp_path / "tools" / "t.py").write_text("def tool():\n    pass\n")
        deadline = time.monotonic() + 10
        while not index.definitions("tool") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert index.definitions("tool")
    finally:
        watcher.stop()


def watchdog_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if type(t).__module__.startswith("watchdog")]


def test_indexes_own_the_watchers_they_start(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.py").write_text("def alpha():\n    pass\n")
    before = len(watchdog_threads())
    scanned = threading.Event()

    def progress(folder, phase, percent, message) -> None:
        if phase == "end":
            scanned.set()

    indexes = WorkspaceIndexes(progress)
    try:
        indexes.set_roots([root])
        assert scanned.wait(30)
        index = indexes.index_for(str(root / "a.py"))
        assert index is not None and len(watchdog_threads()) > before
        (root / "b.py").write_text("def beta():\n    pass\n")
        deadline = time.monotonic() + 10
        while not index.definitions("beta") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert index.definitions("beta")
        indexes.set_roots([])  # a folder no longer served: its watcher stops, what it learned stays
        indexes.wait_idle(10)
        assert len(watchdog_threads()) == before
    finally:
        indexes.stop()
    assert WorkspaceIndex(root).scan().parsed == 0


def _held_job(scheduler: Scheduler, kind: str, release: threading.Event):
    """A job on the real model worker that runs until `release` is set."""
    started = threading.Event()

    def work(cancelled) -> None:
        started.set()
        release.wait(30)

    job = scheduler.submit("__model__", work, kind=kind)  # type: ignore[arg-type]
    assert started.wait(10)
    return job


def test_a_scan_waits_for_the_models_load_and_then_runs(tmp_path):
    for n in range(3):
        (tmp_path / f"m{n}.py").write_text(f"def f{n}():\n    return {n}\n")
    scheduler = Scheduler()
    release = threading.Event()
    ends, done, progress = scan_ends()
    indexes = WorkspaceIndexes(progress, watch=False, model_calm=scheduler.wait_calm)
    try:
        load = _held_job(scheduler, "control", release)  # a model load under way
        assert not scheduler.wait_calm(0.05)
        indexes.set_roots([tmp_path])
        assert not done.wait(0.5)  # the scan gives the load the cores
        index = indexes.index_for(str(tmp_path / "m0.py"))
        assert index is not None and len(index) == 0
        release.set()
        load.future.result(10)
        assert done.wait(10) and "indexed 3 files" in ends[0]
        assert len(index) == 3
    finally:
        release.set()
        indexes.stop()
        scheduler.stop()


def test_pre_warms_do_not_hold_a_scan_back_and_stop_ends_a_wait(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    scheduler = Scheduler()
    release = threading.Event()
    done = threading.Event()
    indexes = WorkspaceIndexes(
        lambda root, phase, *_: done.set() if phase == "end" else None,
        watch=False,
        model_calm=scheduler.wait_calm,
    )
    try:
        _held_job(scheduler, "prewarm", release)  # a guess, not what the user waits for
        assert scheduler.wait_calm(0)
        # A timing of the model at the same low priority is urgent: a scan would skew it.
        timing = scheduler.submit("__timing__", lambda cancelled: None, kind="prewarm", timing=True)
        assert not scheduler.wait_calm(0)
        timing.cancel()
        assert scheduler.wait_calm(0)
        indexes.set_roots([tmp_path])
        assert done.wait(10)
        release.set()
        # A busy model and a server that stops: the waiting scan leaves at once.
        release.clear()
        _held_job(scheduler, "request", release)
        other = tmp_path / "other"
        other.mkdir()
        (other / "b.py").write_text("y = 2\n")
        done.clear()
        started = time.monotonic()
        indexes.set_roots([tmp_path, other])
        time.sleep(0.2)
        indexes.stop()
        assert done.wait(5) and time.monotonic() - started < 5
    finally:
        release.set()
        indexes.stop()
        scheduler.stop()


def test_a_model_that_is_never_idle_slows_a_scan_but_cannot_stop_it(monkeypatch):
    monkeypatch.setattr(scan_priority, "START_WAIT_S", 0.6)
    monkeypatch.setattr(scan_priority, "GIVE_WAY_S", 0.05)
    scheduler = Scheduler()
    release = threading.Event()
    try:
        _held_job(scheduler, "request", release)  # never ends while the scan waits
        first = scan_priority.ModelFirst(scheduler.wait_calm, threading.Event())
        started = time.monotonic()
        assert 0.6 <= first.before_scan() < 2
        for _ in range(5):  # each give-way is bounded
            time.sleep(scan_priority.SLICE_S)
            first.between_steps()
        assert time.monotonic() - started < 3
        release.set()  # the worker is calm: no wait at all
        assert scheduler.wait_calm(5)
        calm = scan_priority.ModelFirst(scheduler.wait_calm, threading.Event())
        assert calm.before_scan() < 0.05
    finally:
        release.set()
        scheduler.stop()
