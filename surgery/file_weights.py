"""A model's large weights left in its own file. Every step of a fix makes a new version of the whole model, and
protobuf copies every weight into each: the original, the current version and the one before are held, and each
is serialized again for its verification. Loaded with `load_model(path, weights_in_file=True)`, the main graph's
float initializers of `FROM_BYTES` or more are parsed without their bytes and point at them in the .onnx file
itself, as ONNX external data does (location: the file's name, offset and length into it), so every version
shares one copy: the file on disk. What reads weights already resolves external data against the model's folder.

A fingerprint is a promise across processes (a recipe names the model it was made for and the model it made), so
such a model's fingerprint is the one it has with its weights inline: `fingerprint` hashes that serialization with
the bytes streamed from the file, never held whole; `write_inline` writes it the same way, and a weight read back
in (model.with_weights) takes the form the file gives it (`wrote_location`). Users: fix, replay, split, upgrade,
quantize, survey's cells and the app's path opens."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NamedTuple

from onnx import ModelProto, TensorProto

from surgery.wire import LENGTH, VARINT, Field, fields, read_varint, tag, varint

# a float initializer this large or larger stays in the file; smaller ones are parsed as usual
FROM_BYTES = 64 * 1024

_MODEL_GRAPH, _GRAPH_INITIALIZER = 7, 5  # ModelProto.graph, GraphProto.initializer
_DATA_TYPE, _RAW_DATA, _EXTERNAL_DATA, _DATA_LOCATION = 2, 9, 13, 14  # TensorProto's fields
# only float weights are left in the file: rules read integer tensors' values (int64 constants cast down, int8
# weights dequantized) as they read inline ones, while large float tensors are read by onnxruntime alone, which
# resolves external data (shape inference keeps no float tensor past 64 elements: graph.INFER_KEEP_FLOATS)
_FLOATS = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}
_CHUNK = 4 * 1024 * 1024  # bytes read from the file at a time
_WROTE_DEFAULT = tag(_DATA_LOCATION, VARINT) + varint(TensorProto.DEFAULT)


class Stripped(NamedTuple):
    data: bytes  # the model's bytes without the weights left in the file
    # (index among the main graph's initializers, offset in the file, length) of each weight left there
    places: list[tuple[int, int, int]]
    defaults: frozenset[int]  # the offsets of those whose tensor wrote data_location (as DEFAULT)


@dataclass(frozen=True)
class OwnFile:
    """The model's file, where its large weights were left (Model.own_file), and the offsets of the weights
    whose tensor wrote its data_location as DEFAULT (onnx.save does after onnx.load read external data in): the
    others wrote none. With these, the model as loaded whole is known byte for byte."""

    path: Path
    defaults: frozenset[int] = frozenset()

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def parent(self) -> Path:
        return self.path.parent

    def __fspath__(self) -> str:
        return os.fspath(self.path)


def strip(data: bytes | memoryview, from_bytes: int = FROM_BYTES) -> Stripped | None:
    """`data` (a whole .onnx file) without the raw bytes of the main graph's initializers of `from_bytes` or more,
    with where each was; None where there is none to leave, or the bytes are not plainly one model (a graph
    given twice, a tensor already external): such a file is parsed as it is. ValueError: not well formed."""
    mv = memoryview(data)
    graphs = [f for f in fields(mv) if f.number == _MODEL_GRAPH and f.wire == LENGTH]
    if len(graphs) != 1:
        return None
    graph = graphs[0]
    pieces: list = []  # the graph's new payload
    places: list[tuple[int, int, int]] = []
    defaults: set[int] = set()
    kept, index = graph.body, 0
    for f in fields(mv, graph.body, graph.end):
        if f.number != _GRAPH_INITIALIZER or f.wire != LENGTH:
            continue
        if f.end - f.body < from_bytes:  # too small to hold a weight this large: not walked
            index += 1
            continue
        raw, default = _raw_field(mv, f, from_bytes)
        if raw is not None:
            if default:
                defaults.add(raw.body)
            pieces += [mv[kept : f.start], tag(_GRAPH_INITIALIZER, LENGTH)]
            pieces += [
                varint((f.end - f.body) - (raw.end - raw.start)),
                mv[f.body : raw.start],
                mv[raw.end : f.end],
            ]
            places.append((index, raw.body, raw.end - raw.body))
            kept = f.end
        index += 1
    if not places:
        return None
    pieces.append(mv[kept : graph.end])
    size = sum(len(p) for p in pieces)
    head = [mv[: graph.start], tag(_MODEL_GRAPH, LENGTH), varint(size)]
    return Stripped(b"".join([*head, *pieces, mv[graph.end :]]), places, frozenset(defaults))


def _raw_field(mv: memoryview, tensor: Field, from_bytes: int) -> tuple[Field | None, bool]:
    """The tensor's one raw_data field when it is `from_bytes` long or longer, the tensor holds floats and is
    plainly in the file (no external data; a data_location, if written, DEFAULT), and whether it wrote its
    data_location; (None, False) for any other tensor."""
    raw, dtype, default = None, None, False
    for f in fields(mv, tensor.body, tensor.end):
        if f.number == _EXTERNAL_DATA or (f.number == _RAW_DATA and raw is not None):
            return None, False
        if f.number == _DATA_LOCATION:
            if f.wire != VARINT or default or read_varint(mv, f.body)[0] != TensorProto.DEFAULT:
                return None, False
            default = True
        elif f.number == _RAW_DATA and f.wire == LENGTH:
            raw = f
        elif f.number == _DATA_TYPE and f.wire == VARINT:
            dtype = read_varint(mv, f.body)[0]
    if raw is None or dtype not in _FLOATS or raw.end - raw.body < from_bytes:
        return None, False
    return raw, default


# the files this process left weights in, by (resolved path, checksum): which of their tensors wrote a
# data_location, for a reader that reads such a weight back in (model.with_weights) and must give it the form
# the file has, whoever calls it (a fix primitive knows the model's folder, not its Model)
_LEFT: dict[tuple[str, str], frozenset[int]] = {}


def remember(own: OwnFile, checksum: str) -> None:
    _LEFT[(str(own.path.resolve()), checksum)] = own.defaults


def wrote_location(base_dir: str | Path, info: dict[str, str]) -> bool | None:
    """For an external-data reference (its entries, `info`) that this process made into a file it left weights
    in: whether the tensor wrote its data_location there. None for any other reference."""
    if "checksum" not in info or not info.get("location"):
        return None
    defaults = _LEFT.get((str((Path(base_dir) / info["location"]).resolve()), info["checksum"]))
    if defaults is None:
        return None
    offset = info.get("offset", "0")
    return offset.isdigit() and int(offset) in defaults


def refer(proto: ModelProto, places: list[tuple[int, int, int]], file_name: str, checksum: str) -> bool:
    """Point each stripped initializer at its bytes in the file `file_name` (in the model's folder), with the
    file's SHA-1 `checksum` (ONNX's external-data key): two files with one graph and one layout, two checkpoints
    of a model, then differ as held in memory, where caches key on a model's serialization. False, and nothing
    changed, where the parsed model's initializers are not the ones `strip` walked."""
    initializers = proto.graph.initializer
    if any(
        index >= len(initializers)
        or initializers[index].HasField("raw_data")
        or initializers[index].data_type not in _FLOATS
        for index, _, _ in places
    ):
        return False
    for index, offset, length in places:
        point_at(initializers[index], file_name, offset, length, checksum)
    return True


