"""A model's load reads the kept weights while the tokenizer loads (inference/overlap.py): the
scatter read fills every tensor with the file's bytes, a short or broken file is an error, the
work beside the read runs once and its error reaches whoever needs its value."""

from __future__ import annotations

import os
import threading

import pytest
import torch

from memosight_lsp.inference import overlap, quantized_cache
from memosight_lsp.inference.fast_tokenizer import FastTokenizer
from memosight_lsp.inference.loading import load_model
from tests.test_quantized_cache import private_cache, run, wide_folder  # noqa: F401


def buffers_of(sizes: list[int]) -> list[torch.Tensor]:
    return [torch.zeros(size, dtype=torch.uint8) for size in sizes]


def views(tensors: list[torch.Tensor]) -> list[memoryview]:
    return [tensor.numpy().data for tensor in tensors]


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(os.urandom(300_000))
    return path


@pytest.mark.parametrize(
    "sizes",
    [
        [10, 0, 1000, 7, 50_000],
        [97] * 2500,  # more buffers than one call takes
        [299_990],
    ],
)
def test_the_scatter_read_fills_each_buffer_in_order(data_file, sizes):
    tensors = buffers_of(sizes)
    with data_file.open("rb") as handle:
        count = overlap.read_into(handle.fileno(), views(tensors), 10)
    assert count == sum(sizes)
    expected = data_file.read_bytes()[10 : 10 + sum(sizes)]
    assert b"".join(tensor.numpy().tobytes() for tensor in tensors) == expected


def test_a_short_file_reads_short(data_file):
    tensors = buffers_of([200_000, 200_000])
    with data_file.open("rb") as handle:
        count = overlap.read_into(handle.fileno(), views(tensors), 0)
    assert count == 300_000
    assert tensors[1][:100_000].numpy().tobytes() == data_file.read_bytes()[200_000:]


def test_the_work_beside_runs_while_the_read_runs_on_its_own_thread(data_file):
    seen: list[set[str]] = []
    tensors = buffers_of([300_000])

    def meanwhile() -> None:
        seen.append({thread.name for thread in threading.enumerate()})

    with data_file.open("rb") as handle:
        count = overlap.read_meanwhile(handle.fileno(), views(tensors), 0, meanwhile)
    assert count == 300_000 and tensors[0].numpy().tobytes() == data_file.read_bytes()
    assert len(seen) == 1  # ran once, on this thread (a thread of its own would be listed)
    assert threading.current_thread().name != "memosight-weights-read"


def test_the_reads_error_reaches_the_caller_after_the_work_beside():
    ran = []
    with pytest.raises(OSError):
        overlap.read_meanwhile(-1, views(buffers_of([10])), 0, lambda: ran.append(True))
    assert ran == [True]


def test_deferred_work_runs_once_and_its_error_is_raised_where_needed():
    calls = []

    def fails() -> int:
        calls.append(1)
        raise ValueError("broken tokenizer")

    deferred = overlap.Deferred(fails)
    deferred.run()  # as read_meanwhile calls it: keeps the error
    deferred.run()
    for _ in range(2):
        with pytest.raises(ValueError, match="broken tokenizer"):
            deferred.result()
    assert calls == [1]
    assert overlap.Deferred(lambda: 7).result() == 7


def test_a_kept_file_with_its_end_cut_off_is_made_again(wide_folder, tmp_path):  # noqa: F811
    first = load_model(wide_folder, device="cpu", dtype="bfloat16", quantization="int8")
    (kept,) = (tmp_path / "cache" / "memosight" / "quantized").glob("*.safetensors")
    whole = kept.read_bytes()
    kept.write_bytes(whole[:-100])  # the header whole, the last tensor short
    with pytest.raises(ValueError, match="truncated"):
        quantized_cache.read_tensors(kept)
    again = load_model(wide_folder, device="cpu", dtype="bfloat16", quantization="int8")
    assert run(again) == run(first)
    assert kept.stat().st_size == len(whole)


def test_the_cached_load_reads_the_tokenizer_beside_the_weights(
    wide_folder,
    monkeypatch,  # noqa: F811
):
    load_model(wide_folder, device="cpu", dtype="bfloat16", quantization="int8")
    beside: list[str] = []
    original = quantized_cache.read_tensors

    def watched(path, meanwhile=None):  # the real read, noting what ran beside it
        beside.append("meanwhile given" if meanwhile is not None else "none")
        return original(path, meanwhile)

    monkeypatch.setattr(quantized_cache, "read_tensors", watched)
    loaded = load_model(wide_folder, device="cpu", dtype="bfloat16", quantization="int8")
    assert beside == ["meanwhile given"]
    assert isinstance(loaded.tokenizer, FastTokenizer)  # the kept tokenizer, read beside
    assert loaded.tokenizer.encode("def f(x):\n    return x\n", add_special_tokens=False)
