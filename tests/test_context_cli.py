"""`memosight index` and `memosight context`, run in-process through the real CLI parser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memosight_lsp.cli import main


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "util.py").write_text(
        'def frobnicate(value):\n    """Frob."""\n    return value * 2\n'
    )
    (root / "pkg" / "app.py").write_text(
        "from .util import frobnicate\n\n\ndef main():\n    s = '😀'; x = frobnicate(1)\n"
    )
    return root


def test_index_prints_a_summary(project: Path, tmp_path: Path, capsys) -> None:
    assert main(["index", str(project), "--cache-dir", str(tmp_path / "c"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["files"], summary["parsed"], summary["definitions"]) == (2, 2, 2)
    assert main(["index", str(project), "--cache-dir", str(tmp_path / "c")]) == 0
    assert "2 files (0 parsed, 2 from cache)" in capsys.readouterr().out
    assert main(["index", str(tmp_path / "missing")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_context_json(project: Path, tmp_path: Path, capsys, tiny_model_dir: Path) -> None:
    # UTF-16 character 12 is just after the closing quote (the emoji takes two units): index 11.
    argv = ["context", str(project / "pkg" / "app.py"), "--line", "4", "--character", "12"]
    argv += ["--root", str(project), "--no-cache", "--budget", "700", "--json"]
    assert main([*argv, "--model", str(tiny_model_dir)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["prefix"].endswith("    s = '😀'")
    assert data["suffix"].startswith("; x = frobnicate(1)")
    assert 0 < data["promptTokens"] <= 700
    # Other files' code takes at most context.crossFileShare (35%) of the 700 tokens, leaving
    # the file its first 512: the definition the cursor calls, as its own chunk or inside a
    # window of similar code.
    util = [s for s in data["snippets"] if s["path"] == "pkg/util.py"]
    assert any(
        (s["kind"], s["symbol"]) == ("signature", "frobnicate")
        or (s["kind"] == "window" and s["startLine"] == 0)  # frobnicate is on line 0
        for s in util
    ), util
    assert sum(s["tokens"] for s in data["snippets"] if s["path"] == "pkg/util.py") <= 188
    assert set(data["snippets"][0]) == {
        "path",
        "startLine",
        "endLine",
        "symbol",
        "kind",
        "tokens",
        "score",
    }
    assert data["prefix"] in data["prompt"]


def test_context_bad_input(project: Path, capsys) -> None:
    file = str(project / "pkg" / "app.py")
    assert main(["context", file, "--line", "99", "--character", "0", "--no-cache"]) == 2
    assert "outside the file" in capsys.readouterr().err
    assert main(["context", str(project / "nope.py"), "--line", "0", "--character", "0"]) == 2
    assert "no such file" in capsys.readouterr().err
