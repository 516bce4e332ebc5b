"""The recall benchmark's own machinery, on a two-file project."""

from __future__ import annotations

import json
from pathlib import Path

from memosight_lsp.bench import context_recall


def test_recall_bench_finds_cases_and_scores_them(tmp_path: Path, capsys) -> None:
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "util.py").write_text("def frobnicate(value):\n    return value * 2\n")
    (root / "pkg" / "app.py").write_text(
        "from .util import frobnicate\n\n\ndef main(x):\n    y = x.get(1)\n"
        "    return frobnicate(y)\n"
    )
    cases = context_recall.find_cases(root)
    # `x.get` is no case: `x` is no imported module.
    assert [(c.rel, c.line, c.name, c.targets) for c in cases] == [
        ("pkg/app.py", 5, "frobnicate", ("pkg/util.py",))
    ]
    assert context_recall.recalled("# file: pkg/util.py\ndef frobnicate(value): ...\n", cases[0])
    assert not context_recall.recalled("# file: pkg/app.py\ndef frobnicate(v): ...\n", cases[0])
    assert context_recall.named("# also in pkg/util.py: frobnicate, b\n", cases[0])
    assert not context_recall.named("frobnicated = frobnicate_all()\n", cases[0])
    assert context_recall.main([str(root), "--budgets", "64", "256"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["cases"] == 1
    assert result["recall"]["ranked"]["256"] == 1.0
    assert result["recall"]["currentFile"]["256"] == 0.0
    assert result["recall"]["rankedNamesIt"]["256"] == 1.0  # the import line names it
