"""memosight bench startup: one fresh server with a tiny model, from the spawn to its first
suggestion with text (a few seconds: the server's imports and the tiny model's load)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
from pathlib import Path

import pytest

from memosight_lsp.bench import startup
from memosight_lsp.commands import bench as bench_command
from memosight_lsp.inference import native_kernels

pytestmark = pytest.mark.slow


def test_the_default_cursor_is_just_after_self():
    cursor = startup.default_cursor()
    line = cursor.text.split("\n")[cursor.line]
    assert line.endswith("self.") and cursor.character == len(line)
    assert cursor.line > cursor.text.count("\n") // 2


def test_one_run_times_initialize_ready_and_the_first_suggestion(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the server inherits it
    monkeypatch.delenv(native_kernels.ENV_SWITCH, raising=False)
    project = tmp_path / "project"  # opened as the editor's workspace: indexed beside the load
    project.mkdir()
    (project / "shapes.py").write_text("def area(w, h):\n    return w * h\n")
    (project / "main.py").write_text("from shapes import area\n\nprint(area(2, 3))\n")
    argv = ["--model", str(tiny_model_dir), "--runs", "1", "--first-response-ms", "0"]
    argv += ["--workspace", str(project), "--typing", "1", "--debug"]
    argv += ["--settings", json.dumps({"completion": {"maxNewTokens": 8}}), "--json"]
    assert bench_command.run(argparse.Namespace(name="startup", rest=argv)) == 0
    # its servers build the kernels as a user's do (in the background), not first and waiting
    assert native_kernels.ENV_SWITCH not in os.environ
    result = json.loads(capsys.readouterr().out)
    (run,) = result["runs"]
    assert 0 < run["initializeS"] <= run["readyS"] <= run["firstSuggestionS"]
    assert run["text"] and run["requests"] >= 1 and run["exitCode"] == 0
    assert run["loadedInS"] is not None and run["loadedInS"] < run["readyS"]
    assert result["median"]["firstSuggestionS"] == run["firstSuggestionS"]
    assert result["settings"]["model"]["path"] == str(tiny_model_dir)
    assert any("loaded in" in entry["line"] for entry in run["log"])
    assert result["workspace"] == str(project)
    typing = run["typing"]  # a second of typing on after the first suggestion
    assert 1 <= typing["keystrokes"] <= 5 and 0 <= typing["empty"] <= typing["keystrokes"]
    assert 0 < typing["p50Ms"] <= typing["p90Ms"] <= typing["maxMs"]
    slowest = typing["slowest"]  # the slowest first, each with its start after the spawn
    assert slowest[0]["ms"] == typing["maxMs"] and len(slowest) <= 3
    assert all(run["firstSuggestionS"] <= s["s"] < run["firstSuggestionS"] + 3 for s in slowest)
    assert any(entry["line"].startswith("DEBUG") for entry in run["log"])  # --debug
    assert startup.table(result).splitlines()[-1].startswith("| median |")


def test_servers_start_as_installed_with_their_compiled_modules(monkeypatch):
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # as some sandboxes set it
    assert startup.server_environment("environment") == dict(os.environ)  # as it is
    env = startup.server_environment("kept")
    assert env is not None and "PYTHONDONTWRITEBYTECODE" not in env
    assert env["PATH"] == os.environ["PATH"]
    compiled = Path(importlib.util.cache_from_source(startup.__file__))
    assert compiled.is_file()  # compiled as pip would


def test_a_runs_load_seconds_and_host_come_from_its_log():
    lines = [
        "2026-12-04 00:10:50,394 INFO memosight_lsp.host_process.relay: serving through the "
        "model host (process 18343)",
        "2026-12-04 00:10:52,000 INFO memosight_lsp.session.model_host: m ready (0.5M "
        "parameters, cpu, loaded in 1.9s)",
    ]
    assert startup.loaded_in(lines) == 1.9
    assert startup.host_pid(lines) == 18343
    assert startup.host_pid(lines[1:]) is None  # served in its own process
    assert startup.model_timings(lines) == "kept"  # loaded, and nothing left to time
    pending = "2026-12-04 00:10:52,000 INFO memosight_lsp.pipeline.calibration: calibration: "
    pending += "prefill, passCosts measured after the first answer"
    assert startup.model_timings([pending, *lines]) == "not kept: prefill, passCosts"
    assert startup.model_timings(lines[:1]) is None  # a kept host loaded nothing
