"""A model's load reads the kept weights while the tokenizer loads (inference/overlap.py): the
scatter read fills every buffer with the file's bytes (with or without preadv), a short file
reads short, the work beside the read runs once and its error reaches whoever needs its value.
The load itself: tests/test_quantized_cache.py."""

from __future__ import annotations

import os
import threading

import pytest
import torch

from memosight_lsp.inference import overlap


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


def test_without_preadv_the_buffers_are_read_one_by_one(data_file, monkeypatch):
    monkeypatch.delattr(os, "preadv")  # as on Windows
    tensors = buffers_of([10, 0, 1000, 7, 50_000, 300_000])
    with data_file.open("rb") as handle:
        count = overlap.read_into(handle.fileno(), views(tensors), 10)
    assert count == 300_000 - 10
    joined = b"".join(tensor.numpy().tobytes() for tensor in tensors)
    assert joined[:count] == data_file.read_bytes()[10:]
