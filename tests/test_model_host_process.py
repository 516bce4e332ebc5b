"""The model kept between editors (host_process/): the real `python -m memosight_lsp`, started
as an editor starts it, relays to a host process that serves the session and keeps the model
loaded for the next editor, until its keep-alive ends."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import lsp_session
import pytest
from lsp_session import Session, tiny_options

from memosight_lsp.host_process import rendezvous
from memosight_lsp.host_process.relay import Downstream

TEXT = "def add(a, b):\n    return a + b\n\n\ndef scale(values, factor):\n    return "


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def sockets(folder: Path) -> list[Path]:
    return sorted(folder.glob("host-*.sock"))


def wait_gone(pid: int, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def hosts(tmp_path):
    """A private rendezvous folder for this test's servers; their hosts are stopped after it."""
    folder = tmp_path / "run"
    seen: list[int] = []

    def env(keep_alive: float = 60.0) -> dict[str, str]:
        return {
            rendezvous.KEEP_ALIVE_ENV: str(keep_alive),
            rendezvous.RUNTIME_DIR_ENV: str(folder),
        }

    def served_by(session: Session) -> int:
        pid = session.stats()["pid"]
        seen.append(pid)
        return pid

    yield env, served_by, folder
    for pid in seen:
        if alive(pid):
            os.kill(pid, signal.SIGTERM)
            wait_gone(pid)


def session(env: dict[str, str], model_dir: Path) -> Session:
    return Session(init_options=tiny_options(model_dir), env=env)


def completion(s: Session) -> str | None:
    uri = s.open("file:///tmp/host-test.py", TEXT)
    return s.inline(uri, 5, 11)


def test_the_next_editor_is_served_by_the_kept_model(hosts, tiny_model_dir):
    env, served_by, folder = hosts
    first = session(env(), tiny_model_dir)
    first.wait_state("ready")
    host = served_by(first)
    assert host != first.server.proc.pid  # a host process serves, not the editor's child
    assert first.stats()["keepsModel"] is True
    expected = completion(first)
    assert first.stop() == 0
    assert alive(host), "the host left with its editor"
    assert len(sockets(folder)) == 1

    second = session(env(), tiny_model_dir)
    try:
        assert served_by(second) == host
        # Ready from the first status on: nothing is loaded again.
        assert second.wait_state("ready", "loading")["state"] == "ready"
        assert second.stats()["openDocuments"] == 0  # the first editor's buffers are not here
        assert completion(second) == expected
        assert any("with the model kept" in line for line in second.server.log)
    finally:
        assert second.stop() == 0


def test_a_busy_host_leaves_the_next_editor_to_a_host_of_its_own(hosts, tiny_model_dir):
    env, served_by, folder = hosts
    first = session(env(), tiny_model_dir)
    second = session(env(), tiny_model_dir)
    try:
        pids = {served_by(first), served_by(second)}
        assert len(pids) == 2
        assert completion(first) == completion(second)
    finally:
        first.stop()
        second.stop()
    # Both editors closed: one host keeps the model, the other (the same model) leaves.
    deadline = time.monotonic() + 20
    while sum(alive(pid) for pid in pids) > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sum(alive(pid) for pid in pids) == 1
    assert len(sockets(folder)) == 1


def test_the_host_leaves_after_its_keep_alive(hosts, tiny_model_dir):
    env, served_by, folder = hosts
    s = session(env(keep_alive=1.0), tiny_model_dir)
    host = served_by(s)
    assert completion(s)
    s.stop()
    assert wait_gone(host), "the host outlived its keep-alive"
    assert list(folder.iterdir()) == []  # its socket went with it


def test_a_model_that_did_not_load_is_tried_again_by_the_next_editor(hosts, tmp_path):
    env, served_by, _ = hosts
    options = {"model": {"path": str(tmp_path / "missing")}}
    first = Session(init_options=options, env=env())
    first.wait_state("error")
    host = served_by(first)
    first.stop()
    second = Session(init_options=options, env=env())
    try:
        assert served_by(second) == host
        assert second.wait_state("loading", "error")["state"] == "loading"  # tried again
        second.wait_state("error")
    finally:
        second.stop()


def test_a_killed_host_is_replaced(hosts, tiny_model_dir):
    env, served_by, folder = hosts
    first = session(env(), tiny_model_dir)
    first.wait_state("ready")
    host = served_by(first)
    first.stop()
    os.kill(host, signal.SIGKILL)  # no chance to clear its socket file
    assert wait_gone(host)
    (stale,) = sockets(folder)
    second = session(env(), tiny_model_dir)
    try:
        assert served_by(second) not in (host, second.server.proc.pid)
        assert completion(second)
        assert not stale.exists()  # nobody listened on it: the relay cleared it
    finally:
        second.stop()


def test_keep_alive_zero_serves_in_the_editors_process(hosts, tiny_model_dir):
    env, _, folder = hosts
    s = session(env(keep_alive=0), tiny_model_dir)
    try:
        stats = s.stats()
        assert stats["pid"] == s.server.proc.pid
        assert stats["keepsModel"] is False
    finally:
        assert s.stop() == 0
    assert not folder.exists() or list(folder.iterdir()) == []


