"""The GGUF reader of the "gguf" quantization (inference/gguf_tensors.py) steps over metadata
arrays and gives the same tensors, at the same offsets, and the same scalar fields as the gguf
package's reader: on the real registry GGUF files and on a file with arrays of every kind."""

from __future__ import annotations

import numpy as np
import pytest
from engines import QWEN_GGUF, SMOLLM_GGUF
from gguf import GGUFReader, GGUFValueType, GGUFWriter

from memosight_lsp.inference.gguf_tensors import TensorReader


def assert_same_tensors_and_scalars(path) -> None:
    full, light = GGUFReader(path), TensorReader(path)
    assert [t.name for t in light.tensors] == [t.name for t in full.tensors]
    for ours, theirs in zip(light.tensors, full.tensors, strict=True):
        assert ours.tensor_type == theirs.tensor_type and ours.n_bytes == theirs.n_bytes
        assert list(ours.shape) == list(theirs.shape) and ours.data.shape == theirs.data.shape
        assert ours.data_offset == theirs.data_offset
    assert np.array_equal(light.tensors[-1].data, full.tensors[-1].data)
    scalars = {k: f for k, f in full.fields.items() if GGUFValueType.ARRAY not in f.types}
    assert list(light.fields) == list(scalars)
    for name, field in scalars.items():
        ours = light.fields[name]
        assert [bytes(p) for p in ours.parts] == [bytes(p) for p in field.parts], name
        assert ours.data == field.data and ours.types == field.types, name


@pytest.mark.parametrize("path", [QWEN_GGUF, SMOLLM_GGUF], ids=lambda p: p.name)
def test_real_files_read_alike(path):
    if not path.is_file():
        pytest.skip(f"{path} not fetched (shared/models/fetch.sh)")
    assert_same_tensors_and_scalars(path)
    assert any(
        GGUFValueType.ARRAY in f.types for f in GGUFReader(path).fields.values()
    )  # the tokenizer's arrays were there to step over


def test_arrays_of_every_kind_are_stepped_over(tmp_path):
    path = tmp_path / "arrays.gguf"
    writer = GGUFWriter(str(path), "llama")
    writer.add_uint32("general.alignment", 64)
    writer.add_array("test.strings", ["", "a", "ünïcode", "x" * 300])
    writer.add_array("test.ints", [1, -2, 3])
    writer.add_array("test.floats", [0.5, 1.5])
    writer.add_array("test.bools", [True, False, True])
    writer.add_array("test.nested", [[1, 2], [3]])
    writer.add_string("test.after", "still read")
    writer.add_float32("test.scale", 0.25)
    writer.add_tensor("one", np.arange(12, dtype=np.float32).reshape(3, 4))
    writer.add_tensor("two", np.ones((2, 64), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert_same_tensors_and_scalars(path)
    light = TensorReader(path)
    assert bytes(light.fields["test.after"].parts[-1]) == b"still read"
    assert light.tensors[0].data.tolist() == np.arange(12).reshape(3, 4).tolist()
    assert "test.strings" not in light.fields
