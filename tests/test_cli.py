"""The `memosight` command line, run as a user would: a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memosight_lsp.commands.common import cursor_column

SAMPLE = Path(__file__).resolve().parent.parent / "memosight_lsp" / "samples" / "quickstart.py"


def memosight(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "memosight_lsp.cli_main", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_complete_json(tiny_model_dir):
    result = memosight(
        "complete",
        str(SAMPLE),
        "--line",
        "18",
        "--character",
        "8",
        "--model",
        str(tiny_model_dir),
        "--max-new-tokens",
        "8",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    for key in ("text", "new_tokens", "prompt_tokens", "prefill_ms", "decode_ms", "model"):
        assert key in data
    assert 0 < data["new_tokens"] <= 8
    assert data["prompt_tokens"] > 50
    assert data["model"] == Path(tiny_model_dir).name


def test_plain_and_default_paths_print_the_same_text(tiny_model_dir):
    common = [
        "complete",
        str(SAMPLE),
        "--line",
        "9",
        "--character",
        "30",
        "--model",
        str(tiny_model_dir),
        "--max-new-tokens",
        "12",
        "--multiline",
        "always",
    ]
    plain = memosight(*common, "--plain")
    fast = memosight(*common)
    assert plain.returncode == fast.returncode == 0
    assert plain.stdout == fast.stdout


def test_models_json(tiny_model_dir):
    result = memosight("models", "--model", str(tiny_model_dir), "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["fimFormat"] == "qwen" and info["device"] == "cpu"
    assert info["kernels"] == "torch's"  # float32: the native kernels serve half precisions


def test_models_names_the_native_kernels_for_a_quantized_model(tiny_model_dir):
    from memosight_lsp.inference import native_kernels

    result = memosight("models", "--model", str(tiny_model_dir), "--quantization", "int8", "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["precision"].startswith("int8")
    expected = "native (AVX-512 VNNI)" if native_kernels.kernels() is not None else "torch's ("
    assert info["kernels"].startswith(expected)


def test_models_takes_gguf_and_says_it_means_auto_on_a_folder(tiny_model_dir):
    result = memosight("models", "--model", str(tiny_model_dir), "--quantization", "gguf", "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["precision"] == "float32"  # auto's choice for a small model
    assert "quantization gguf applies to GGUF files only" in info["precisionReason"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["complete", "/no/such/file.py", "--line", "0", "--character", "0"], "no such file"),
        (["complete", str(SAMPLE), "--line", "999", "--character", "0"], "outside the file"),
        (
            ["complete", str(SAMPLE), "--line", "1", "--character", "0", "--model", "/no/model"],
            "model folder not found",
        ),
        (["models", "--model", "/no/model"], "model folder not found"),
    ],
)
def test_bad_input_is_one_line_without_traceback(args, message):
    result = memosight(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""


def test_one_cursor_check_for_complete_and_context():
    assert cursor_column('x = "😋" + y\n', 0, 8) == 7  # UTF-16: the emoji takes two units
    assert cursor_column("ab\n", 0, 99) == 2  # clamped to the line
    with pytest.raises(ValueError, match="--line 5 is outside the file"):
        cursor_column("a\n", 5, 0)
    with pytest.raises(ValueError, match="--character must be >= 0"):
        cursor_column("a\n", 0, -1)


@pytest.mark.parametrize(
    "args",
    [
        ["complete", str(SAMPLE), "--line", "1", "--character", "-1"],
        ["context", str(SAMPLE), "--line", "1", "--character", "-1", "--no-cache"],
    ],
)
def test_a_negative_character_is_refused_by_both_commands(args):
    result = memosight(*args)
    assert result.returncode == 2 and "--character must be >= 0" in result.stderr


def test_binary_file_is_refused(tmp_path):
    binary = tmp_path / "blob.py"
    binary.write_bytes(b"\x00\x01\x02" * 100)
    result = memosight("complete", str(binary), "--line", "0", "--character", "0")
    assert result.returncode == 2 and "binary" in result.stderr


@pytest.mark.parametrize("command", ["complete", "models", "train", "bench"])
def test_every_subcommand_has_help(command):
    result = memosight(command, "--help")
    assert result.returncode == 0 and "usage:" in result.stdout


def test_models_list_loads_no_model_code(tmp_path):
    """`memosight models --list` looks and loads nothing: it imports only the modules of the
    subcommand named (not torch nor transformers, which take seconds) and lists what discovery
    finds in a fake home: here an Ollama model whose blob is not a GGUF file."""
    from tests.test_discovery import ollama_model
    from tests.test_server_discovery import discovering_in

    home = tmp_path / "home"
    blob = tmp_path / "not-a-model"
    blob.write_bytes(b"plain text, not GGUF\n" * 10)
    ollama_model(home, "qwen2.5-coder", "0.5b", blob, "b" * 64)
    code = (
        "import sys; from memosight_lsp.cli import main; "
        "code = main(['models', '--list', '--json']); "
        "print('imported:', 'torch' in sys.modules, 'transformers' in sys.modules, "
        "file=sys.stderr); sys.exit(code)"
    )
    env = {**os.environ, **discovering_in(home)}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert result.returncode == 0, result.stderr
    assert "imported: False False" in result.stderr
    listing = json.loads(result.stdout)
    assert listing["choice"] is None
    assert any("qwen2.5-coder:0.5b" in json.dumps(c) for c in listing["candidates"]), listing


def test_models_says_when_the_embedded_fallback_serves(tmp_path):
    """No model named and none found in an empty home: `memosight models` serves the embedded
    model and says so, with the one command that fixes it."""
    from memosight_lsp.discovery.resolve import EMBEDDED_FALLBACK, FETCH_ACTION
    from tests.test_server_discovery import discovering_in

    env = {**os.environ, **discovering_in(tmp_path / "empty-home")}
    result = subprocess.run(
        [sys.executable, "-m", "memosight_lsp.cli_main", "models"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert f"notice:       {EMBEDDED_FALLBACK} (no model found)" in result.stdout
    assert FETCH_ACTION in result.stdout


def test_the_server_starts_without_the_model_modules():
    """The language server imports no torch nor transformers before it answers `initialize`:
    the model host imports them on its loading worker (seconds a client would wait for the
    handshake)."""
    code = (
        "import sys; import memosight_lsp.server.main; "
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False"]
