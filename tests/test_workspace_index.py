"""The workspace index on real files: scanning, skipping, single-file updates, the msgpack cache."""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path

import msgpack
import pytest

from memosight_lsp.workspace import WorkspaceIndex, language_for, parse_source
from memosight_lsp.workspace import cache as index_cache


def write(root: Path, rel: str, text: str | bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    write(root, "pkg/__init__.py", "from .models import Widget\n")
    write(root, "pkg/models.py", "class Widget:\n    def grow(self):\n        return 1\n")
    write(root, "pkg/util.py", "def helper(x):\n    return x\n")
    write(root, "web/app.ts", "export function start(): void {}\n")
    write(root, "README.md", "# not code\n")
    return root


def test_scan_finds_definitions(project: Path, tmp_path: Path) -> None:
    index = WorkspaceIndex(project, cache_dir=tmp_path / "cache")
    stats = index.scan()
    assert index.files() == ["pkg/__init__.py", "pkg/models.py", "pkg/util.py", "web/app.ts"]
    assert (stats.files, stats.parsed, stats.reused) == (4, 4, 0)
    assert [(rel, d.kind) for rel, d in index.definitions("Widget")] == [("pkg/models.py", "class")]
    assert index.definitions("start")[0][0] == "web/app.ts"


def test_skips_ignored_vendored_binary_and_huge(project: Path) -> None:
    write(project, ".gitignore", "generated/\n*.gen.py\n")
    write(project, "generated/out.py", "def gen(): pass\n")
    write(project, "pkg/x.gen.py", "def gen2(): pass\n")
    write(project, "pkg/sub/.gitignore", "secret.py\n")
    write(project, "pkg/sub/secret.py", "def hidden(): pass\n")
    write(project, "pkg/sub/visible.py", "def shown(): pass\n")
    write(project, "node_modules/lib/index.js", "function vendored() {}\n")
    write(project, ".venv/lib/site.py", "def venv(): pass\n")
    write(project, "build/lib/copy.py", "def built(): pass\n")
    write(project, "pkg/blob.py", b"def x(): pass\n\0\0binary")
    write(project, "pkg/huge.py", "X = 1\n" * 200_000)  # 1.2 MB
    index = WorkspaceIndex(project, use_cache=False)
    index.scan()
    files = index.files()
    assert "pkg/sub/visible.py" in files
    for skipped in (
        "generated/out.py",
        "pkg/x.gen.py",
        "pkg/sub/secret.py",
        "node_modules/lib/index.js",
        ".venv/lib/site.py",
        "build/lib/copy.py",
        "pkg/blob.py",
        "pkg/huge.py",
    ):
        assert skipped not in files
    # The same rules apply to single-file updates (watcher events).
    assert index.update_file(project / "pkg/sub/secret.py") is None
    assert index.update_file(project / "node_modules/lib/index.js") is None
    assert index.update_file(project / "pkg/sub/visible.py") is not None


def test_update_and_remove_one_file(project: Path) -> None:
    index = WorkspaceIndex(project, use_cache=False)
    index.scan()
    write(project, "pkg/util.py", "def renamed(x):\n    return x\n")
    index.update_file(project / "pkg/util.py")
    assert index.definitions("helper") == []
    assert index.definitions("renamed")[0][0] == "pkg/util.py"
    write(project, "pkg/new.py", "def fresh(): pass\n")
    index.update_file(str(project / "pkg/new.py"))
    assert index.definitions("fresh")
    index.remove_file(project / "pkg/new.py")
    assert index.definitions("fresh") == []
    assert "pkg/new.py" not in index.files()


def test_cache_round_trip_reuses_entries(project: Path, tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    first = WorkspaceIndex(project, cache_dir=cache_dir)
    first.scan()
    assert (cache_dir / "index.msgpack").is_file()
    write(project, "pkg/util.py", "def helper2(x):\n    return x\n")
    second = WorkspaceIndex(project, cache_dir=cache_dir)
    stats = second.scan()
    assert (stats.parsed, stats.reused) == (1, 3)
    assert second.definitions("helper2") and not second.definitions("helper")
    # Same content, new mtime: the content hash spares the parse.
    os.utime(project / "pkg/models.py", ns=(1, 1))
    third = WorkspaceIndex(project, cache_dir=cache_dir)
    assert third.scan().parsed == 0
    assert third.symbols("pkg/models.py").mtime_ns == 1
    assert third.symbols("pkg/models.py").definitions == second.symbols("pkg/models.py").definitions


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\x01garbage that is not msgpack",
        msgpack.packb({"schema": 999, "root": "/", "files": {}}),
        msgpack.packb({"schema": index_cache.SCHEMA_VERSION, "root": "/elsewhere", "files": {}}),
        msgpack.packb({"schema": index_cache.SCHEMA_VERSION, "root": None, "files": [1, 2]}),
        msgpack.packb({"schema": 999, "files": {"a.py": 1}, "root": "/"}),
    ],
    ids=["garbage", "foreign-schema", "other-root", "malformed", "files-first"],
)
def test_bad_cache_is_rebuilt_with_a_log_line(
    project: Path, tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    (cache_dir / "index.msgpack").write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="memosight_lsp.workspace.cache"):
        stats = WorkspaceIndex(project, cache_dir=cache_dir).scan()
    assert stats.parsed == 4
    assert "rebuilding" in caplog.text
    # ... and the rebuilt cache is good again.
    assert WorkspaceIndex(project, cache_dir=cache_dir).scan().parsed == 0


