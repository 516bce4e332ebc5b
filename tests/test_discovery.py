"""Model discovery (`model.path: "auto"`) on fake Ollama / LM Studio / llama.cpp / Hugging Face
layouts in a temporary home, holding real GGUF files (tiny ones this test writes, SmolLM2-135M
when ~/.cache/memosight-models has it) and real model folders; a real HTTP server on loopback
stands in for Ollama's /api/tags. Nothing here looks at the real home directory: every
discovery gets its environment (HOME, XDG_CACHE_HOME) from the test."""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from gguf import GGUFWriter, LlamaFileType

from memosight_lsp.discovery import Machine, discover
from memosight_lsp.discovery.gguf_header import HeaderError, read_header
from memosight_lsp.discovery.judge import GGUF_ARCHITECTURES
from memosight_lsp.discovery.places import MAX_ENTRIES, Budget, find_models
from memosight_lsp.discovery.resolve import EMBEDDED_FALLBACK, FETCH_ACTION, resolve
from memosight_lsp.inference.loading import load_model
from tests.tiny_gguf import write_tiny_gguf
from tests.tiny_models import save_tiny_model

SMOLLM2 = Path.home() / ".cache" / "memosight-models" / "smollm2-135m-instruct.Q4_1.gguf"
# A 2-core CPU with 24 GiB and no GPU (the project's machines): 1.5B parameters at most.
LAPTOP = Machine(cores=2, memory_bytes=24 << 30, gpu=False)
NO_ENGINES: tuple[tuple[str, str], ...] = ()
OLLAMA_LIBRARY = Path(".ollama/models/manifests/registry.ollama.ai/library")


@pytest.fixture(scope="module")
def tiny_code_gguf(tmp_path_factory) -> Path:
    """A real, loadable Qwen2 GGUF with Qwen's FIM tokens (the tiny tokenizer has them)."""
    path = tmp_path_factory.mktemp("gguf") / "tiny-qwen2.gguf"
    write_tiny_gguf(path, "qwen2", "Q8_0")
    return path


@pytest.fixture(scope="module")
def tiny_code_folder(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("hf") / "folder", "qwen2")


@pytest.fixture
def home(tmp_path) -> Path:
    folder = tmp_path / "home"
    folder.mkdir()
    return folder


