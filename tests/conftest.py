from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

# The tests' support modules (tests/), and the repository root for the reliability tools
# (tools/reliability/), which are not part of the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

# model.path defaults to "auto": no test (nor a server or command a test starts, which inherit
# this) may find the developer's own models or a running Ollama. Tests of discovery pass their
# own environment (tests/test_discovery.py) or set MEMOSIGHT_DISCOVERY=1 with a fake HOME.
os.environ["MEMOSIGHT_DISCOVERY"] = "0"

# Every server a test starts serves in its own process and leaves with its client: a model
# host lingering after each test (host_process/) would pile up. Tests of the host set their own.
# MEMOSIGHT_TEST_KEEP_ALIVE=SECONDS runs the servers through the relay and a kept host instead.
os.environ["MEMOSIGHT_KEEP_ALIVE"] = os.environ.get("MEMOSIGHT_TEST_KEEP_ALIVE", "0")

from tiny_models import save_tiny_model

from memosight_lsp.inference import native_kernels

# Tests measure the native kernels where they run: built in the foreground before the first
# test (pytest_sessionstart), once per machine (a user's are built in the background:
# inference/native_kernels.py), in the real kernel folder even when a test points XDG_CACHE_HOME
# elsewhere. Servers and commands the tests start inherit both.
os.environ.setdefault(native_kernels.ENV_SWITCH, "wait")
os.environ.setdefault(native_kernels.DIR_SWITCH, str(native_kernels.cache_root()))


def pytest_sessionstart(session):
    """Build (or adopt) the native kernels before the first test: on a fresh machine the build
    takes minutes on two cores, longer than the timeout of a test that runs a command, and the
    test that happened to come first would fail for it."""
    native_kernels.kernels()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random Llama with a FIM-capable tokenizer, saved with save_pretrained."""
    return save_tiny_model(tmp_path_factory.mktemp("tiny-llama"), "llama")


@pytest.fixture(scope="session")
def tiny_model_dirs(tmp_path_factory) -> dict[str, Path]:
    """One tiny random model per architecture."""
    return {
        arch: save_tiny_model(tmp_path_factory.mktemp(f"tiny-{arch}"), arch)
        for arch in ("llama", "qwen2", "gpt2")
    }


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models run faster on one torch thread, and far steadier next to a busy CPU.
    Modules take it with `pytestmark = pytest.mark.usefixtures("one_torch_thread")`."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