def test_a_cache_with_data_after_its_files_is_corrupt(
    project: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache_dir = tmp_path / "cache"
    WorkspaceIndex(project, cache_dir=cache_dir).scan()
    cache_file = cache_dir / "index.msgpack"
    assert len(index_cache.load(cache_file, project)) == 4  # read entry by entry
    cache_file.write_bytes(cache_file.read_bytes() + b"\x01")
    with caplog.at_level(logging.WARNING, logger="memosight_lsp.workspace.cache"):
        assert index_cache.load(cache_file, project) == {}
    assert "is corrupt" in caplog.text


def test_corrupt_entry_inside_a_valid_cache(project: Path, tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    WorkspaceIndex(project, cache_dir=cache_dir).scan()
    data = msgpack.unpackb((cache_dir / "index.msgpack").read_bytes())
    data["files"]["pkg/util.py"] = ["python", "x"]  # truncated row
    (cache_dir / "index.msgpack").write_bytes(msgpack.packb(data))
    assert WorkspaceIndex(project, cache_dir=cache_dir).scan().parsed == 4


def test_default_cache_dir_follows_xdg(project: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    index = WorkspaceIndex(project)
    index.scan()
    assert index.cache_file is not None
    assert index.cache_file.is_relative_to(tmp_path / "xdg" / "memosight")
    assert index.cache_file.is_file()
    # No temp files left behind by the atomic write.
    assert [p.name for p in index.cache_file.parent.iterdir()] == ["index.msgpack"]


def test_progress_callback(project: Path) -> None:
    seen: list[tuple[int, int]] = []
    WorkspaceIndex(project, use_cache=False).scan(on_progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (4, 4) and [d for d, _ in seen] == [1, 2, 3, 4]


def test_text_follows_disk_changes(project: Path) -> None:
    index = WorkspaceIndex(project, use_cache=False)
    index.scan()
    assert index.text("pkg/util.py").startswith("def helper")
    write(project, "pkg/util.py", "\n\ndef helper(x):\n    return x\n")
    assert index.text("pkg/util.py").startswith("\n\ndef helper")
    # Reading the changed text re-indexed it, so ranges match the text.
    assert index.definitions("helper")[0][1].start_line == 2


def test_texts_ahead_of_the_index_are_parsed_once(project: Path) -> None:
    index = WorkspaceIndex(project, use_cache=False)
    index.scan()
    text = "def ahead():\n    pass\n"  # matches neither the file nor a buffer
    first = index.symbols_for_text("pkg/util.py", text)
    assert first is not None and [d.name for d in first.definitions] == ["ahead"]
    assert index.symbols_for_text("pkg/util.py", text) is first
    other = index.symbols_for_text("pkg/other.py", text)
    assert other is not None and other.path == "pkg/other.py"


def test_outline_lookups_are_derived_data(project: Path) -> None:
    source = b"class A:\n    def f(self): pass\n    def g(self): pass\n\ndef f(): pass\n"
    spec = language_for("m.py")
    assert spec is not None
    outline = parse_source(spec, "m.py", source)
    assert [d.name for d in outline.definitions] == ["A", "f", "g", "f"]
    assert list(outline.indices_named("f")) == [1, 3] and outline.indices_named("h") == ()
    assert [d.name for d in outline.members(0)] == ["f", "g"] and outline.members(3) == ()
    # Built on first use, they change neither equality, repr nor the cached form.
    fresh = parse_source(spec, "m.py", source)
    assert outline == fresh and repr(outline) == repr(fresh)
    assert outline.to_wire() == fresh.to_wire()
    moved = replace(outline, mtime_ns=5)
    assert list(moved.indices_named("f")) == [1, 3]
