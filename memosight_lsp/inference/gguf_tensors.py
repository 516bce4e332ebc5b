"""A GGUF file's tensors and scalar metadata, read without parsing its metadata arrays.

`gguf.GGUFReader` makes a numpy view of every element of every metadata array: for a code
model's tokenizer (150k tokens and as many merges, each a string) that is most of a minute on a
slow machine, and the quantization "gguf" needs only the tensors' types, shapes and bytes and a
few scalar fields (inference/gguf.py mixed_plan). `TensorReader` is that reader with arrays
stepped over: their element counts and string lengths are read, nothing else. Its `tensors` are
GGUFReader's, the same objects over the same bytes; `fields` holds the scalar and string fields
only.
"""

from __future__ import annotations

import struct

import numpy as np
from gguf import GGUFReader, GGUFValueType
from gguf.gguf_reader import ReaderField

# Bytes of one element of the fixed-size value types.
FIXED_SIZES = {
    GGUFValueType.UINT8: 1,
    GGUFValueType.INT8: 1,
    GGUFValueType.BOOL: 1,
    GGUFValueType.UINT16: 2,
    GGUFValueType.INT16: 2,
    GGUFValueType.UINT32: 4,
    GGUFValueType.INT32: 4,
    GGUFValueType.FLOAT32: 4,
    GGUFValueType.UINT64: 8,
    GGUFValueType.INT64: 8,
    GGUFValueType.FLOAT64: 8,
}


class TensorReader(GGUFReader):
    """GGUFReader without its metadata arrays (see the module's docstring)."""

    def _build_fields(self, offs: int, count: int) -> int:
        view = memoryview(self.data)  # type: ignore[arg-type]
        order = ">" if self.byte_order == "S" else "<"
        for _ in range(int(count)):
            start = offs
            key_length, key = self._get_str(offs)
            offs += int(key_length.nbytes + key.nbytes)
            raw_type = self._get(offs, np.uint32)
            offs += int(raw_type.nbytes)
            if GGUFValueType(raw_type[0]) == GGUFValueType.ARRAY:
                offs = _after_array(view, offs, order)
                continue
            size, parts, indices, types = self._get_field_parts(offs, raw_type[0])
            self._push_field(
                ReaderField(
                    start,
                    str(bytes(key), encoding="utf-8"),
                    [key_length, key, raw_type, *parts],
                    [index + 3 for index in indices],
                    types,
                ),
                skip_sum=True,
            )
            offs += size
        return offs


def _after_array(view: memoryview, offs: int, order: str) -> int:
    """The offset just after the array value at `offs` (its element type, count, elements).
    Each step moves past one element: the loops end with the array's count."""
    (raw_type,) = struct.unpack_from(f"{order}I", view, offs)
    (length,) = struct.unpack_from(f"{order}Q", view, offs + 4)
    offs += 12
    element = GGUFValueType(raw_type)
    if element in FIXED_SIZES:
        return offs + FIXED_SIZES[element] * int(length)
    if element == GGUFValueType.STRING:
        size = struct.Struct(f"{order}Q")
        for _ in range(int(length)):
            offs += 8 + size.unpack_from(view, offs)[0]
        return offs
    if element == GGUFValueType.ARRAY:
        for _ in range(int(length)):
            offs = _after_array(view, offs, order)
        return offs
    raise ValueError(f"unknown GGUF value type {raw_type}")