def env_of(home: Path, **extra: str) -> dict[str, str]:
    return {"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), **extra}


def write_header_gguf(
    path: Path,
    *,
    arch: str = "llama",
    name: str,
    tokens: list[str],
    size_label: str | None = None,
    file_type: LlamaFileType = LlamaFileType.MOSTLY_Q8_0,
) -> Path:
    """A real GGUF file whose metadata says what the test needs (one small tensor)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = GGUFWriter(str(path), arch)
    writer.add_name(name)
    if size_label:
        writer.add_size_label(size_label)
    writer.add_context_length(4096)
    writer.add_file_type(file_type)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_merges(["a b", "c d"])
    writer.add_tensor("token_embd.weight", np.zeros((len(tokens), 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


PLAIN_TOKENS = ["<s>", "</s>", "a", "b", "c", "d", "def", "return"]
STARCODER_TOKENS = [*PLAIN_TOKENS, "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>"]


def ollama_model(home: Path, name: str, tag: str, blob_source: Path | None, digest: str) -> Path:
    """An Ollama manifest naming a model layer, and the blob (a copy of blob_source) it names."""
    manifest = home / OLLAMA_LIBRARY / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    layers = [
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "0" * 64},
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}"},
    ]
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    blobs = home / ".ollama" / "models" / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    if blob_source is not None:
        shutil.copy(blob_source, blobs / f"sha256-{digest}")
    return manifest


def test_header_of_a_real_tiny_gguf(tiny_code_gguf):
    header = read_header(tiny_code_gguf)
    assert header.architecture == "qwen2"
    assert header.name == "tiny-qwen2"
    assert header.file_type == LlamaFileType.MOSTLY_Q8_0
    assert header.context_length == 2048
    assert {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"} <= header.markers


def test_header_refuses_what_is_not_gguf(tmp_path, tiny_code_gguf):
    text = tmp_path / "notes.gguf"
    text.write_text("not a model at all\n")
    with pytest.raises(HeaderError, match="not a GGUF file"):
        read_header(text)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_code_gguf.read_bytes()[:300])
    with pytest.raises(HeaderError):
        read_header(cut)
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(HeaderError):
        read_header(empty)


@pytest.mark.skipif(not SMOLLM2.is_file(), reason="SmolLM2-135M GGUF not fetched")
def test_smollm2_is_a_model_but_not_a_code_model(home):
    copy = home / ".cache" / "llama.cpp" / SMOLLM2.name
    copy.parent.mkdir(parents=True)
    copy.symlink_to(SMOLLM2)
    found = discover(env=env_of(home), machine=LAPTOP, engines=NO_ENGINES)
    (smol,) = found.candidates
    assert smol.architecture == "llama" and smol.fim is None and not smol.code
    assert 100e6 < (smol.parameters or 0) < 200e6 and smol.fits and smol.problem is None
    assert found.choice is None and "none a code model" in found.reason


def test_every_place_is_found_and_the_best_code_model_picked(home, tiny_code_gguf):
    # Ollama: a code model (FIM) whose blob is a real GGUF; a broken manifest; a missing blob.
    ollama_model(home, "qwen2.5-coder", "1.5b", tiny_code_gguf, "a" * 64)
    broken = home / OLLAMA_LIBRARY / "broken" / "latest"
    broken.parent.mkdir(parents=True)
    broken.write_text("{not json")
    ollama_model(home, "gone", "latest", None, "b" * 64)
    # LM Studio: a general model beside a code model too large for the machine.
    lms = home / ".lmstudio" / "models"
    write_header_gguf(
        lms / "meta" / "Llama-3.2-1B" / "Llama-3.2-1B-Q8_0.gguf",
        name="Llama 3.2 1B",
        tokens=PLAIN_TOKENS,
        size_label="1B",
    )
    write_header_gguf(
        home / ".cache/lm-studio/models/bigcode/starcoder2-7b/starcoder2-7b-Q4_K_M.gguf",
        arch="starcoder2",
        name="StarCoder2 7B",
        tokens=STARCODER_TOKENS,
        size_label="7B",
        file_type=LlamaFileType.MOSTLY_Q4_K_M,
    )
    # llama.cpp's cache: a file that is not a model, and its download metadata.
    cache = home / ".cache" / "llama.cpp"
    cache.mkdir(parents=True)
    (cache / "broken.gguf").write_text("HTML error page, not a model")
    (cache / "broken.gguf.json").write_text("{}")

    found = discover(env=env_of(home), machine=LAPTOP, engines=NO_ENGINES)

    by_name = {c.name: c for c in found.candidates}
    assert set(by_name) == {
        "qwen2.5-coder:1.5b",
        "Llama-3.2-1B-Q8_0.gguf",
        "starcoder2-7b-Q4_K_M.gguf",
        "broken.gguf",
    }
    ollama = by_name["qwen2.5-coder:1.5b"]
    assert (ollama.source, ollama.format, ollama.fim) == ("ollama", "gguf", "qwen")
    assert ollama.path.endswith("blobs/sha256-" + "a" * 64) and ollama.usable
    general = by_name["Llama-3.2-1B-Q8_0.gguf"]
    assert general.source == "lmstudio" and not general.code and general.fim is None
    big = by_name["starcoder2-7b-Q4_K_M.gguf"]
    assert big.code and big.fim == "starcoder" and big.parameters == 7_000_000_000
    assert not big.fits and "too large" in big.fit and "this CPU" in big.fit
    assert by_name["broken.gguf"].problem and not by_name["broken.gguf"].usable
    assert any("broken" in note and "unreadable manifest" in note for note in found.notes)
    assert any("gone:latest" in note and "missing" in note for note in found.notes)

    assert found.choice == ollama
    assert "FIM (qwen)" in found.reason and "fits this CPU" in found.reason
    assert found.candidates[0] == ollama  # ranked best first


def test_a_gpu_machine_takes_the_larger_model(home, tiny_code_gguf):
    ollama_model(home, "qwen2.5-coder", "0.5b", tiny_code_gguf, "c" * 64)
    write_header_gguf(
        home / ".cache/llama.cpp/starcoder2-7b-Q4_K_M.gguf",
        arch="starcoder2",
        name="StarCoder2 7B",
        tokens=STARCODER_TOKENS,
        size_label="7B",
    )
    gpu = Machine(cores=8, memory_bytes=64 << 30, gpu=True)
    assert discover(env=env_of(home), machine=gpu, engines=NO_ENGINES).choice.name == (
        "starcoder2-7b-Q4_K_M.gguf"
    )
    on_cpu = discover(env=env_of(home), machine=LAPTOP, engines=NO_ENGINES)
    assert on_cpu.choice.name == "qwen2.5-coder:0.5b"


def test_hugging_face_cache_folders_and_env_paths(home, tmp_path, tiny_code_folder, tiny_code_gguf):
    snapshot = home / ".cache/huggingface/hub/models--tiny--Tiny-Coder/snapshots/0123abcd"
    shutil.copytree(tiny_code_folder, snapshot)
    gguf_repo = home / ".cache/huggingface/hub/models--tiny--Tiny-GGUF/snapshots/4567"
    gguf_repo.mkdir(parents=True)
    (gguf_repo / "tiny-q8_0.gguf").symlink_to(tiny_code_gguf)  # the hub keeps symlinks to blobs
    mine = tmp_path / "mine" / "model.gguf"
    mine.parent.mkdir()
    shutil.copy(tiny_code_gguf, mine)
    store = tmp_path / "store" / "sub"  # a folder of $MEMOSIGHT_MODELS: files are sniffed
    store.mkdir(parents=True)
    shutil.copy(tiny_code_gguf, store / "blob0123")
    (store / "README").write_text("not a model")
    paths = f"{mine}:{store.parent}"

    found = discover(env=env_of(home, MEMOSIGHT_MODELS=paths), machine=LAPTOP, engines=())

    by_name = {c.name: c for c in found.candidates}
    folder = by_name["tiny/Tiny-Coder"]
    assert (folder.source, folder.format, folder.architecture) == (
        "hf-cache",
        "hf",
        "Qwen2ForCausalLM",
    )
    assert folder.fim == "qwen" and folder.usable
    from safetensors import safe_open

    with safe_open(str(snapshot / "model.safetensors"), "pt") as weights:
        expected = sum(np.prod(weights.get_slice(k).get_shape()) for k in weights.keys())  # noqa: SIM118
    assert folder.parameters == expected
    assert by_name["tiny/Tiny-GGUF/tiny-q8_0.gguf"].format == "gguf"
    assert by_name["model.gguf"].source == "env"
    assert by_name["blob0123"].source == "env" and by_name["blob0123"].fim == "qwen"
    assert "README" not in by_name


def test_nothing_found_means_the_embedded_model_said_so(home):
    (home / ".ollama" / "models").mkdir(parents=True)  # Ollama installed, nothing pulled
    resolved = resolve("auto", env=env_of(home), engines=NO_ENGINES)
    assert resolved.path is None and resolved.backend == "local"
    assert resolved.notice == EMBEDDED_FALLBACK
    assert FETCH_ACTION in (resolved.fix or "") and resolved.reason == "no model found"
    assert resolved.discovery is not None and resolved.discovery.candidates == ()


def test_the_switch_turns_discovery_off(home, tiny_code_gguf):
    ollama_model(home, "qwen2.5-coder", "1.5b", tiny_code_gguf, "d" * 64)
    found = discover(env=env_of(home, MEMOSIGHT_DISCOVERY="0"), machine=LAPTOP)
    assert found.choice is None and not found.enabled and "off" in found.reason
    assert resolve("auto", env=env_of(home, MEMOSIGHT_DISCOVERY="0")).notice == EMBEDDED_FALLBACK


def test_null_and_paths_are_not_discovered(home):
    assert resolve(None, env=env_of(home)).path is None
    assert "null" in (resolve(None, env=env_of(home)).notice or "")
    named = resolve("/models/x.gguf", env=env_of(home))
    assert named.path == "/models/x.gguf" and named.notice is None and named.discovery is None


def test_what_auto_picks_loads(home, tiny_code_gguf, tmp_path, monkeypatch):
    """An Ollama blob has no .gguf suffix: the loader knows it by its magic."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "converted"))
    ollama_model(home, "qwen2.5-coder", "1.5b", tiny_code_gguf, "e" * 64)
    resolved = resolve("auto", env=env_of(home), engines=NO_ENGINES)
    assert resolved.source == "ollama" and resolved.name == "qwen2.5-coder:1.5b"
    loaded = load_model(resolved.path, device="cpu", dtype="float32", quantization="none")
    assert loaded.fim is not None and loaded.fim.name == "qwen" and not loaded.embedded


class FakeOllama(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # as Ollama (Go's net/http) answers: the connection stays
    tags: ClassVar[dict] = {}
    asked: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).asked.append(self.path)
        body = json.dumps(self.tags).encode() if self.path == "/api/tags" else b"{}"
        self.send_response(200 if self.path == "/api/tags" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def fake_ollama():
    FakeOllama.tags = {
        "models": [
            {"name": "llama3.2:1b", "details": {"family": "llama", "parameter_size": "1.2B"}},
            {"name": "qwen2.5-coder:1.5b-base", "details": {"parameter_size": "1.5B"}},
        ]
    }
    FakeOllama.asked = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeOllama)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_running_ollama_is_offered_when_nothing_is_on_disk(home, fake_ollama):
    engines = (("ollama", fake_ollama), ("llama.cpp", f"http://127.0.0.1:{free_port()}"))
    found = discover(env=env_of(home), machine=LAPTOP, engines=engines)
    assert FakeOllama.asked == ["/api/tags"]
    assert [c.name for c in found.served] == ["qwen2.5-coder:1.5b-base", "llama3.2:1b"]
    assert found.choice is not None and found.choice.name == "qwen2.5-coder:1.5b-base"
    assert found.choice.parameters == 1_500_000_000 and found.choice.source == "ollama-server"
    resolved = resolve("auto", env=env_of(home), engines=engines)
    assert (resolved.backend, resolved.url, resolved.name) == (
        "ollama",
        fake_ollama,
        "qwen2.5-coder:1.5b-base",
    )
    assert resolved.notice is None


def test_a_local_code_model_beats_a_running_engine(home, fake_ollama, tiny_code_gguf):
    ollama_model(home, "qwen2.5-coder", "1.5b", tiny_code_gguf, "f" * 64)
    found = discover(env=env_of(home), machine=LAPTOP, engines=(("ollama", fake_ollama),))
    assert found.choice is not None and found.choice.format == "gguf"
    assert len(found.served) == 2  # still listed, as a backend to choose


def test_a_silent_port_costs_at_most_the_probe_deadline(home):
    with socket.socket() as listener:  # accepts connections, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        started = time.perf_counter()
        found = discover(env=env_of(home), machine=LAPTOP, engines=(("ollama", url),))
        assert time.perf_counter() - started < 1.0
    assert found.served == () and found.choice is None


def fill_with_files(home: Path, count: int) -> None:
    """`count` small files spread over the places, in folders the walks enter; every other one
    without a suffix (a blob: the walk opens it to look for the GGUF magic)."""
    places = [
        home / ".ollama/models/blobs",
        home / ".lmstudio/models/pub",
        home / ".cache/lm-studio/models/a",
        home / ".cache/llama.cpp",
        home / ".cache/huggingface/hub/models--org--name/snapshots/rev",
    ]
    for i in range(count):
        folder = places[i % len(places)] / f"d{i % 37}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / (f"f{i}.txt" if i % 2 else f"f{i}")).write_bytes(b"x")


def test_ten_thousand_files_take_under_a_second(home, tiny_code_gguf):
    fill_with_files(home, 10_000)
    ollama_model(home, "qwen2.5-coder", "1.5b", tiny_code_gguf, "1" * 64)
    write_header_gguf(
        home / ".lmstudio/models/pub/repo/starcoder2-3b.gguf",
        arch="starcoder2",
        name="StarCoder2 3B",
        tokens=STARCODER_TOKENS,
        size_label="3B",
    )
    times = []
    for _ in range(3):
        started = time.perf_counter()
        found = discover(env=env_of(home), machine=LAPTOP, engines=NO_ENGINES)
        times.append(time.perf_counter() - started)
    print(f"discovery over 10,000 files: {[round(t * 1000) for t in times]} ms")  # noqa: T201
    assert min(times) < 1.0
    assert {c.name for c in found.candidates} == {"qwen2.5-coder:1.5b", "starcoder2-3b.gguf"}
    assert found.notes == ()


def test_the_walk_is_bounded(home, tiny_code_gguf):
    """The budget of directory entries (MAX_ENTRIES in discovery; smaller here) ends the walk
    and says so; models seen before it ran out are kept."""
    cache = home / ".cache" / "llama.cpp"
    cache.mkdir(parents=True)
    shutil.copy(tiny_code_gguf, cache / "a-first.gguf")
    for i in range(1500):
        folder = cache / f"d{i % 20:02d}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{i}.txt").write_bytes(b"x")
    budget = Budget(entries=1000)
    found = find_models(env_of(home), budget)
    assert budget.entries == 0 and [f.name for f in found] == ["a-first.gguf"]
    assert any("stopped after" in note and "llama.cpp" in note for note in budget.notes)
    assert MAX_ENTRIES >= 10_000 * 2  # the real budget covers the 10,000-file case twice


def test_the_gguf_architectures_are_those_transformers_converts():
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    converted = {name.replace("_", "") for name in GGUF_CONFIG_MAPPING}
    assert {name.replace("_", "") for name in GGUF_ARCHITECTURES} <= converted


def test_discovery_imports_no_torch():
    import subprocess
    import sys

    code = (
        "import sys; import memosight_lsp.discovery.resolve; "
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
