"""`memosight train long-context`: long documents from whole folders, positions opened up, a real
(tiny) training run through the CLI, loss per position bucket."""

from __future__ import annotations

import importlib.util
import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
from tiny_models import STDLIB

from memosight_lsp.cli import main as cli_main
from memosight_lsp.inference.fim import QWEN
from memosight_lsp.inference.loading import load_model
from memosight_lsp.training.corpus import SourceFile
from memosight_lsp.training.fim_data import FimSettings
from memosight_lsp.training.long_context import (
    check_corpus_roots,
    folder_groups,
    long_document,
    loss_by_position,
)
from memosight_lsp.training.tokenizer_training import END_OF_TEXT

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def source(relpath: str, text: str) -> SourceFile:
    return SourceFile(path=Path("/nowhere") / relpath, relpath=relpath, text=text)


def test_folder_groups_keep_a_folder_together_in_name_order():
    files = [
        source("pkg/b.py", "b" * 40),
        source("other/x.py", "x" * 10),
        source("pkg/a.py", "a" * 40),
        source("pkg/c.py", "c" * 40),
        source("pkg/huge.py", "h" * 500),
    ]
    groups = [[f.relpath for f in g] for g in folder_groups(files, group_chars=100)]
    # Runs of about 100 characters per folder; a longer file stays whole, alone.
    assert groups == [["other/x.py"], ["pkg/a.py", "pkg/b.py"], ["pkg/c.py"], ["pkg/huge.py"]]


def test_long_document_lays_files_out_under_their_markers():
    group = [source("pkg/a.py", "A = 1\n"), source("pkg/b.py", "def f():\n    return A\n")]
    plain = long_document(group, QWEN, random.Random(0), FimSettings(fim_rate=0.0))
    assert plain == "# file: pkg/a.py\nA = 1\n# file: pkg/b.py\ndef f():\n    return A\n" + (
        END_OF_TEXT
    )
    fim = long_document(group, QWEN, random.Random(3), FimSettings(fim_rate=1.0))
    assert fim.startswith(QWEN.prefix_token + "# file: pkg/a.py\nA = 1\n# file: pkg/b.py\n")
    assert fim.endswith(END_OF_TEXT)
    # The middle comes from the last file: prefix + middle + suffix give that file back.
    body = fim[len(QWEN.prefix_token) : -len(END_OF_TEXT)]
    prefix, rest = body.split(QWEN.suffix_token)
    suffix, middle = rest.split(QWEN.middle_token)
    last = prefix.split("# file: pkg/b.py\n", 1)[1]
    assert last + middle + suffix == "def f():\n    return A\n"


def test_installed_packages_and_missing_folders_are_refused(tmp_path):
    spec = importlib.util.find_spec("pygls")
    assert spec is not None and spec.origin is not None
    installed = Path(spec.origin).parent
    with pytest.raises(ValueError, match="evaluation data"):
        check_corpus_roots([str(installed)])
    with pytest.raises(ValueError, match="not found"):
        check_corpus_roots([str(tmp_path / "nope")])
    check_corpus_roots([str(tmp_path)])  # an ordinary folder is fine


def test_loss_by_position_reports_each_bucket_inside_the_window(tiny_model_dir):
    loaded = load_model(tiny_model_dir)
    ids = loaded.tokenizer.encode((STDLIB / "argparse.py").read_text())
    data = np.asarray(ids, dtype=np.uint16)
    first = loss_by_position(loaded.model, data, seq_len=600, windows=2)
    assert list(first) == ["0-512", "512-1024"]
    assert all(value > 0 for value in first.values())
    assert loss_by_position(loaded.model, data, seq_len=600, windows=2) == first  # same windows
    assert not loaded.model.training


def corpus_folder(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    folders = {"text": ("textwrap.py", "string.py"), "paths": ("glob.py", "shlex.py")}
    for folder, names in folders.items():
        (root / folder).mkdir(parents=True)
        for name in names:
            shutil.copy(STDLIB / name, root / folder / name)
    shutil.copy(STDLIB / "argparse.py", root / "argparse.py")
    return root


@pytest.mark.slow
def test_cli_trains_opens_positions_and_resumes(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "long-context", "--model", str(tiny_model_dir)]
    argv += ["--corpus", str(corpus_folder(tmp_path)), "--out", str(out)]
    argv += ["--seq-len", "2560", "--threads", "1"]
    assert cli_main([*argv, "--minutes", "0.05"]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    report = json.loads((out / "final" / "positions.json").read_text())
    assert set(report["before"]) == set(report["after"]) == {
        "0-512", "512-1024", "1024-2048", "2048-4096"
    }  # fmt: skip
    loaded = load_model(out / "final")  # loads through the real loading code
    assert loaded.model.config.max_position_embeddings == 2560  # was 2048
    steps = json.loads((out / "final" / "training.json").read_text())["state"]["step"]
    assert steps >= 1
    assert cli_main([*argv, "--minutes", "0.1", "--resume"]) == 0
    resumed = json.loads((out / "final" / "training.json").read_text())["state"]["step"]
    assert resumed > steps
    assert json.loads((out / "final" / "positions.json").read_text())["before"] == report["before"]


def test_cli_refuses_learned_positions_and_bad_arguments(tiny_model_dirs, tmp_path, capsys):
    corpus = corpus_folder(tmp_path)
    argv = ["train", "long-context", "--corpus", str(corpus), "--out", str(tmp_path / "run")]
    gpt2 = ["--model", str(tiny_model_dirs["gpt2"]), "--seq-len", "4096", "--minutes", "0.01"]
    assert cli_main([*argv, *gpt2]) == 2
    assert "learned up to 2048" in capsys.readouterr().err
    assert not (tmp_path / "run" / "data").exists()  # refused before any tokenizing
    assert cli_main([*argv, "--seq-len", "4", "--minutes", "0.01"]) == 2
    assert "--seq-len" in capsys.readouterr().err
    missing = ["--model", str(tmp_path / "nope"), "--minutes", "0.01"]
    assert cli_main([*argv, *missing]) == 2
    assert "not found" in capsys.readouterr().err
