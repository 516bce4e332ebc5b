"""A hostile workspace: its settings cannot make the server run code (pickle weights, remote
code) or reach the network, `memosight/context` and the index never read outside the workspace
folders and open buffers, and its files are parsed, never executed or imported."""

from __future__ import annotations

import json
import pickle
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest
import torch
from lsp_session import Session
from transformers import AutoModelForCausalLM

pytestmark = pytest.mark.slow

SECRET = "SECRET-MARKER-41"
# Files that would write a marker if Python ever ran them.
BAIT = (
    "torch.py",
    "transformers.py",
    "tree_sitter.py",
    "msgpack.py",
    "pygls.py",
    "sitecustomize.py",
    "usercustomize.py",
    "conftest.py",
    "setup.py",
    "__init__.py",
)
MAIN = (
    "from leak import leaked_secret_function\n"
    "from linked.secret import leaked_secret_function as other\n"
    "\n"
    "\n"
    "def run():\n"
    "    return leaked_secret_function("
)


class Listener:
    """A TCP port that counts who connects (the hub endpoint and every proxy point here)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    @property
    def env(self) -> dict[str, str]:
        url = f"http://127.0.0.1:{self.port}"
        proxies = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy")
        return {
            "HF_HUB_OFFLINE": "0",
            "TRANSFORMERS_OFFLINE": "0",
            "HF_HUB_DISABLE_TELEMETRY": "0",
            "HF_ENDPOINT": url,
            "NO_PROXY": "",
            **dict.fromkeys(proxies, url),
        }


class Evil:
    """Unpickling this creates a file: what a malicious pytorch_model.bin can do."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def copy_tokenizer(source: Path, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(source / name, folder / name)


def hostile_models(tiny: Path, root: Path, markers: Path) -> dict[str, Path]:
    config = json.loads((tiny / "config.json").read_text())
    pickled = root / "pickled"
    copy_tokenizer(tiny, pickled)
    (pickled / "config.json").write_text(json.dumps(config))
    (pickled / "pytorch_model.bin").write_bytes(pickle.dumps({"w": Evil(markers / "pickle")}))
    remote = {}
    for name, model_type in (("remote-unknown", "evilnet"), ("remote-llama", config["model_type"])):
        folder = root / name
        copy_tokenizer(tiny, folder)
        shutil.copy(tiny / "model.safetensors", folder / "model.safetensors")
        auto_map = {
            "AutoConfig": "configuration_evil.EvilConfig",
            "AutoModelForCausalLM": "modeling_evil.EvilModel",
        }
        (folder / "config.json").write_text(
            json.dumps({**config, "model_type": model_type, "auto_map": auto_map})
        )
        for module in ("configuration_evil", "modeling_evil"):
            (folder / f"{module}.py").write_text(
                f"open({str(markers / (name + '-' + module))!r}, 'w').write('ran')\n"
            )
        remote[name] = folder
    return {"pickled": pickled, **remote}


@pytest.fixture(scope="module")
def hostile(tiny_model_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    markers = tmp / "markers"
    markers.mkdir()
    outside = tmp / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text(f"def leaked_secret_function():\n    return {SECRET!r}\n")
    (outside / "gitignore").write_text("*.py\n")  # followed, it would hide every file
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "main.py").write_text(MAIN)
    for name in BAIT:
        (ws / name).write_text(f"open({str(markers / name)!r}, 'w').write('ran')\n")
    (ws / "leak.py").symlink_to(outside / "secret.py")
    (ws / "linked").symlink_to(outside)
    (ws / ".gitignore").symlink_to(outside / "gitignore")
    models = hostile_models(tiny_model_dir, tmp / "models", markers)
    listener = Listener()
    # The workspace's own settings (workspace/configuration) choose the pickled model and try
    # to allow pickle; the server runs in the workspace folder, as editors start it.
    session = Session(
        [ws],
        {"completion": {"maxNewTokens": 8}},
        configuration={"model": {"path": str(models["pickled"]), "allowPickle": True}},
        env={"XDG_CACHE_HOME": str(tmp / "cache"), **listener.env},
        cwd=ws,
    )
    yield session, ws, outside, markers, models, listener
    session.stop()


def switch_model(session: Session, path: str) -> dict:
    numbers = session.stats()
    if numbers["state"] == "ready" and numbers["model"] == Path(path).name:
        return {"state": "ready", "message": numbers["modelMessage"]}  # loaded already
    seen = len(session.server.statuses)
    session.configure({"memosight": {"model": {"path": path}}})
    return session.wait_state("ready", "error", after=seen)


def test_pickle_weights_from_a_workspace_chosen_path_are_refused(hostile):
    session, _, _, markers, _, _ = hostile
    status = session.wait_state("error")
    assert "pickle weights only (pytorch_model.bin)" in status["message"]
    assert "allowPickle" in status["message"]
    assert session.server.log_lines(
        "model.allowPickle is honoured from your user settings only; ignored from "
        "workspace/configuration"
    )
    session.configure({"memosight": {"model": {"allow_pickle": True}}})  # another spelling
    session.wait_until(
        lambda: session.server.log_lines("ignored from didChangeConfiguration"),
        what="the refusal",
    )
    assert session.stats()["state"] == "error"
    assert not (markers / "pickle").exists()


