"""`memosight complete --root`: the completion's prompt holds definitions from other files."""

from __future__ import annotations

import json
from pathlib import Path

from memosight_lsp.cli import main


def test_complete_with_root_ranks_the_other_files_definition(
    tmp_path: Path, capsys, tiny_model_dir: Path
) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "a.py").write_text(
        'def compute_total(prices, tax_rate):\n    """Sum and tax."""\n'
        "    return sum(prices) * (1 + tax_rate)\n"
    )
    b = root / "b.py"
    b.write_text(
        "from a import compute_total\n\n\ndef checkout(cart):\n    return compute_total(\n"
    )
    position = ["--line", "4", "--character", "25"]
    model = ["--model", str(tiny_model_dir), "--max-new-tokens", "4", "--json"]
    cache = ["--cache-dir", str(tmp_path / "cache")]

    assert main(["complete", str(b), *position, *model]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert "# file: a.py" not in alone["prompt"]
    assert "def compute_total" not in alone["prompt"]

    assert main(["complete", str(b), *position, *model, "--root", str(root), *cache]) == 0
    ranked = json.loads(capsys.readouterr().out)
    assert "# file: a.py\ndef compute_total(prices, tax_rate):" in ranked["prompt"]
    assert ranked["prompt_tokens"] > alone["prompt_tokens"]
    assert (tmp_path / "cache" / "index.msgpack").is_file()  # the index was cached

    argv = ["context", str(b), *position, "--root", str(root), *cache, "--json"]
    assert main([*argv, "--model", str(tiny_model_dir)]) == 0
    context = json.loads(capsys.readouterr().out)
    # The definition, as its own chunk or inside a window of similar code (similarSnippets).
    assert any(
        s["path"] == "a.py"
        and (
            (s["symbol"] == "compute_total" and s["kind"] in ("full", "signature"))
            or (s["kind"] == "window" and s["startLine"] == 0)
        )
        for s in context["snippets"]
    )
    # Both commands pack the same context for the same budget.
    assert context["prefix"] in ranked["prompt"]

    assert main(["complete", str(b), *position, *model, "--root", str(tmp_path / "nope")]) == 2
    assert "no such folder" in capsys.readouterr().err
