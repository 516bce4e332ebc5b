"""Faults injected into the real server (tests/fault_server.py patches torch or the process
limits from outside): it keeps answering, says what went wrong once, writes nothing outside its
cache folder and never leaves a half-written cache file."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest
from lsp_session import FAULT_SERVER, Session, no_caches
from transformers import AutoModelForCausalLM

from memosight_lsp.inference.heads import (
    HEADS_WEIGHTS,
    HeadsConfig,
    MedusaHeads,
    lm_head_fingerprint,
    model_dims,
    save_heads,
)
from memosight_lsp.inference.ngram_model import NGRAMS_FILE
from memosight_lsp.session.completion_flow import GIVE_UP_GRACE_S
from memosight_lsp.workspace import WorkspaceIndex
from memosight_lsp.workspace import cache as index_cache

pytestmark = pytest.mark.slow

DOC = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    "
CURSOR = (5, 4)


def cache_dir_of(root: Path, xdg: Path) -> Path:
    with mock.patch.dict(os.environ, {"XDG_CACHE_HOME": str(xdg)}):
        return index_cache.default_cache_dir(root)


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every path under folder with its size and mtime (to prove nothing was written there)."""
    out = {}
    for path in sorted(folder.rglob("*")):
        stat = path.lstat()
        out[str(path.relative_to(folder))] = (stat.st_size, stat.st_mtime_ns)
    return out


def make_workspace(root: Path, files: int) -> Path:
    for i in range(files):
        sub = root / f"pkg{i % 10}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"mod{i}.py").write_text(
            f'def function_{i}(value):\n    """Doc {i}."""\n    return value + {i}\n'
        )
    return root


