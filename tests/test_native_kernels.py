"""The native kernels (inference/native_kernels.py): built on machines that can run them, in the
background under an OS lock that dies with its holder, one build folder per install; and exact
where lossless speculative decoding needs them to be (each row's bits do not depend on the
others)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from memosight_lsp.inference import native_kernels
from memosight_lsp.inference.quantize import MANY_ROWS, native_layout, quantize_weight
from memosight_lsp.inference.vnni_layout import pack_int4, unpack_int4

pytestmark = pytest.mark.skipif(
    native_kernels.unsupported_reason() is not None,
    reason=f"native kernels cannot run here: {native_kernels.unsupported_reason()}",
)


def weight(out_features: int = 160, in_features: int = 384, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(out_features, in_features, generator=generator) / 16


def rows(count: int, width: int = 384, seed: int = 1, dtype=torch.bfloat16) -> torch.Tensor:
    return torch.randn(count, width, generator=torch.Generator().manual_seed(seed)).to(dtype)


def test_a_machine_that_can_run_them_builds_them():
    # The CPU has the instructions: a missing compiler or a build error is a failure here.
    assert native_kernels.kernels() is not None
    assert native_layout() == "vnni"


def test_packing_round_trips():
    values = torch.randint(0, 16, (48, 256), generator=torch.Generator().manual_seed(0))
    packed = pack_int4(values)
    assert packed.shape == (3, 32, 64) and packed.dtype == torch.uint8
    assert torch.equal(unpack_int4(packed), values.to(torch.int32))
    # Byte 4 * o + j of a tile's first vector: input j (low nibble), input 4 + j (high nibble).
    assert packed[0, 0, 4 * 5 + 2] == values[5, 2] | (values[5, 6] << 4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_each_row_gets_the_same_bits_whatever_the_rows_beside_it(dtype):
    q = quantize_weight(weight(), "int4", torch.bfloat16, layout="vnni")
    x = rows(MANY_ROWS - 1, dtype=dtype)  # every row block, partial blocks included
    together = q.matmul(x)
    assert together.dtype == dtype
    alone = torch.cat([q.matmul(x[i : i + 1]) for i in range(x.shape[0])])
    assert torch.equal(together, alone)
    for count in (2, 5, 8, 9, 17):
        assert torch.equal(q.matmul(x[:count]), together[:count])


def test_the_thread_count_does_not_change_the_bits():
    q = quantize_weight(weight(out_features=512), "int4", torch.bfloat16, layout="vnni")
    x = rows(12)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = q.matmul(x)
        torch.set_num_threads(2)
        two = q.matmul(x)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)


def test_products_follow_the_dequantized_weights_within_int8_activation_steps():
    w = weight()
    q = quantize_weight(w, "int4", torch.bfloat16, layout="vnni")
    x = rows(6, dtype=torch.float32)
    got = q.matmul(x)
    reference = x @ q.dequantized().t()
    # Each activation is off by at most half a step (amax / 254 of its group of 32).
    steps = x.abs().reshape(6, -1, 32).amax(-1) / 254  # [R, groups]
    bound = steps[:, :, None] * q.dequantized().abs().reshape(160, -1, 32).sum(-1).t()[None]
    assert ((got - reference).abs() <= bound.sum(1) * 1.01 + 1e-4).all()
    assert not torch.equal(got, reference)  # activations really are quantized


def test_a_zero_row_gives_zeros_and_mismatched_shapes_are_refused():
    q = quantize_weight(weight(), "int4", torch.bfloat16, layout="vnni")
    kernels = native_kernels.kernels()
    assert kernels is not None
    zero = torch.zeros(1, 384, dtype=torch.bfloat16)
    expected = torch.zeros(1, 160, dtype=torch.bfloat16)
    assert torch.equal(kernels.int4_matmul(zero, q.data, q.scales), expected)
    with pytest.raises(RuntimeError, match="does not match"):
        kernels.int4_matmul(rows(1, width=256), q.data, q.scales)


def test_the_switch_turns_them_off(monkeypatch):
    monkeypatch.setenv(native_kernels.ENV_SWITCH, "0")
    assert native_kernels.unsupported_reason() == f"{native_kernels.ENV_SWITCH}=0"


# -- attention -------------------------------------------------------------------------------
NO_INDEX = torch.empty(0, dtype=torch.long)


def cache_views(length: int, dtype=torch.bfloat16, kv_heads: int = 2, head_dim: int = 64):
    """Keys and values as a growing cache hands them out: views of buffers with spare room."""
    generator = torch.Generator().manual_seed(3)
    keys = torch.randn(kv_heads, length + 50, head_dim, generator=generator).to(dtype)
    values = torch.randn(kv_heads, length + 50, head_dim, generator=generator).to(dtype)
    return keys[:, :length], values[:, :length]


def reference_attention(q, keys, values, seen: list[torch.Tensor], scale: float):
    """float64 softmax attention of each row over the key positions it sees."""
    group = q.shape[1] // keys.shape[0]
    out = []
    for row, positions in enumerate(seen):
        k = keys[:, positions].double().repeat_interleave(group, 0)  # [H, n, D]
        v = values[:, positions].double().repeat_interleave(group, 0)
        weights = torch.softmax((k @ q[row].double()[:, :, None])[..., 0] * scale, -1)
        out.append((weights[:, None, :] @ v)[:, 0])  # [H, D]
    return torch.stack(out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_follows_the_softmax_of_each_rows_own_keys(dtype):
    keys, values = cache_views(300, dtype)
    q = torch.randn(5, 14, 64, generator=torch.Generator().manual_seed(4)).to(dtype)
    lengths = torch.tensor([296, 297, 298, 299, 300])
    got = native_kernels.kernels().attend(q, keys, values, lengths, NO_INDEX, 0.125)
    expected = reference_attention(q, keys, values, [torch.arange(n) for n in lengths], 0.125)
    bound = 1e-5 if dtype == torch.float32 else 1e-2  # bfloat16 output: 8 bits of mantissa
    assert (got.double() - expected).abs().max() <= bound
    # Each row alone: the same bits.
    alone = [
        native_kernels.kernels().attend(
            q[i : i + 1], keys, values, lengths[i : i + 1], NO_INDEX, 0.125
        )
        for i in range(5)
    ]
    assert torch.equal(torch.cat(alone), got)


def test_a_tree_row_gets_the_bits_of_its_path_laid_out_in_order():
    """A node of a draft tree sees the past and its ancestors at scattered positions; once its
    path is accepted they lie in order: the attention must not tell the two apart."""
    keys, values = cache_views(40)
    q = torch.randn(1, 14, 64, generator=torch.Generator().manual_seed(5)).bfloat16()
    seen = torch.tensor([*range(32), 33, 36, 39])  # past 32, then three scattered ancestors
    tree = native_kernels.kernels().attend(
        q, keys, values, torch.tensor([len(seen)]), seen[None], 0.125
    )
    path_keys = keys[:, seen].contiguous()
    path_values = values[:, seen].contiguous()
    path = native_kernels.kernels().attend(
        q, path_keys, path_values, torch.tensor([len(seen)]), NO_INDEX, 0.125
    )
    assert torch.equal(tree, path)
    expected = reference_attention(q, keys, values, [seen], 0.125)
    assert (tree.double() - expected).abs().max() <= 1e-2


def test_attention_refuses_keys_it_cannot_see():
    keys, values = cache_views(20)
    q = torch.randn(1, 14, 64).bfloat16()
    attend = native_kernels.kernels().attend
    with pytest.raises(RuntimeError, match="no keys or too many"):
        attend(q, keys, values, torch.tensor([21]), NO_INDEX, 0.125)
    with pytest.raises(RuntimeError, match="must increase"):
        attend(q, keys, values, torch.tensor([3]), torch.tensor([[0, 5, 2]]), 0.125)
    with pytest.raises(RuntimeError, match="must increase and lie inside"):
        attend(q, keys, values, torch.tensor([2]), torch.tensor([[0, 20]]), 0.125)
    with pytest.raises(RuntimeError, match="share a dtype"):
        attend(q.float(), keys, values, torch.tensor([3]), NO_INDEX, 0.125)
    odd_keys, odd_values = cache_views(20, head_dim=48)
    assert 48 not in native_kernels.ATTENTION_HEAD_SIZES  # such a trunk attends with torch's kernel
    with pytest.raises(RuntimeError, match="head size"):
        attend(
            torch.randn(1, 14, 48).bfloat16(),
            odd_keys,
            odd_values,
            torch.tensor([3]),
            NO_INDEX,
            1.0,
        )


def test_a_bfloat16_trunk_attends_natively_and_passes_equal_steps():
    from memosight_lsp.inference.fused_trunk import prepare_trunk
    from memosight_lsp.inference.kv_cache import new_cache
    from tests.test_quantize import wide_model

    model = wide_model("qwen2")  # bfloat16, head size 32
    trunk = prepare_trunk(model)
    assert trunk.native_rows
    ids = torch.randint(0, 300, (1, 40), generator=torch.Generator().manual_seed(7))
    stepped, batched = new_cache(model), new_cache(model)
    trunk(ids[:, :30], stepped, prefill=True)
    trunk(ids[:, :30], batched, prefill=True)
    steps = torch.cat([trunk(ids[:, i : i + 1], stepped) for i in range(30, 40)])
    assert torch.equal(trunk(ids[:, 30:40], batched), steps)
    with torch.no_grad():
        reference = model(ids).logits[0, 30:].float()
    torch.testing.assert_close(trunk.logits(steps).float(), reference, rtol=0.05, atol=0.05)


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_a_tokens_keys_do_not_depend_on_how_it_entered_the_cache(kind):
    """Prefilled with the prompt, or decoded one step at a time: with native products and
    attention the cache holds the same bits, so a reused cache decodes as a cold prompt."""
    from memosight_lsp.inference.fused_trunk import prepare_trunk
    from memosight_lsp.inference.kv_cache import new_cache
    from memosight_lsp.inference.quantize import quantize_model
    from tests.test_quantize import wide_model

    model = wide_model("qwen2")
    quantize_model(model, kind)
    trunk = prepare_trunk(model)
    ids = torch.randint(0, 300, (1, 48), generator=torch.Generator().manual_seed(8))
    cold, stepped = new_cache(model), new_cache(model)
    trunk(ids, cold, prefill=True)  # one prompt pass
    trunk(ids[:, :20], stepped, prefill=True)
    for i in range(20, 36):  # decoded, then verified in a pass of 12
        trunk(ids[:, i : i + 1], stepped)
    trunk(ids[:, 36:], stepped)
    for layer in range(model.config.num_hidden_layers):
        assert torch.equal(cold.layers[layer].keys, stepped.layers[layer].keys)
        assert torch.equal(cold.layers[layer].values, stepped.layers[layer].values)


# -- the build: in the background, under an OS lock, one folder per install -----------------


def fresh_state(monkeypatch, tmp_path, mode: str = "1") -> None:
    """This test's own view of the kernels and a private cache, so the process's real ones
    survive it; `mode`: ENV_SWITCH (1: build in the background, wait: in the foreground)."""
    monkeypatch.setattr(native_kernels, "_STATE", native_kernels._Kernels())
    monkeypatch.setenv(native_kernels.DIR_SWITCH, str(tmp_path / "kernels"))
    monkeypatch.setenv(native_kernels.ENV_SWITCH, mode)


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"no {what} after {seconds} s"
        time.sleep(0.1)


def python(code: str, env: dict[str, str], **options) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        text=True,
        **options,
    )


def test_a_failed_build_falls_back_to_torchs_kernels(monkeypatch, tmp_path):
    """No working C++ compiler: one log line, torch's kernels, nothing raised."""
    fresh_state(monkeypatch, tmp_path, mode="wait")
    monkeypatch.setenv("CXX", "/bin/false")
    assert native_kernels.kernels() is None
    assert native_kernels.describe().startswith("torch's (building them failed")
    assert native_layout() == "aten"