def test_keep_alive_seconds(monkeypatch):
    monkeypatch.delenv(rendezvous.KEEP_ALIVE_ENV, raising=False)
    assert rendezvous.keep_alive_seconds() == rendezvous.DEFAULT_KEEP_ALIVE_S
    assert rendezvous.keep_alive_seconds(0) == 0
    assert rendezvous.keep_alive_seconds(-5) == 0
    assert rendezvous.keep_alive_seconds(1e12) == rendezvous.MAX_KEEP_ALIVE_S
    monkeypatch.setenv(rendezvous.KEEP_ALIVE_ENV, "30")
    assert rendezvous.keep_alive_seconds() == 30
    assert rendezvous.keep_alive_seconds(5) == 5  # --keep-alive wins
    monkeypatch.setenv(rendezvous.KEEP_ALIVE_ENV, "soon")
    assert rendezvous.keep_alive_seconds() == rendezvous.DEFAULT_KEEP_ALIVE_S


def test_a_rendezvous_folder_others_can_enter_is_refused(monkeypatch, tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    monkeypatch.setenv(rendezvous.RUNTIME_DIR_ENV, str(folder))
    assert rendezvous.runtime_dir() is None
    folder.chmod(0o700)
    assert rendezvous.runtime_dir() == folder
    made = tmp_path / "new" / "run"
    monkeypatch.setenv(rendezvous.RUNTIME_DIR_ENV, str(made))
    assert rendezvous.runtime_dir() == made
    assert stat.S_IMODE(made.stat().st_mode) == 0o700


def test_one_host_serves_editors_in_other_folders_in_their_own(hosts, tiny_model_dir, tmp_path):
    """The working folder is the relay's in each session: a relative model path names the
    model beside the project the editor opened."""
    env, served_by, _ = hosts
    pids = []
    for name in ("project-a", "project-b"):
        project = tmp_path / name
        project.mkdir()
        (project / "model").symlink_to(tiny_model_dir)
        s = Session(init_options=tiny_options(Path("model")), env=env(), cwd=project)
        try:
            assert s.wait_state("ready", "error")["state"] == "ready"
            pids.append(served_by(s))
        finally:
            s.stop()
    assert pids[0] == pids[1]


def test_edited_modules_make_a_new_key(tmp_path):
    (tmp_path / "a.py").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("")
    before = rendezvous.source_stamp(tmp_path)
    os.utime(tmp_path / "sub" / "b.py", ns=(before + 10**9, before + 10**9))
    assert rendezvous.source_stamp(tmp_path) == before + 10**9


def test_sigterm_ends_the_host_at_once_even_in_a_session(hosts, tiny_model_dir):
    env, served_by, folder = hosts
    s = session(env(), tiny_model_dir)
    try:
        host = served_by(s)
        assert completion(s)
        os.kill(host, signal.SIGTERM)
        assert wait_gone(host, timeout=5), "the host did not leave on SIGTERM"
        assert list(folder.iterdir()) == []
        assert s.server.proc.wait(10) is not None  # its relay left with it
    finally:
        s.server.kill()


def test_the_relay_imports_nothing_heavy():
    """The editor's process starts in milliseconds: the relay is the standard library's."""
    code = (
        "import sys\n"
        "from memosight_lsp.cli import lsp_main\n"
        "import memosight_lsp.host_process.relay\n"
        "heavy = ('torch', 'transformers', 'pygls', 'lsprotocol', 'numpy',\n"
        "         'memosight_lsp.server')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m.startswith(heavy)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


async def test_an_asyncio_client_sees_its_server_end_after_exit(hosts, tiny_model_dir):
    """pytest-lsp's client, as asyncio's subprocesses do, waits for the server's stdout and
    stderr to close: the host must let go of the relay's stderr when the session ends. Right
    after `initialized` (a handler still waiting for workspace/configuration at shutdown)."""
    env, _, _ = hosts
    pids = []
    for _ in range(2):
        client = await lsp_session.start("neovim", tiny_options(tiny_model_dir), env=env())
        pids.append((await lsp_session.stats(client))["pid"])
        await asyncio.wait_for(lsp_session.stop(client), 20)
    assert pids[0] == pids[1]
    os.kill(pids[0], signal.SIGTERM)


def frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def test_the_relay_passes_frames_whole_and_takes_the_exit_code():
    body = "é" * 50_000  # a frame far larger than a chunk
    stream = frame({"jsonrpc": "2.0", "method": "window/logMessage", "params": {"m": body}})
    stream += frame({"jsonrpc": "2.0", "id": 1, "result": None}) + b"MemoSight-Exit: 0\r\n\r\n"
    downstream = Downstream()
    out = b"".join(downstream.feed(stream[i : i + 1000]) for i in range(0, len(stream), 1000))
    assert out == stream[: stream.index(b"MemoSight-Exit")]
    assert downstream.exit_code == 0
    unframed = Downstream()
    assert unframed.feed(b"x" * 5000) + unframed.feed(b"more") == b"x" * 5000 + b"more"
    assert unframed.exit_code is None