def point_at(tensor: TensorProto, location: str, offset: int, length: int, checksum: str = "") -> None:
    """`tensor`'s bytes are `length` bytes at `offset` of the file `location` (relative to the model's folder);
    `checksum`: the file's SHA-1, where given."""
    tensor.ClearField("raw_data")
    del tensor.external_data[:]
    entries = [("location", location), ("offset", str(offset)), ("length", str(length))]
    for key, value in entries + ([("checksum", checksum)] if checksum else []):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    tensor.data_location = TensorProto.EXTERNAL


def write_inline(proto: ModelProto, own_file: OwnFile, out: BinaryIO) -> None:
    """Write the model to `out` as one message with the weights it keeps in `own_file` inline, copied from the
    file a chunk at a time: the bytes `with_weights` would give, without the weights in memory."""
    with open(own_file, "rb") as file:
        for piece in _inline(memoryview(proto.SerializeToString(deterministic=True)), own_file):
            if isinstance(piece, tuple):
                for chunk in _chunks(file, *piece):
                    out.write(chunk)
            else:
                out.write(piece)


def fingerprint(proto: ModelProto, own_file: OwnFile | None = None) -> str:
    """A stable hash of the model's content: sha256 of its deterministic serialization. With `own_file`, the main
    graph's initializers that point into that file are hashed as if their bytes were inline, as the same model
    loaded whole serializes (the bytes read from the file a chunk at a time)."""
    data = proto.SerializeToString(deterministic=True)
    digest = hashlib.sha256()
    if own_file is None:
        digest.update(data)
        return digest.hexdigest()[:16]
    mv = memoryview(data)
    with open(own_file, "rb") as file:
        for piece in _inline(mv, own_file):
            for chunk in _chunks(file, *piece) if isinstance(piece, tuple) else (piece,):
                digest.update(chunk)
    return digest.hexdigest()[:16]