def test_a_load_starts_the_build_in_the_background_and_says_so_once(monkeypatch, tmp_path):
    fresh_state(monkeypatch, tmp_path)
    monkeypatch.setenv("CXX", "/bin/false")  # the build fails, in a few seconds
    messages: list[str] = []
    started = time.monotonic()
    assert native_kernels.refresh(messages.append) is None  # torch's kernels run meanwhile
    assert time.monotonic() - started < 5
    assert messages == ["building the native CPU kernels in the background, once for this machine"]
    assert "being built in the background" in native_kernels.describe()
    assert native_kernels.being_built()  # a precision measured now would be on torch's
    builder = native_kernels._STATE.builder
    assert builder is not None
    builder.wait(120)
    assert builder.returncode == 1
    native_kernels.refresh(messages.append)  # failed a moment ago: not tried again before the hour
    assert len(messages) == 1 and native_kernels._STATE.builder is builder
    assert native_kernels.describe().startswith("torch's (building them failed")
    assert not native_kernels.being_built()


def test_a_loader_that_finds_the_build_lock_held_falls_back_at_once(monkeypatch, tmp_path):
    fresh_state(monkeypatch, tmp_path)
    folder = native_kernels.target().folder
    folder.mkdir(parents=True)
    holder = python(
        "import fcntl, sys, time\n"
        f"handle = open({str(folder / native_kernels.BUILD_LOCK)!r}, 'a')\n"
        "fcntl.flock(handle, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "time.sleep(120)\n",
        {},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        started = time.monotonic()
        assert native_kernels.refresh() is None
        assert time.monotonic() - started < 2
        assert native_kernels._STATE.builder is None  # no second build beside the first
        assert "being built by another process" in native_kernels.describe()
        assert native_kernels.being_built()
    finally:
        holder.kill()
        holder.wait()
    assert not native_kernels._lock_held(folder)  # the lock died with its holder


SLOW_COMPILER = '#!/bin/sh\nsleep 600\nexec c++ "$@"\n'


def test_a_build_killed_midway_does_not_block_the_next_process(monkeypatch, tmp_path):
    """SIGKILL the build child while it holds the lock inside torch's build (torch's own lock
    file written): the next process loads at once and its build is not held up by what the
    killed one left."""
    fresh_state(monkeypatch, tmp_path)
    slow = tmp_path / "slow-c++"
    slow.write_text(SLOW_COMPILER)
    slow.chmod(0o755)
    monkeypatch.setenv("CXX", str(slow))
    folder = native_kernels.target().folder
    assert native_kernels.refresh() is None
    builder = native_kernels._STATE.builder
    assert builder is not None
    try:
        wait_for(lambda: (folder / native_kernels.TORCH_BATON).exists(), 60, "torch lock file")
        assert native_kernels._lock_held(folder)
    finally:
        os.killpg(builder.pid, signal.SIGKILL)  # the child, its compiler and its sleep
        builder.wait()
    assert (folder / native_kernels.TORCH_BATON).exists()  # left behind, as by a killed server
    assert not native_kernels._lock_held(folder)
    # The next process: a working (here: failing at once) compiler, in the background.
    nxt = python(
        "import time\n"
        "from memosight_lsp.inference import native_kernels\n"
        "started = time.monotonic()\n"
        "module = native_kernels.refresh()\n"
        "print(module is None, round(time.monotonic() - started, 2), native_kernels.describe())\n",
        {
            native_kernels.DIR_SWITCH: str(tmp_path / "kernels"),
            "CXX": "/bin/false",
            native_kernels.ENV_SWITCH: "1",
        },
    )
    out, _ = nxt.communicate(timeout=60)
    fallback, seconds, described = out.split(" ", 2)
    assert fallback == "True" and float(seconds) < 5, out
    assert "being built in the background" in described
    # Its build child got past what the killed one left and finished (failing on /bin/false).
    wait_for(lambda: (folder / native_kernels.FAILED).exists(), 90, "finished build")
    assert not (folder / native_kernels.TORCH_BATON).exists()
    assert not native_kernels._lock_held(folder)


def test_two_installs_build_in_different_folders(tmp_path):
    """An editable install and a test clone: the same sources in two places never share a
    build folder (nor its build.ninja); one install always finds its own."""
    engine = Path(native_kernels.__file__).parent
    copies = []
    for name in ("editable", "clone"):
        copy = tmp_path / name / "engine"
        copy.mkdir(parents=True)
        shutil.copy(engine / "native_kernels.py", copy / "native_kernels.py")
        shutil.copytree(native_kernels.SOURCE_DIR, copy / "native")
        copies.append(copy / "native_kernels.py")
    code = "import runpy, sys; print(runpy.run_path(sys.argv[1])['target']().folder)"
    folders = [
        subprocess.run(
            [sys.executable, "-c", code, str(path)],
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp_path,
        ).stdout.strip()
        for path in [*copies, copies[0]]
    ]
    assert folders[0] != folders[1] and folders[0] == folders[2]
    assert str(native_kernels.target().folder) not in folders


def test_built_kernels_are_adopted_at_the_next_load_only(monkeypatch):
    """A process sees kernels another process built when it next loads (refresh), never in the
    middle of what it runs."""
    built = native_kernels.target()
    assert native_kernels.kernels() is not None  # built (once per machine) or found
    assert (built.folder / native_kernels.READY).is_file()
    monkeypatch.setattr(native_kernels, "_STATE", native_kernels._Kernels())
    native_kernels._STATE.checked = True  # as after a load that found no kernels
    assert native_kernels.kernels() is None
    assert native_kernels.refresh() is not None and native_kernels.kernels() is not None
    assert native_kernels._STATE.builder is None  # adopted, not built