@contextmanager
def read_only(folder: Path):
    """A folder nobody can write into, root included (chattr +i where we are root)."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode:
            pytest.skip("cannot make a folder read-only for root here (no chattr +i)")
        try:
            yield folder
        finally:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
    else:
        folder.chmod(0o555)
        try:
            yield folder
        finally:
            folder.chmod(0o755)


# -- faults inside the model ------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_faults(tiny_model_dir, tmp_path_factory):
    """One server for the faults in the model and in the index cache: a model it may lose, a
    folder whose cache folder is read-only, one whose cache file is garbage."""
    tmp = tmp_path_factory.mktemp("model-faults")
    model = tmp / "model"
    shutil.copytree(tiny_model_dir, model)
    control = tmp / "fault"
    xdg = tmp / "cache"
    readonly_ws = make_workspace(tmp / "readonly", 30)
    corrupt_ws = make_workspace(tmp / "corrupt", 20)
    corrupt_cache = cache_dir_of(corrupt_ws, xdg) / index_cache.CACHE_FILE
    corrupt_cache.parent.mkdir(parents=True)
    corrupt_cache.write_bytes(b"\x93\xff not msgpack at all" * 50)
    before = {ws: snapshot(ws) for ws in (readonly_ws, corrupt_ws)}
    options = {"model": {"path": str(model)}, "completion": {"maxNewTokens": 8, **no_caches()}}
    with read_only(cache_dir_of(readonly_ws, xdg)) as locked:
        session = Session(
            [readonly_ws, corrupt_ws],
            options,
            command=FAULT_SERVER,
            env={"MEMOSIGHT_FAULT_FILE": str(control), "XDG_CACHE_HOME": str(xdg)},
        )
        try:
            session.wait_state("ready")
            uri = session.open(tmp / "doc.py", DOC)
            baseline = session.inline(uri, *CURSOR)
            assert baseline
            session.wait_until(
                lambda: (
                    session.index_files()
                    == {str(readonly_ws.resolve()): 30, str(corrupt_ws.resolve()): 20}
                ),
                what="both folders indexed",
            )
            yield ModelFaults(
                session, uri, baseline, control, model, options, before, locked, corrupt_cache
            )
        finally:
            session.stop()


@dataclass
class ModelFaults:
    session: Session
    uri: str
    baseline: str
    control: Path
    model: Path
    options: dict
    workspaces: dict[Path, dict]
    locked_cache: Path
    corrupt_cache: Path


@pytest.mark.parametrize(
    ("order", "error"),
    [
        ("raise-after 3", "RuntimeError"),
        ("oom-after 3", "OutOfMemoryError"),
        ("memory-after 3", "MemoryError"),
    ],
)
def test_a_forward_pass_failing_mid_decode_answers_empty_and_the_next_one_is_whole(
    model_faults, order, error
):
    session, uri, baseline, control = (
        model_faults.session,
        model_faults.uri,
        model_faults.baseline,
        model_faults.control,
    )
    errors = session.stats()["errors"]
    control.write_text(order)  # three attention calls pass (the prefill), the fourth fails
    try:
        assert session.inline(uri, *CURSOR) is None
    finally:
        control.unlink()
    # The server's stderr is read on a thread of its own: its lines may trail the answer.
    fired = f"injected fault fired: {order.split('-')[0]}"
    session.wait_until(
        lambda: (
            session.server.log_lines(fired)
            and session.server.log_lines(f"completion failed ({error}")
        ),
        timeout=10,
        what="the fault's log lines",
    )
    assert len(session.server.log_lines(fired)) == 1
    failed = session.server.log_lines(f"completion failed ({error}")
    assert len(failed) == 1 and "answered empty" in failed[0]
    assert session.stats()["errors"] == errors + 1
    # The buffer's half-written KV cache was dropped: the same cursor gives the same text.
    assert session.inline(uri, *CURSOR) == baseline


def test_a_forward_pass_that_never_returns_is_abandoned_and_the_server_serves_on(model_faults):
    """A forward pass blocks, polling nothing (a kernel or a lock that never returns): the
    request is answered empty by completion.maxWaitMs plus the grace, with one line saying so,
    and the next request is served by a new worker while the stuck one still waits."""
    session, uri, baseline, control = (
        model_faults.session,
        model_faults.uri,
        model_faults.baseline,
        model_faults.control,
    )
    completion = {**model_faults.options.get("completion", {}), "maxWaitMs": 1000}
    session.configure({**model_faults.options, "completion": completion})
    warmed = session.stats()["prewarmedTokens"]
    text = DOC + "pass\n\n\ndef sub(a, b):\n    "
    other = session.open(model_faults.model.parent / "other.py", text)
    # The buffer's pre-warm ends first: the stuck pass must be the request's own.
    session.wait_until(lambda: session.stats()["prewarmedTokens"] > warmed, what="pre-warm")
    control.write_text("hang-after 0")
    try:
        started = time.monotonic()
        assert session.inline(other, 9, 4) is None
        waited = time.monotonic() - started
        assert 1.0 < waited < 1.0 + GIVE_UP_GRACE_S + 3.0, waited
        assert session.server.log_lines("injected fault fired: hang")
        assert session.server.log_lines("abandoned")
        assert session.stats()["abandoned"] == 1
        # Served while the abandoned pass is still blocked (the fault fires once).
        assert session.inline(uri, *CURSOR) == baseline
    finally:
        control.unlink()
    session.configure(model_faults.options)


def test_the_model_folder_deleted_while_loaded(model_faults, tiny_model_dir):
    session, uri, baseline = model_faults.session, model_faults.uri, model_faults.baseline
    model, options = model_faults.model, model_faults.options
    shutil.rmtree(model)
    assert session.inline(uri, *CURSOR) == baseline  # the weights are in memory
    seen = len(session.server.statuses)
    session.configure({**options, "model": {"path": str(model), "dtype": "float32"}})  # reload
    status = session.wait_state("error", after=seen)
    assert "model folder not found" in status["message"]
    assert session.inline(uri, *CURSOR) is None
    assert "model folder not found" in session.context(uri, *CURSOR)["reason"]
    assert session.stats()["state"] == "error"
    # Put it back and change the settings: the server loads it again, no restart needed.
    shutil.copytree(tiny_model_dir, model)
    seen = len(session.server.statuses)
    session.configure({**options, "model": {"path": str(model), "dtype": "auto"}})
    session.wait_state("ready", after=seen)
    assert session.inline(uri, *CURSOR) == baseline


# -- faults in the index cache ----------------------------------------------------------------


def test_a_read_only_cache_folder_is_reported_and_the_index_still_serves(model_faults):
    session, before, locked = (
        model_faults.session,
        model_faults.workspaces,
        model_faults.locked_cache,
    )
    lines = session.server.log_lines(f"could not write index cache {locked}")
    assert lines and ("Operation not permitted" in lines[0] or "Permission denied" in lines[0])
    assert list(locked.iterdir()) == []
    for ws, files in before.items():
        assert snapshot(ws) == files  # nothing written into the workspace


def test_a_corrupt_index_cache_is_rebuilt(model_faults):
    session, corrupt_cache = model_faults.session, model_faults.corrupt_cache
    assert len(session.server.log_lines(f"index cache {corrupt_cache} is corrupt")) == 1
    root = Path(next(r for r in session.index_files() if r.endswith("corrupt")))
    assert len(index_cache.load(corrupt_cache, root)) == 20
    assert not list(corrupt_cache.parent.glob(".index-*.tmp"))


# -- a full disk, and a model with corrupt draft files -------------------------------------------


def with_corrupt_draft_files(tiny_model_dir: Path, model: Path) -> Path:
    """A copy of the model with heads made for it (by the project's own code) and then cut in
    half, and an n-gram table that is no table at all."""
    shutil.copytree(tiny_model_dir, model)
    loaded = AutoModelForCausalLM.from_pretrained(model)
    hidden, vocab = model_dims(loaded)
    config = HeadsConfig(
        num_heads=2, hidden_size=hidden, vocab_size=vocab, fingerprint=lm_head_fingerprint(loaded)
    )
    save_heads(MedusaHeads(hidden, 2), config, model)
    heads = model / HEADS_WEIGHTS
    heads.write_bytes(heads.read_bytes()[: heads.stat().st_size // 2])
    (model / NGRAMS_FILE).write_bytes(b"PK\x03\x04 this is no zip" * 100)
    return model


@pytest.fixture(scope="module")
def disk_full(tiny_model_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("disk-full")
    xdg = tmp / "cache"
    ws = make_workspace(tmp / "ws", 120)
    cache_file = cache_dir_of(ws, xdg) / index_cache.CACHE_FILE
    WorkspaceIndex(ws, cache_dir=cache_file.parent).scan()  # an old cache, then changes
    old_cache = cache_file.read_bytes()
    assert len(old_cache) > 8192
    for i in range(0, 120, 6):
        (ws / f"pkg{i % 10}" / f"mod{i}.py").write_text(f"def changed_{i}():\n    return {i}\n")
    model = with_corrupt_draft_files(tiny_model_dir, tmp / "model")
    options = {"model": {"path": str(model)}, "completion": {"maxNewTokens": 16, **no_caches()}}
    session = Session(
        [ws],
        options,
        command=FAULT_SERVER,
        env={"XDG_CACHE_HOME": str(xdg), "MEMOSIGHT_FSIZE_LIMIT": "8192"},
    )
    try:
        session.wait_until(lambda: session.index_files() == {str(ws.resolve()): 120})
        session.wait_state("ready", "error")
        yield session, ws, cache_file, old_cache, options
    finally:
        session.stop()


def test_a_full_disk_keeps_the_old_cache_whole_and_leaves_no_temp_file(disk_full):
    session, _, cache_file, old_cache, _ = disk_full
    session.wait_until(lambda: session.server.log_lines("could not write index cache"))
    assert "File too large" in session.server.log_lines("could not write index cache")[0]
    assert cache_file.read_bytes() == old_cache
    assert [p.name for p in cache_file.parent.iterdir()] == [index_cache.CACHE_FILE]


def test_corrupt_heads_and_ngram_files_are_ignored_with_the_same_completions(disk_full, tmp_path):
    session, *_ = disk_full
    assert session.stats()["state"] == "ready"
    uri = session.open(tmp_path / "doc.py", DOC)
    text = session.inline(uri, *CURSOR)
    assert text
    assert any(
        "ignoring unreadable" in line and HEADS_WEIGHTS in line for line in session.server.log
    )
    assert any("unreadable n-gram table" in line for line in session.server.log)
    # The answers are exact all the same: plain greedy decoding gives the same text.
    session.configure({"completion": {"speculative": False}})
    assert session.inline(uri, *CURSOR) == text
    assert session.stats()["errors"] == 0