def _inline(mv: memoryview, own: OwnFile) -> list:
    """The serialization `mv` with each main-graph initializer that points into the file `own` rewritten as
    inline: pieces of bytes, and (offset, length) ranges of the file."""
    graphs = [f for f in fields(mv) if f.number == _MODEL_GRAPH and f.wire == LENGTH]
    if len(graphs) != 1:
        return [mv]
    graph = graphs[0]
    body: list = []
    kept = graph.body
    for f in fields(mv, graph.body, graph.end):
        place = _place_in(mv, f, own.name) if f.number == _GRAPH_INITIALIZER and f.wire == LENGTH else None
        if place is None:
            continue
        offset, length, before, tail = place
        wrote = [_WROTE_DEFAULT] if offset in own.defaults else []  # its data_location, as the file has it
        after = (
            [p for n, p in tail if n < _DATA_LOCATION] + wrote + [p for n, p in tail if n > _DATA_LOCATION]
        )
        raw_head = tag(_RAW_DATA, LENGTH) + varint(length)
        tensor_size = sum(len(p) for p in before) + len(raw_head) + length + sum(len(p) for p in after)
        body += [mv[kept : f.start], tag(_GRAPH_INITIALIZER, LENGTH) + varint(tensor_size), *before, raw_head]
        body += [(offset, length), *after]
        kept = f.end
    if kept == graph.body:
        return [mv]
    body.append(mv[kept : graph.end])
    size = sum(p[1] if isinstance(p, tuple) else len(p) for p in body)
    return [mv[: graph.start], tag(_MODEL_GRAPH, LENGTH) + varint(size), *body, mv[graph.end :]]


def _place_in(mv: memoryview, tensor: Field, name: str):
    """(offset, length, fields before raw_data, (number, field) after it) of a tensor whose data lies in the file
    `name` and is referred to by location, offset, length and checksum alone; None for any other tensor."""
    before, after, refs, external = [], [], {}, False
    for f in fields(mv, tensor.body, tensor.end):
        if f.number == _DATA_LOCATION and f.wire == VARINT:
            external = read_varint(mv, f.body)[0] == TensorProto.EXTERNAL
        elif f.number == _EXTERNAL_DATA and f.wire == LENGTH:
            entry = {
                e.number: bytes(mv[e.body : e.end]).decode("utf-8", "replace")
                for e in fields(mv, f.body, f.end)
            }
            refs[entry.get(1, "")] = entry.get(2, "")
        elif f.number == _RAW_DATA:
            return None
        elif f.number < _RAW_DATA:
            before.append(mv[f.start : f.end])
        else:
            after.append((f.number, mv[f.start : f.end]))
    if (
        not external
        or refs.get("location") != name
        or set(refs) - {"location", "offset", "length", "checksum"}
    ):
        return None
    if not refs.get("offset", "0").isdigit() or not refs.get("length", "").isdigit():
        return None
    return int(refs.get("offset", "0")), int(refs["length"]), before, after


def _chunks(file, offset: int, length: int):
    """`length` bytes of `file` from `offset`, a chunk at a time."""
    file.seek(offset)
    while length > 0:
        chunk = file.read(min(_CHUNK, length))
        if not chunk:
            raise ValueError(f"{file.name} ends before byte {offset + length}: changed since it was read")
        yield chunk
        length -= len(chunk)