@pytest.mark.parametrize("name", ["remote-unknown", "remote-llama"])
def test_model_folders_never_run_their_code(hostile, name):
    session, _, _, markers, models, _ = hostile
    status = switch_model(session, str(models[name]))
    if name == "remote-unknown":  # a type only its own code knows: refused, with the reason
        assert status["state"] == "error"
        assert "remote code" in status["message"] or "unsupported" in status["message"]
    else:  # a known type: transformers' own class, the folder's modules untouched
        assert status["state"] == "ready"
    assert list(markers.iterdir()) == []


def test_no_network_at_any_setting(hostile, tiny_model_dir):
    session, _, _, _, _, listener = hostile
    status = switch_model(session, "Qwen/Qwen2.5-Coder-0.5B")  # a hub id: not a folder here
    assert status["state"] == "error" and "model folder not found" in status["message"]
    assert switch_model(session, str(tiny_model_dir))["state"] == "ready"
    uri = session.open(Path("/tmp/net-check.py"), "def f(x):\n    return x\n\n\ndef g():\n    ")
    session.inline(uri, 5, 4)
    time.sleep(0.5)
    assert listener.connections == 0


def prompt_at_main(session: Session, ws: Path) -> str:
    uri = session.open(ws / "main.py", MAIN)
    lines = MAIN.split("\n")
    return session.context(uri, len(lines) - 1, len(lines[-1]))["prompt"]


def test_context_and_index_stay_inside_the_workspace(hostile, tiny_model_dir):
    session, ws, outside, _, _, _ = hostile
    assert switch_model(session, str(tiny_model_dir))["state"] == "ready"
    root = str(ws.resolve())
    # main.py and the bait files; not the links (file or folder) out, and the symlinked
    # .gitignore (which would hide every file) is not followed.
    session.wait_until(lambda: session.index_files().get(root) == 1 + len(BAIT))
    assert SECRET not in prompt_at_main(session, ws)
    # A buffer named through `..`: its text (the editor's) may be used, never the disk's.
    dotted = f"{ws.as_uri()}/../outside/secret.py"
    session.open(dotted, "def leaked_secret_function():\n    return 'the buffer'\n")
    assert SECRET not in prompt_at_main(session, ws)
    session.close(dotted)
    assert SECRET not in prompt_at_main(session, ws)
    for uri in (dotted, (outside / "secret.py").as_uri()):  # never open, or no longer
        assert "unknown document" in session.context(uri, 0, 0)["reason"]
    # A link out made while the folder is watched is not indexed either.
    (ws / "late.py").symlink_to(outside / "secret.py")
    time.sleep(1.0)
    assert session.index_files().get(root) == 1 + len(BAIT)
    assert SECRET not in prompt_at_main(session, ws)


def test_workspace_files_are_parsed_never_executed(hostile):
    session, ws, _, markers, _, _ = hostile
    assert session.index_files().get(str(ws.resolve())) == 1 + len(BAIT)
    assert list(markers.iterdir()) == []


def test_pickle_weights_load_when_the_user_allows_them(tiny_model_dir, tmp_path):
    # The user's own settings (initializationOptions) allow pickle: a legit .bin model loads.
    folder = tmp_path / "bin-model"
    copy_tokenizer(tiny_model_dir, folder)
    shutil.copy(tiny_model_dir / "config.json", folder / "config.json")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    options = {"model": {"path": str(folder), "allowPickle": True}, "completion": {}}
    session = Session([], options, env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    try:
        assert session.wait_state("ready", "error")["state"] == "ready"
        uri = session.open(tmp_path / "a.py", "def f(x):\n    return x\n\n\ndef g():\n    ")
        from_pickle = session.inline(uri, 5, 4)
        assert switch_model(session, str(tiny_model_dir))["state"] == "ready"
        assert session.inline(uri, 5, 4) == from_pickle  # the same weights either way
    finally:
        session.stop()


@pytest.mark.parametrize(
    "update",
    [
        {"model": {"allowPickle": True}},
        {"model": {"allow_pickle": True}},
        {"Model": {"AllowPickle": True}},
        {"memosight": {"model": {"allowPickle": True}}},
    ],
)
def test_user_only_settings_are_dropped_whatever_the_spelling(update):
    from memosight_lsp.config import Settings, parse_settings, without_user_only

    kept, refused = without_user_only(update, Settings())
    assert refused == ["model.allowPickle"]
    assert parse_settings(kept)[0].model.allow_pickle is False
    # The value the user already has is no attempt to change it (editors resend the tree).
    assert without_user_only({"model": {"allowPickle": False}}, Settings())[1] == []
