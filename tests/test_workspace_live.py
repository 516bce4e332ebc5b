"""Import resolution across files, incremental buffers, and the file watcher."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from memosight_lsp.workspace import Buffer, Import, TextEdit, WorkspaceIndex, language_for
from memosight_lsp.workspace.events import FileEvent
from memosight_lsp.workspace.watcher import Watcher


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def resolved(index: WorkspaceIndex, rel: str, language: str, imp: Import) -> list:
    return list(index.resolve_import(rel, language, imp))


def test_import_resolution_per_language(tmp_path: Path) -> None:
    files = {
        "src/pkg/__init__.py": "",
        "src/pkg/models.py": "class Widget: pass\n",
        "src/pkg/sub/__init__.py": "",
        "src/pkg/sub/deep.py": "def deep(): pass\n",
        "web/src/util.ts": "export function foo() {}\n",
        "web/src/lib/index.ts": "export const X = 1;\n",
        "web/src/main.ts": "",
        "go/mathx/add.go": "package mathx\nfunc Add() {}\n",
        "go/main.go": "package main\n",
        "rs/src/lib.rs": "mod util;\n",
        "rs/src/util.rs": "pub fn helper() {}\n",
        "rs/src/util/inner.rs": "pub fn inner() {}\n",
        "java/com/x/util/Helper.java": "package com.x.util;\nclass Helper {}\n",
        "java/com/x/A.java": "package com.x;\n",
        "c/include/util.h": "int util(void);\n",
        "c/src/main.c": "",
    }
    for rel, text in files.items():
        write(tmp_path, rel, text)
    index = WorkspaceIndex(tmp_path, use_cache=False)
    index.scan()
    py = "src/pkg/sub/deep.py"
    assert resolved(index, py, "python", Import("..models", "Widget", "Widget", 0)) == [
        ("src/pkg/models.py", "Widget")
    ]
    assert resolved(index, py, "python", Import("pkg.models", "Widget", "Widget", 0)) == [
        ("src/pkg/models.py", "Widget")
    ]
    assert resolved(index, py, "python", Import("pkg", "models", "models", 0)) == [
        ("src/pkg/models.py", None)
    ]
    assert resolved(index, py, "python", Import("pkg.sub", None, "pkg", 0)) == [
        ("src/pkg/sub/__init__.py", None)
    ]
    assert resolved(index, py, "python", Import("requests", "get", "get", 0)) == []
    ts = "web/src/main.ts"
    assert resolved(index, ts, "typescript", Import("./util", "foo", "foo", 0)) == [
        ("web/src/util.ts", "foo")
    ]
    assert resolved(index, ts, "typescript", Import("./util.js", "foo", "foo", 0)) == [
        ("web/src/util.ts", "foo")
    ]
    assert resolved(index, ts, "typescript", Import("./lib", "X", "X", 0)) == [
        ("web/src/lib/index.ts", "X")
    ]
    assert resolved(index, "go/main.go", "go", Import("example.com/m/mathx", None, "mathx", 0)) == [
        ("go/mathx/add.go", None)
    ]
    rs = "rs/src/lib.rs"
    assert resolved(index, rs, "rust", Import("crate::util", "helper", "helper", 0)) == [
        ("rs/src/util.rs", "helper")
    ]
    assert resolved(index, rs, "rust", Import("crate::util", "inner", "inner", 0)) == [
        ("rs/src/util/inner.rs", None)
    ]
    assert resolved(
        index, "java/com/x/A.java", "java", Import("com.x.util", "Helper", "Helper", 0)
    ) == [("java/com/x/util/Helper.java", "Helper")]
    assert resolved(index, "c/src/main.c", "c", Import("util.h", "*", None, 0)) == [
        ("c/include/util.h", "*")
    ]


def random_edit(rng: random.Random, text: str) -> TextEdit:
    lines = text.split("\n")
    a = rng.randrange(len(lines))
    b = min(len(lines) - 1, a + rng.randrange(3))
    ca = rng.randint(0, len(lines[a]))
    cb = rng.randint(0, len(lines[b])) if b > a else rng.randint(ca, len(lines[b]))
    insert = rng.choice(
        ["", "x", "def g(y):\n    return y\n", "ü(", ")", "class Z:\n  pass\n", "é"]
    )
    return TextEdit(a, ca, b, cb, insert)


def apply_to_text(text: str, edit: TextEdit) -> str:
    lines = text.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    start = offsets[edit.start_line] + edit.start_character
    end = offsets[edit.end_line] + edit.end_character
    return text[:start] + edit.text + text[end:]


@pytest.mark.parametrize("path", ["a.py", "a.ts", "a.rs"])
def test_incremental_reparse_equals_full_parse(path: str) -> None:
    spec = language_for(path)
    source = {
        "a.py": "import os\n\ndef f(a):\n    return a  # ü\n\n"
        "class K:\n    def m(self):\n        pass\n",
        "a.ts": "export function f(a: number) { return a; }\nclass K { m() { return 'ü'; } }\n",
        "a.rs": "fn f(a: i32) -> i32 { a }\nstruct S { x: u8 }\nimpl S { fn m(&self) {} }\n",
    }[path]
    rng = random.Random(7)
    buffer = Buffer(spec, source)
    text = source
    for step in range(60):
        edit = random_edit(rng, text)
        text = apply_to_text(text, edit)
        if step % 2:
            buffer.apply([edit])
        else:
            buffer.replace(text)
        assert buffer.text == text
        full = Buffer(spec, text)
        assert str(buffer.tree.root_node) == str(full.tree.root_node), f"step {step}"


def test_open_buffers_override_disk(tmp_path: Path) -> None:
    write(tmp_path, "m.py", "def on_disk(): pass\n")
    index = WorkspaceIndex(tmp_path, use_cache=False)
    index.scan()
    index.update_buffer(tmp_path / "m.py", "def on_disk(): pass\n", language_id="python")
    index.update_buffer((tmp_path / "m.py").as_uri(), edits=[TextEdit(0, 4, 0, 11, "in_buffer")])
    assert index.text("m.py") == "def in_buffer(): pass\n"
    assert index.definitions("in_buffer") and not index.definitions("on_disk")
    index.close_buffer(tmp_path / "m.py")
    assert index.definitions("on_disk") and not index.definitions("in_buffer")
    assert index.update_buffer(tmp_path / "notes.txt", "hello") is None  # unknown language


def test_catch_up_and_revision_count_disk_changes_only(tmp_path: Path) -> None:
    """catch_up compares the disk with the indexed files, not with open buffers (an open file
    is no change), and the revision moves only when what the index serves from disk does."""
    write(tmp_path, "m.py", "def on_disk(): pass\n")
    write(tmp_path, "other.py", "def other(): pass\n")
    index = WorkspaceIndex(tmp_path, use_cache=False)
    index.scan()
    scanned = index.revision
    index.update_buffer(tmp_path / "m.py", "def typed(): pass\n", language_id="python")
    assert index.catch_up() == 0 and index.revision == scanned
    index.update_file("m.py")  # the open file saved: its buffer still shadows it
    assert index.revision == scanned
    write(tmp_path, "added.py", "def added(): pass\n")
    (tmp_path / "other.py").unlink()
    assert index.catch_up() == 2
    assert index.revision == scanned + 2
    assert index.definitions("added") and not index.definitions("other")
    assert index.definitions("typed") and not index.definitions("on_disk")


class Changes:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.seen: list[str] = []

    def __call__(self, rels: list[str]) -> None:
        self.seen.extend(rels)
        self.event.set()

    def wait(self, index: WorkspaceIndex, predicate, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, f"watcher did not catch up: {self.seen}"
            self.event.wait(0.05)
            self.event.clear()


def test_watcher_follows_create_modify_delete_move(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(root, "a.py", "def alpha(): pass\n")
    index = WorkspaceIndex(root, cache_dir=tmp_path / "cache")
    index.scan()
    changes = Changes()
    watcher = Watcher(index.root, index, debounce_s=0.05, on_change=changes)
    watcher.start()
    try:
        write(root, "b.py", "def beta(): pass\n")
        changes.wait(index, lambda: index.definitions("beta"))
        write(root, "b.py", "def beta2(): pass\n")
        changes.wait(index, lambda: index.definitions("beta2") and not index.definitions("beta"))
        (root / "b.py").rename(root / "c.py")
        changes.wait(index, lambda: [r for r, _ in index.definitions("beta2")] == ["c.py"])
        (root / "c.py").unlink()
        changes.wait(index, lambda: not index.definitions("beta2"))
        write(root, "pkg/d.py", "def delta(): pass\n")
        changes.wait(index, lambda: index.definitions("delta"))
        (root / "pkg").rename(root / "moved")
        changes.wait(index, lambda: [r for r, _ in index.definitions("delta")] == ["moved/d.py"])
        write(root, "node_modules/x.js", "function vendored() {}\n")
        write(root, "e.py", "def epsilon(): pass\n")
        changes.wait(index, lambda: index.definitions("epsilon"))
        assert not index.definitions("vendored")
    finally:
        watcher.stop()
        index.save_if_dirty()  # as the watcher's owner does (server/indexes.py)
    # Stopping saves what the watcher learned.
    again = WorkspaceIndex(root, cache_dir=tmp_path / "cache")
    assert again.scan().parsed == 0


def test_index_applies_a_batch_of_file_events(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(root, "a.py", "def alpha(): pass\n")
    write(root, "old/b.py", "def beta(): pass\n")
    index = WorkspaceIndex(root, use_cache=False)
    index.scan()
    (root / "a.py").unlink()
    (root / "old" / "b.py").unlink()
    write(root, "new/c.py", "def gamma(): pass\n")
    write(root, "new/node_modules/v.js", "function vendored() {}\n")
    write(root, "d.py", "def delta(): pass\n")
    events = {
        str(root / "a.py"): FileEvent.REMOVE,
        str(root / "old"): FileEvent.REMOVE_DIR,
        str(root / "new"): FileEvent.SCAN_DIR,
        str(root / "d.py"): FileEvent.UPDATE,
    }
    assert index.apply_events(events) == ["a.py", "d.py", "new", "old"]
    assert index.files() == ["d.py", "new/c.py"]


def test_watcher_hands_coalesced_events_to_any_sink(tmp_path: Path) -> None:
    """The watcher knows the index only as an EventSink: apply_events (and catch_up, after a
    burst that may have overflowed the kernel's queue)."""

    class Sink:
        def __init__(self) -> None:
            self.batches: list[dict[str, FileEvent]] = []
            self.event = threading.Event()

        def apply_events(self, events: Mapping[str, FileEvent]) -> list[str]:
            self.batches.append(dict(events))
            self.event.set()
            return [Path(p).name for p in events]

        def catch_up(self) -> int:
            raise AssertionError("three events are no burst")

    sink = Sink()
    seen: list[str] = []
    watcher = Watcher(tmp_path, sink, debounce_s=0.2, on_change=seen.extend)
    watcher.start()
    try:
        for n in range(3):  # one path written three times: one event
            write(tmp_path, "a.py", f"x = {n}\n")
        assert sink.event.wait(10)
    finally:
        watcher.stop()
    assert sink.batches[0] == {str(tmp_path / "a.py"): FileEvent.UPDATE}
    assert seen[0] == "a.py"
