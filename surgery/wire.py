"""Protobuf's wire format, read and written by hand where parsing a whole message would cost what it saves: the
loader's first look at bytes that may not be a model at all, and a model's weights located in its file without
copying them (surgery.file_weights). Messages are walked field by field; nothing here knows ONNX."""

from __future__ import annotations

from typing import NamedTuple

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5  # the wire types a field can have (3 and 4 are obsolete groups)


class Field(NamedTuple):
    number: int
    wire: int
    start: int  # where the field's tag begins
    body: int  # where its payload begins (after the tag and, for LENGTH, the length)
    end: int  # one past its payload


def read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int] | None:
    """(value, position after it), or None where the bytes end inside it. ValueError past 64 bits."""
    result = shift = 0
    while pos < len(data):
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")
    return None


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tag(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def fields(data: bytes | memoryview, start: int = 0, end: int | None = None):
    """The fields of the message in data[start:end], in order. ValueError where the bytes are not well formed
    (a caller that must tell truncated from foreign bytes walks them itself: surgery.model._scan_top_level)."""
    end = len(data) if end is None else end
    pos = start
    while pos < end:
        got = read_varint(data, pos)
        if got is None:
            raise ValueError(f"a field tag runs past byte {end}")
        key, body = got
        number, wire = key >> 3, key & 7
        if wire == VARINT:
            got = read_varint(data, body)
            if got is None:
                raise ValueError(f"field {number} runs past byte {end}")
            stop = got[1]
        elif wire == FIXED64:
            stop = body + 8
        elif wire == FIXED32:
            stop = body + 4
        elif wire == LENGTH:
            got = read_varint(data, body)
            if got is None:
                raise ValueError(f"field {number} runs past byte {end}")
            length, body = got
            stop = body + length
        else:
            raise ValueError(f"field {number} has wire type {wire}")
        if stop > end or number == 0:
            raise ValueError(f"field {number} at byte {pos} runs past byte {end}")
        yield Field(number, wire, pos, body, stop)
        pos = stop
