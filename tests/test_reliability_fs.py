"""The file system changing under the real server: files deleted, renamed and replaced (by
folders, FIFOs, symlinks) while it indexes, symlink loops, a `git checkout` of 5,000 files under
the watcher, and a client that disappears without `shutdown`."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from lsp_session import Session
from watchdog.events import FileCreatedEvent, FileDeletedEvent, FileModifiedEvent

from memosight_lsp.workspace import WorkspaceIndex
from memosight_lsp.workspace.files import iter_source_files
from memosight_lsp.workspace.watcher import BURST, Watcher
from tools.reliability.procs import children_of

pytestmark = pytest.mark.slow

NO_MODEL = {"model": {"path": "/nonexistent/model"}}  # these tests need the index, not a model


def on_disk(root: Path) -> int:
    return sum(1 for _ in iter_source_files(root))


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp~")
    tmp.write_text(text)
    os.replace(tmp, path)  # as editors save


def churn(root: Path, outside: Path, seconds: float, seed: int) -> int:
    """Delete, rename and replace files (by other text, folders, FIFOs, symlinks) for a while."""
    rng = random.Random(seed)
    deadline = time.monotonic() + seconds
    done = 0
    while time.monotonic() < deadline:
        files = sorted(root.rglob("*.py"))
        if not files:
            break
        victim = rng.choice(files)
        action = rng.choices(range(8), weights=[4, 4, 4, 2, 2, 2, 4, 1])[0]
        try:
            if action == 0:
                victim.unlink()
            elif action == 1:
                victim.rename(root / f"pkg{rng.randrange(10)}" / f"moved_{done}.py")
            elif action == 2:
                write(victim, f"def replaced_{done}():\n    return {done}\n")
            elif action == 3:
                victim.unlink()
                victim.mkdir()  # a folder where a file was
                (victim / "inner.py").write_text(f"def inner_{done}():\n    pass\n")
            elif action == 4:
                victim.unlink()
                os.mkfifo(victim)  # a reader that opened it would block forever
            elif action == 5:
                victim.unlink()
                victim.symlink_to(outside)
            elif action == 6:
                write(root / f"fresh{rng.randrange(3)}" / f"new_{done}.py", "x = 1\n")
            elif (fresh := root / f"fresh{rng.randrange(3)}").is_dir():
                shutil.rmtree(fresh)  # a folder deleted and made again at once
                write(fresh / f"again_{done}.py", "y = 2\n")
            else:
                pkg = root / f"pkg{rng.randrange(10)}"
                pkg.rename(root / f"moved{done}")  # a whole folder moved
        except OSError:
            pass
        done += 1
        time.sleep(0.002)
    return done


@pytest.fixture(scope="module")
def churned(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fs-faults")
    outside = tmp / "outside" / "secret.py"
    write(outside, "def outside_secret():\n    return 'SECRET'\n")
    churn_ws = tmp / "churn"
    for i in range(1500):
        write(churn_ws / f"pkg{i % 10}" / f"mod{i}.py", f"def function_{i}():\n    return {i}\n")
    loops = tmp / "loops"
    write(loops / "a.py", "def a():\n    pass\n")
    write(loops / "sub" / "b.py", "def b():\n    pass\n")
    (loops / "loop").symlink_to(".")
    (loops / "sub" / "up").symlink_to("..")
    (loops / "self").symlink_to("self")  # a loop that resolves to nothing
    (loops / "root").symlink_to("/")
    (loops / "sub" / "out.py").symlink_to(outside)
    os.mkfifo(loops / "fifo.py")
    os.mkfifo(loops / "sub" / ".gitignore")  # read by the scan: must not block it
    session = Session([churn_ws, loops], NO_MODEL, env={"XDG_CACHE_HOME": str(tmp / "cache")})
    worker = threading.Thread(target=churn, args=(churn_ws, outside, 4.0, 0))
    worker.start()  # the scan started at `initialized`: churn while it runs and after
    worker.join()
    yield session, churn_ws, loops
    session.stop()


def test_files_changed_while_indexing_end_up_as_on_disk(churned):
    session, churn_ws, _ = churned
    root = str(churn_ws.resolve())
    session.wait_until(
        lambda: session.index_files().get(root) == on_disk(churn_ws),
        timeout=60,
        what="the index to match the disk",
    )
    assert not session.server.log_lines("Traceback")


def test_symlink_loops_fifos_and_links_out_are_skipped_and_the_watcher_still_works(churned):
    session, _, loops = churned
    root = str(loops.resolve())
    session.wait_until(lambda: session.index_files().get(root) == 2, what="a.py and sub/b.py")
    write(loops / "sub" / "c.py", "def c():\n    pass\n")
    session.wait_until(lambda: session.index_files().get(root) == 3, what="the new file indexed")
    assert session.stats()["state"] in ("error", "loading")  # answering (no model here)


@pytest.fixture
def memory_tmp(tmp_path):
    """A scratch folder in memory (/dev/shm) where there is one: git writing 10,000 files to a
    busy shared disk can take 20 s of I/O wait; inotify works the same on tmpfs."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="memosight-test-", dir=shm))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_git_checkout_of_5000_files_under_the_watcher(tiny_model_dir, memory_tmp, tmp_path):
    if shutil.which("git") is None:
        pytest.skip("no git")
    repo = memory_tmp / "repo"
    repo.mkdir()

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("config", "user.email", "t@example.invalid")
    git("config", "user.name", "t")
    for i in range(5000):
        write(repo / f"pkg{i % 50}" / f"mod{i}.py", f"def old_function_{i}(x):\n    return x\n")
    git("add", "-A")
    git("commit", "-q", "-m", "old")
    git("checkout", "-q", "-b", "other")
    for i in range(5000):
        path = repo / f"pkg{i % 50}" / f"mod{i}.py"
        if i % 10 == 3:
            path.unlink()  # 500 deleted
        else:
            path.write_text(f"def new_function_{i}(x):\n    return x + 1\n")
    for i in range(700):
        write(repo / f"added{i % 5}" / f"extra{i}.py", f"def extra_{i}():\n    pass\n")
    git("add", "-A")
    git("commit", "-q", "-m", "new")
    git("checkout", "-q", "main")
    options = {"model": {"path": str(tiny_model_dir)}}
    session = Session([repo], options, env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    try:
        root = str(repo.resolve())
        session.wait_until(lambda: session.index_files().get(root) == 5000, timeout=120)
        session.wait_state("ready")
        # The server stopped while git runs (a starved or suspended process): the kernel's
        # inotify queue overflows and events are lost, as under a slow watcher.
        os.kill(session.server.pid, signal.SIGSTOP)
        try:  # to and fro, then to: 4,500 files rewritten, 500 deleted, 700 added, 3 times over
            for branch in ("other", "main", "other"):
                git("checkout", "-q", branch)
        finally:
            os.kill(session.server.pid, signal.SIGCONT)
        session.wait_until(lambda: session.index_files().get(root) == 5200, timeout=120)
        text = "from pkg7.mod7 import new_function_7\nfrom pkg8.mod8 import old_function_8\n\n"

        def prompt(call: str) -> str:
            """The prompt at the end of `call`: the definitions it shows come from the index, as
            their own chunks or inside windows of similar code."""
            uri = session.open(repo / "use.py", text + call)
            shown = session.context(uri, 3, len(call))["prompt"]
            session.close(uri)
            return shown

        session.wait_until(
            lambda: "def new_function_7(" in prompt("new_function_7("), what="the new definitions"
        )
        session.wait_until(
            lambda: "def old_function_8(" not in prompt("old_function_8("), what="old ones gone"
        )
        assert "def extra_699(" in prompt("extra_699(")
    finally:
        session.stop()


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return True
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True  # exited, waiting to be reaped by its parent (us)
        except OSError:
            return True
        time.sleep(0.1)
    return False


def test_a_client_that_disappears_leaves_no_process_behind(tiny_model_dir, tmp_path):
    # Two clients: one closes the pipes mid-request, the other dies while the pipes stay open.
    editor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    options = {"model": {"path": str(tiny_model_dir)}}
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    with ThreadPoolExecutor(2) as pool:  # both start at once
        starting = pool.submit(Session, [tmp_path], options, env=env)
        orphaned = Session([tmp_path], NO_MODEL, env=env, process_id=editor.pid)
        closing = starting.result()
    try:
        closing.wait_state("ready")
        for session in (closing, orphaned):
            uri = session.open(tmp_path / "a.py", "def f(x):\n    return x\n\n\ndef g(y):\n    ")
            session.server.send(
                {
                    "jsonrpc": "2.0",
                    "id": "in-flight",
                    "method": "textDocument/inlineCompletion",
                    "params": {
                        "textDocument": {"uri": uri},
                        "position": {"line": 5, "character": 4},
                        "context": {"triggerKind": 1},
                    },
                }
            )
            assert children_of(session.server.pid) == []
        closing.server.close_stdin()
        assert wait_gone(closing.server.pid, 10), "still running after its stdin closed"
        editor.kill()
        editor.wait()
        assert wait_gone(orphaned.server.pid, 10), "still running after its editor died"
        assert closing.server.proc.wait(5) == 1  # left without shutdown
        assert orphaned.server.proc.wait(5) == 1
        assert closing.server.log_lines("the client closed the connection without shutdown")
        assert orphaned.server.log_lines(f"the editor (process {editor.pid}) is gone")
    finally:
        editor.kill()
        closing.server.kill()
        orphaned.server.kill()


def test_watcher_batches_are_applied_in_the_order_they_came(tmp_path):
    # A long flush (a checkout's worth of changes) and the next batch used to run side by side:
    # a file deleted in the first and made again in the second ended up dropped.
    root = tmp_path / "ws"
    files = [root / "a" / f"f{i}.py" for i in range(BURST - 100)]  # under a burst: no re-scan
    body = "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(100))
    for path in files:
        write(path, body)
    last = root / "zz.py"  # sorted after everything else: the first batch reaches it last
    write(last, "def z():\n    pass\n")
    index = WorkspaceIndex(root, use_cache=False)
    index.scan()
    watcher = Watcher(index.root, index, debounce_s=60)  # no timer fires by itself during the test
    try:
        for path in files:
            path.write_text(body + "y = 2\n")
            watcher.on_any_event(FileModifiedEvent(str(path)))
        last.unlink()
        watcher.on_any_event(FileDeletedEvent(str(last)))
        first = threading.Thread(target=watcher.flush)
        first.start()
        time.sleep(0.05)  # the first batch is busy with its files
        write(last, "def z():\n    return 1\n")
        watcher.on_any_event(FileCreatedEvent(str(last)))
        watcher.flush()
        first.join()
        assert "zz.py" in index.files()
        assert len(index) == len(files) + 1
    finally:
        watcher.stop()
