"""Load ONNX models safely: from a path or bytes, with external data, without reading weights it does not need.

Every way a file can be bad ends in one `ModelLoadError` whose `kind` names the class of problem and whose
message names the file and what would work. Nothing here mutates the file on disk.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import io
import itertools
import mmap
import os
import shutil
import stat
import tempfile
import threading
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError, EncodeError
from onnx import ModelProto, TensorProto

from surgery import file_weights
from surgery.text import size_text
from surgery.wire import read_varint

DEFAULT_MAX_BYTES = int(os.environ.get("ONNX_SURGERY_MAX_BYTES", 64 * 1024**3))
PROTOBUF_LIMIT = 2 * 1024**3 - 1  # a single serialized protobuf cannot exceed 2 GiB


class LoadErrorKind(StrEnum):
    EMPTY = "empty"
    NOT_PROTOBUF = "not-protobuf"
    TRUNCATED = "truncated"
    NOT_MODEL = "not-a-model"
    NO_GRAPH = "no-graph"
    EXTERNAL_MISSING = "external-data-missing"
    EXTERNAL_UNSAFE = "external-data-unsafe"
    EXTERNAL_INVALID = "external-data-invalid"
    TOO_LARGE = "too-large"
    NOT_FOUND = "not-found"
    NOT_A_FILE = "not-a-file"
    CHANGED = "changed-on-disk"


class ModelLoadError(Exception):
    """The one error every bad input ends in. `str(err)` is a single line fit for a user."""

    def __init__(self, kind: LoadErrorKind, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass
class ExternalFile:
    location: str  # as written in the model
    path: Path  # resolved, inside the model's folder
    size: int  # bytes on disk
    tensors: list[str] = field(default_factory=list)
    bytes_used: int = 0  # sum of the tensors' lengths


@dataclass
class Model:
    """A parsed model. External weights stay on disk: `proto` holds their references, `base_dir` where they live."""

    proto: ModelProto
    source: str  # a path, or "<bytes>"/the upload's name
    base_dir: Path | None  # folder external data is resolved against
    file_bytes: int
    external: list[ExternalFile] = field(default_factory=list)
    content_hash: str | None = None  # sha256 of the bytes parsed, when load_model was asked for it
    stamp: tuple | None = None  # the file's (device, inode, size, mtime ns) when it was read
    own_file: file_weights.OwnFile | None = None  # the file, when its large weights were left in it

    def file_as_read(self) -> str | None:
        """The path of the file this model was read from while the file is still the one read (same inode, size
        and modification time), for a backend that reads the file itself rather than a serialization of `proto`:
        None for a model from bytes, or a file changed since. The caller vouches that `proto` is unedited."""
        if self.stamp is None:
            return None
        try:
            return self.source if _stamp(os.stat(self.source)) == self.stamp else None
        except OSError:
            return None

    def check_unchanged(self) -> None:
        """Raise ModelLoadError when the weights left in the model's file (`own_file`) may no longer be the ones
        read: the file was changed or replaced since."""
        if self.own_file is not None and self.file_as_read() is None:
            raise ModelLoadError(
                LoadErrorKind.CHANGED,
                f"{self.source}: the file changed on disk after it was read, and its weights are read from it: "
                "nothing written; run again on the file as it is now",
            )

    @property
    def has_external_data(self) -> bool:
        return bool(self.external)

    @property
    def external_bytes(self) -> int:
        return sum(f.bytes_used for f in self.external)

    def fingerprint(self) -> str:
        return fingerprint(self.proto, self.own_file)

    def files(self) -> list[Path]:
        """The files this model was read from: the model file and its external-data files (nothing for bytes)."""
        if self.base_dir is None:
            return []
        return [Path(self.source), *(Path(self.base_dir) / f.location for f in self.external)]


_GC_LOCK = threading.Lock()
_gc_pauses = 0  # threads inside gc_paused() now
_gc_was_on = False  # whether the collector was on when the first of them paused it


@contextlib.contextmanager
def gc_paused():
    """Python's cycle collector paused while a big acyclic structure is built (a parsed model's tensor list, the
    facts' 100k-entry maps, a view's groups). Each container built triggers collections that walk every object
    the process holds, and a Streamlit server holds many: opening a 100k-node model in the app, the declared facts
    took 1.2 CPU s with the collector on and 0.6 s with it paused (bench/app_open.py). Nothing built here makes a
    cycle; refcounts free it as usual, and the collector runs again afterwards.

    The collector is one switch for the whole process, and the app's threads (sessions, the background work, the
    start model read ahead) pause it at once: the last one out turns it back on, if it was on before the first
    came in (each restoring what it found would leave it off when two overlap)."""
    global _gc_pauses, _gc_was_on
    with _GC_LOCK:
        if _gc_pauses == 0:
            _gc_was_on = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_on:
                gc.enable()


def fingerprint(proto: ModelProto, own_file: file_weights.OwnFile | None = None) -> str:
    """A stable hash of the model's content (deterministic serialization). `own_file`: the model's file, when its
    large weights were left in it: hashed as if inline (the fingerprint the model has loaded whole)."""
    return file_weights.fingerprint(proto, own_file)


# --- copies ----------------------------------------------------------------------------------------------------

# protobuf's Python runtime (upb) copies a repeated number field one element at a time, but serializes and parses
# a packed one as a block of memory; bytes (raw_data) it copies as a block. So a model whose weights are numbers
# in float_data (Paddle's exports: PP-OCRv3's recognizer holds 2.7M floats in Constants) copies 8x faster through
# its wire form (16 ms by CopyFrom, 2 ms through the wire), and one whose weights are raw_data 5x slower (Faster
# R-CNN, 76 MB: 25 ms and 127 ms). Past this many number elements, the wire form is used: a model's (it may
# hold raw_data besides), a tensor's (one tensor of 64 floats copies as fast either way, of 4096 24x faster).
_COPY_THROUGH_WIRE = {ModelProto: 1 << 17, TensorProto: 64}
_LOOKED_AT = 2048  # initializers, and nodes


def _numbers_in(t: TensorProto) -> int:
    return len(t.float_data) + len(t.int64_data) + len(t.int32_data) + len(t.double_data) + len(t.uint64_data)


def _number_elements(message, enough: int) -> int:
    """How many elements the tensors of `message` (a TensorProto, or a ModelProto's main graph: initializers and
    Constant values) hold in number fields, counted until `enough`."""
    if isinstance(message, TensorProto):
        return _numbers_in(message)
    if not isinstance(message, ModelProto):
        return 0
    graph = message.graph
    # the first initializers and nodes only: looking at one costs ~1 us, copying it a fifth of that (a 100k-node
    # stack copies in 17-48 ms; looking at all its 43k initializers and 100k nodes took 40 and 110 ms more). An
    # exporter writes all its weights one way, so the first ones tell.
    head = itertools.islice(graph.node, _LOOKED_AT)
    constants = (a.t for n in head if n.op_type == "Constant" for a in n.attribute if a.name == "value")
    count = 0
    for t in itertools.chain(itertools.islice(graph.initializer, _LOOKED_AT), constants):
        count += _numbers_in(t)
        if count >= enough:
            break
    return count


def copy_into(target, source) -> None:
    """`target` (empty) becomes a copy of `source`, a message of its type, by the faster of protobuf's two ways for
    what `source` holds (see above). `source` is never changed."""
    enough = _COPY_THROUGH_WIRE.get(type(source))
    if enough is not None and _number_elements(source, enough) >= enough:
        try:
            target.ParseFromString(source.SerializeToString())
            return
        except (EncodeError, ValueError):  # past protobuf's 2 GiB: copied field by field
            target.Clear()
    target.CopyFrom(source)


def copy_message(source):
    """A copy of `source` (a ModelProto or TensorProto; any message), as `copy_into` makes it."""
    out = type(source)()
    copy_into(out, source)
    return out


# --- text a model holds --------------------------------------------------------------------------------------


def decoded(value):
    """A protobuf string field that is not valid UTF-8 comes back as bytes (ONNX is proto2, which does not check):
    as text, with each undecodable byte as a \\xNN escape. Anything else is returned as it is."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    return value


def name_not_utf8(model: ModelProto) -> str | None:
    """One line naming the first node whose name, op type or tensor names are not UTF-8 text (None when all are):
    tools that read every name as text (onnxruntime's Python, its quantizer) cannot take such a model."""
    for node in model.graph.node:
        for name in (node.name, node.op_type, *node.input, *node.output):
            if isinstance(name, bytes):
                return f"the name '{decoded(name)}' (node '{decoded(node.name)}') is not UTF-8 text"
    return None


def jsonable(obj):
    """`obj` with every bytes value and key `decoded`, in dicts, lists and tuples at any depth."""
    if isinstance(obj, dict):
        return {decoded(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    return decoded(obj)


def dumps(obj, **kwargs) -> str:
    """json.dumps for what is read from a model: names that are not UTF-8 are written `decoded` (the one place
    every JSON output of the CLI and the probe cache goes through)."""
    import json

    try:
        return json.dumps(obj, **kwargs)
    except TypeError:  # bytes somewhere (a value or a key): walk the tree only then
        return json.dumps(jsonable(obj), **kwargs)


# --- wire-format scan: tells "not a protobuf", "truncated" and "some other message" apart -------------------

_MODEL_FIELDS = {f.number: f for f in ModelProto.DESCRIPTOR.fields}
_WIRE_OF_TYPE = {  # protobuf FieldDescriptor.TYPE_* -> wire type
    1: 1,
    2: 5,
    3: 0,
    4: 0,
    5: 0,
    6: 1,
    7: 5,
    8: 0,
    9: 2,
    10: 3,
    11: 2,
    12: 2,
    13: 0,
    14: 0,
    15: 5,
    16: 1,
    17: 0,
    18: 0,
}


def _scan_top_level(data: bytes | memoryview) -> tuple[str, str]:
    """Walk the top-level fields. Returns (verdict, detail): ok | not-protobuf | truncated | not-model.

    An invalid tag anywhere means the bytes are not protobuf. Running off the end means truncated, but only
    when every field read so far is one a ModelProto has; otherwise the bytes were never a model.
    """
    pos, n = 0, len(data)
    foreign: list[str] = []

    def cut(detail: str) -> tuple[str, str]:
        return ("not-protobuf", detail) if foreign or pos == 0 else ("truncated", detail)

    while pos < n:
        start = pos
        try:
            tag = read_varint(data, pos)
        except ValueError:
            return "not-protobuf", f"bad varint at byte {pos}"
        if tag is None:
            return cut(f"file ends inside a field tag at byte {pos}")
        key, pos = tag
        number, wire = key >> 3, key & 7
        if number == 0 or wire in (3, 4, 6, 7):
            return "not-protobuf", f"invalid field tag at byte {start}"
        if wire == 0:
            try:
                v = read_varint(data, pos)
            except ValueError:
                return "not-protobuf", f"bad varint at byte {pos}"
            if v is None:
                return cut(f"file ends inside field {number}")
            pos = v[1]
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:  # length-delimited
            v = read_varint(data, pos)
            if v is None:
                return cut(f"file ends inside field {number}")
            length, pos = v
            if pos + length > n:
                if start == 0 and length > n * 4:
                    return "not-protobuf", f"first field claims {length} bytes of a {n}-byte file"
                return cut(f"field {number} needs {length} bytes, {n - pos} left")
            pos += length
        if pos > n:
            return cut(f"file ends inside field {number}")
        expected = _MODEL_FIELDS.get(number)
        if (
            expected is None
            or _WIRE_OF_TYPE.get(expected.type) != wire
            and not (
                getattr(expected, "is_repeated", False) and wire == 2  # packed repeated scalars
            )
        ):
            foreign.append(f"field {number} (wire type {wire})")
    if foreign:
        return "not-model", ", ".join(foreign[:3])
    return "ok", ""


def _top_level_tags(data: bytes) -> list[tuple[int, int]]:
    """(field number, wire type) of each top-level field of bytes already known to be well-formed."""
    tags, pos = [], 0
    while pos < len(data):
        key, pos = read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            pos = read_varint(data, pos)[1]
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            length, pos = read_varint(data, pos)
            pos += length
        tags.append((number, wire))
    return tags


def _fits(tags: list[tuple[int, int]], descriptor) -> bool:
    fields = {f.number: f for f in descriptor.fields}
    for number, wire in tags:
        f = fields.get(number)
        if f is None or (
            _WIRE_OF_TYPE.get(f.type) != wire and not (getattr(f, "is_repeated", False) and wire == 2)
        ):
            return False
    return True


def _guess_message(data: bytes) -> str:
    """Name the ONNX message a non-ModelProto protobuf most likely is, for the error text."""
    try:
        tags = _top_level_tags(data)
    except (TypeError, ValueError):
        return ""
    for cls in (onnx.GraphProto, onnx.TensorProto, onnx.NodeProto):
        if tags and _fits(tags, cls.DESCRIPTOR):
            return f" (it looks like an onnx.{cls.__name__})"
    return ""


def parse_model_bytes(data: bytes, source: str = "<bytes>") -> ModelProto:
    if len(data) == 0:
        raise ModelLoadError(LoadErrorKind.EMPTY, f"{source}: the file is empty (0 bytes), not an ONNX model")
    verdict, detail = _scan_top_level(memoryview(data))
    if verdict == "not-protobuf":
        raise ModelLoadError(
            LoadErrorKind.NOT_PROTOBUF,
            f"{source}: not an ONNX model — the bytes are not a protobuf message ({detail})",
        )
    if verdict == "truncated":
        raise ModelLoadError(
            LoadErrorKind.TRUNCATED,
            f"{source}: the model file is truncated ({detail}); it was cut off during download or copy",
        )
    if verdict == "not-model":
        raise ModelLoadError(
            LoadErrorKind.NOT_MODEL,
            f"{source}: a protobuf, but not an ONNX ModelProto{_guess_message(data)}: unexpected {detail}",
        )
    proto = ModelProto()
    try:
        proto.ParseFromString(data)
    except DecodeError as exc:  # the scan passed but a nested message is broken
        raise ModelLoadError(
            LoadErrorKind.TRUNCATED, f"{source}: the model is corrupt inside: {exc}"
        ) from None
    if not proto.HasField("graph"):
        raise ModelLoadError(
            LoadErrorKind.NO_GRAPH,
            f"{source}: the ModelProto has no graph (ir_version {proto.ir_version}); nothing to inspect",
        )
    return proto


def _all_tensors(graph, out: list, initializers: bool = True) -> list:
    """Every tensor in a graph (or a function's nodes): its initializers, each attribute's `t` and `tensors`, and
    the same in every subgraph, whatever the attribute's declared type says. Every tensor onnx's external-data
    loader visits (onnx.external_data_helper._get_all_tensors) is among them; a walk of our own because that one,
    made of nested generators, takes 0.27 s at 100k nodes where this takes half."""
    if initializers:
        out.extend(graph.initializer)
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                out.append(a.t)
            out.extend(a.tensors)
            if a.HasField("g"):
                _all_tensors(a.g, out)
            for sub in a.graphs:
                _all_tensors(sub, out)
    return out


def _external_entries(proto: ModelProto):
    """Every tensor in the model (subgraphs and functions included) that keeps its bytes in an external file."""
    tensors = _all_tensors(proto.graph, [])
    for function in proto.functions:
        _all_tensors(function, tensors, initializers=False)
    for tensor in tensors:
        if tensor.data_location == TensorProto.EXTERNAL:
            info = {e.key: e.value for e in tensor.external_data}
            yield tensor, info


def _shown(value: str | bytes, limit: int = 40) -> str:
    """A value from the file, quoted for a one-line message: escapes for anything unprintable, cut short."""
    text = repr(value if isinstance(value, str) else bytes(value))
    return text if len(text) <= limit else text[: limit - 4] + "..." + text[-1]


def _byte_count(info: dict, key: str, tensor: str, source: str) -> int | None:
    """An external-data offset or length: a whole number of bytes (0 or more), or None where it is not given."""
    raw = info.get(key)
    if raw is None or raw == "":
        return None
    if isinstance(raw, str) and raw.isascii() and raw.isdigit() and len(raw) <= 19:  # fits an int64
        return int(raw)
    raise ModelLoadError(
        LoadErrorKind.EXTERNAL_INVALID,
        f"{source}: tensor '{tensor}' gives its external data {key} as {_shown(raw)}, which is not a byte "
        "count (a whole number, 0 or more); the model file is corrupt or was edited by hand",
    )


def check_external_data(proto: ModelProto, base_dir: Path | None, source: str) -> list[ExternalFile]:
    """Validate every external-data reference before anything is read: inside `base_dir`, present, long enough."""
    files: dict[str, ExternalFile] = {}
    root = base_dir.resolve() if base_dir is not None else None
    for tensor, info in _external_entries(proto):
        loc = info.get("location", "")
        if not isinstance(loc, str) or "\x00" in loc:
            what = "is not UTF-8 text" if not isinstance(loc, str) else "holds a NUL byte"
            raise ModelLoadError(
                LoadErrorKind.EXTERNAL_UNSAFE,
                f"{source}: refused — the external data location of tensor '{tensor.name}' {what} "
                f"({_shown(loc)}); it must be a plain relative file name",
            )
        offset = _byte_count(info, "offset", tensor.name, source)
        length = _byte_count(info, "length", tensor.name, source)
        if root is None:
            raise ModelLoadError(
                LoadErrorKind.EXTERNAL_MISSING,
                f"{source}: tensor '{tensor.name}' keeps its data in external file '{loc}', but the model was given "
                "as bytes; open it from its path so the file beside it can be found",
            )
        pure = Path(loc)
        if not loc or pure.is_absolute() or loc.startswith(("/", "\\")) or (len(loc) > 1 and loc[1] == ":"):
            raise ModelLoadError(
                LoadErrorKind.EXTERNAL_UNSAFE,
                f"{source}: refused — tensor '{tensor.name}' points to external data at absolute path '{loc}'; "
                "external data must be a relative path inside the model's folder",
            )
        if ".." in pure.parts or ".." in loc.replace("\\", "/").split("/"):
            raise ModelLoadError(
                LoadErrorKind.EXTERNAL_UNSAFE,
                f"{source}: refused — tensor '{tensor.name}' points to external data '{loc}', which leaves the "
                "model's folder ('..'); external data must stay inside it",
            )
        path = root / pure
        resolved = path.resolve()
        if root != resolved and root not in resolved.parents:
            raise ModelLoadError(
                LoadErrorKind.EXTERNAL_UNSAFE,
                f"{source}: refused — external data '{loc}' of tensor '{tensor.name}' is a link that leads out of "
                f"the model's folder (to {resolved})",
            )
        entry = files.get(loc)
        if entry is None:
            try:
                info_on_disk = resolved.stat()
            except FileNotFoundError:
                raise ModelLoadError(
                    LoadErrorKind.EXTERNAL_MISSING,
                    f"{source}: external data file '{loc}' (tensor '{tensor.name}') is missing from {root}",
                ) from None
            except OSError as exc:
                raise ModelLoadError(
                    LoadErrorKind.EXTERNAL_MISSING,
                    f"{source}: external data file '{loc}' (tensor '{tensor.name}') cannot be read: {exc.strerror}",
                ) from None
            if not stat.S_ISREG(info_on_disk.st_mode):
                raise ModelLoadError(
                    LoadErrorKind.EXTERNAL_UNSAFE,
                    f"{source}: refused — external data '{loc}' of tensor '{tensor.name}' "
                    f"{_not_regular(info_on_disk.st_mode)}; it must be a file of weights",
                )
            entry = files[loc] = ExternalFile(loc, resolved, info_on_disk.st_size)
        offset = offset or 0
        length = entry.size - offset if length is None else length
        if offset + length > entry.size:
            raise ModelLoadError(
                LoadErrorKind.EXTERNAL_MISSING,
                f"{source}: external data file '{loc}' is {entry.size} bytes but tensor '{tensor.name}' needs "
                f"bytes {offset}..{offset + length}; the file is truncated",
            )
        entry.tensors.append(tensor.name)
        entry.bytes_used += length
    return list(files.values())


def _too_large(source: str, size: int, limit: int, what: str) -> ModelLoadError:
    return ModelLoadError(
        LoadErrorKind.TOO_LARGE,
        f"{source}: {what} is {size_text(size)} ({size:,} bytes), over the limit of {size_text(limit)} "
        f"({limit:,} bytes) (raise it with ONNX_SURGERY_MAX_BYTES or --max-bytes)",
    )


def load_model(
    src: str | os.PathLike | bytes,
    *,
    name: str | None = None,
    max_bytes: int | None = None,
    content_hash: bool = False,
    weights_in_file: bool = False,
) -> Model:
    """Load a model from a path or from bytes. Weights in external files are validated, not read.
    `content_hash`: keep the sha256 of the bytes parsed (a key for caches; not the fingerprint, which hashes
    the serialization and so does not depend on how the file was written). `weights_in_file`: a file's large
    initializers are not parsed but referred to where they lie in it (surgery.file_weights), for a command that
    makes many versions of the model; the file must then stay as it is while the model is used."""
    limit = DEFAULT_MAX_BYTES if max_bytes is None else max_bytes
    if isinstance(src, bytes | bytearray | memoryview):
        data = bytes(src)
        source = name or "<bytes>"
        if len(data) > limit:
            raise _too_large(source, len(data), limit, "the model")
        proto = parse_model_bytes(data, source)
        external = check_external_data(proto, None, source)
        digest = hashlib.sha256(data).hexdigest() if content_hash else None
        return Model(proto, source, None, len(data), external, digest)

    path = Path(src)
    source = str(path)
    own = _own_file(path) if weights_in_file else None
    fd = _open_regular(path, source, "an ONNX model file")
    with os.fdopen(fd, "rb") as f:
        stamp = _stamp(os.fstat(f.fileno()))
        # weights left in the file: its bytes are mapped, and only what is parsed is read into memory
        data = _read_model_file(f, source, limit, mapped=own is not None)
        try:
            stripped = _stripped(data) if own is not None else None
            if isinstance(data, mmap.mmap):
                data = data[:] if stripped is None else data  # nothing left in the file: read it whole
            size = len(data)
            wanted = [*(["sha256"] if content_hash else []), *(["sha1"] if stripped else [])]
            digests = (
                _digests(f.fileno(), size, wanted) if isinstance(data, mmap.mmap) else _hashed(data, wanted)
            )
            with gc_paused():
                proto = parse_model_bytes(stripped.data if stripped else data, source)
                # the external files it names; its own file is not one of them
                external = check_external_data(proto, path.parent, source)
                # ONNX's external-data checksum is the file's SHA-1
                if stripped and not file_weights.refer(proto, stripped.places, own.name, digests["sha1"]):
                    # not the tensors walked: parsed whole
                    stripped, proto = None, parse_model_bytes(data[:], source)
                elif stripped:
                    mine = file_weights.OwnFile(own, stripped.defaults)
                    file_weights.remember(mine, digests["sha1"])
        finally:
            if isinstance(data, mmap.mmap):
                data.close()
    total = size + sum(f.bytes_used for f in external)
    if total > limit:
        raise _too_large(source, total, limit, "the model with its external data")
    return Model(
        proto, source, path.parent, size, external, digests.get("sha256"), stamp, mine if stripped else None
    )


_HASH_CHUNK = 8 * 1024 * 1024  # bytes of a mapped file hashed at a time


def _hashed(data: bytes, names: list[str]) -> dict[str, str]:
    return {name: hashlib.new(name, data).hexdigest() for name in names}


def _digests(fd: int, size: int, names: list[str]) -> dict[str, str]:
    """Hashes of a file's first `size` bytes, read a chunk at a time: through the page cache, never mapped into
    this process (a mapped page read counts in its resident memory)."""
    hashers = [hashlib.new(name) for name in names]
    offset = 0
    while hashers and offset < size:
        chunk = os.pread(fd, min(_HASH_CHUNK, size - offset), offset)
        if not chunk:
            break
        for h in hashers:
            h.update(chunk)
        offset += len(chunk)
    return {name: h.hexdigest() for name, h in zip(names, hashers)}


def _own_file(path: Path) -> Path | None:
    """The model's file as a name in its folder, for references to weights in it; None where the file lies in
    another folder (a link from elsewhere): backends refuse external data that resolves out of the folder."""
    try:
        real = path.resolve(strict=True)
    except OSError:
        return None
    return path.parent / real.name if real.parent == path.parent.resolve() else None


def _stripped(data: bytes) -> file_weights.Stripped | None:
    """The file's bytes without its large weights; None to parse them as they are (none to leave, or bytes that
    are not well formed: parse_model_bytes then says what is wrong with them)."""
    try:
        return file_weights.strip(data)
    except ValueError:
        return None


def _stamp(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _not_regular(mode: int) -> str:
    """What a path that is not a regular file is, in words: 'is a directory', 'is not a regular file (...)'."""
    if stat.S_ISDIR(mode):
        return "is a directory"
    kinds = [
        (stat.S_ISFIFO, "a named pipe, FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ]
    return f"is not a regular file ({next((w for test, w in kinds if test(mode)), 'of an unknown kind')})"


def _open_regular(path: Path, source: str, what: str) -> int:
    """A file descriptor of `path` opened for reading, only when it is a regular file: a FIFO is opened without
    blocking (never waiting for a writer) and refused, as are folders and devices."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ModelLoadError(LoadErrorKind.NOT_FOUND, f"{source}: no such file") from None
    except IsADirectoryError:
        raise ModelLoadError(LoadErrorKind.NOT_A_FILE, f"{source}: is a directory, not {what}") from None
    except (OSError, ValueError) as exc:  # permission denied, a NUL in the name, a name too long ...
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ModelLoadError(LoadErrorKind.NOT_FOUND, f"{source}: cannot open {what}: {reason}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        tail = f", not {what}" if stat.S_ISDIR(mode) else f"; give the path of {what}"
        raise ModelLoadError(LoadErrorKind.NOT_A_FILE, f"{source}: {_not_regular(mode)}{tail}")
    return fd


def _read_model_file(f, source: str, limit: int, mapped: bool = False) -> bytes | mmap.mmap:
    """The file's bytes (`mapped`: mapped read-only, not read; an empty file: b""), refused past `limit` or
    protobuf's 2 GiB."""
    size = os.fstat(f.fileno()).st_size
    if size > limit:
        raise _too_large(source, size, limit, "the model file")
    if size > PROTOBUF_LIMIT:
        raise ModelLoadError(
            LoadErrorKind.TOO_LARGE,
            f"{source}: the file is {size / 1024**3:.2f} GiB, over protobuf's 2 GiB limit; save the model with "
            "external data (onnx.save(..., save_as_external_data=True))",
        )
    if mapped and size:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return f.read()


# --- handing a model to a backend that reads files --------------------------------------------------------------


def has_external_data(proto: ModelProto, *, besides: file_weights.OwnFile | None = None) -> bool:
    """Whether any tensor of the model (subgraphs included) keeps its data in an external file; `besides`: a file
    not counted (the model's own, Model.own_file)."""
    other = None if besides is None else besides.name
    return any(other is None or info.get("location") != other for _, info in _external_entries(proto))


PROTOBUF_LIMIT = 2 * 1024**3 - 1  # bytes: a larger model cannot be one protobuf message (one file)


def serialized_size(proto: ModelProto) -> int:
    """Bytes of `proto` as one message; past protobuf's limit (weights over 2 GiB held in memory, as onnxruntime's
    quantizer leaves a 1B model) PROTOBUF_LIMIT + 1, where protobuf itself raises EncodeError."""
    try:
        return proto.ByteSize()
    except EncodeError:
        return PROTOBUF_LIMIT + 1


def with_weights(proto: ModelProto, base_dir: str | Path | None) -> ModelProto:
    """`proto` with the external weights it names read in from `base_dir` (a copy; `proto` itself when it names
    none, or no folder is given). A weight left in its model's own file (surgery.file_weights) comes back as the
    file holds it, byte for byte: the model loaded whole."""
    if base_dir is None or not has_external_data(proto):
        return proto
    from onnx.external_data_helper import load_external_data_for_model

    full = ModelProto()
    full.CopyFrom(proto)
    unwritten = [
        t
        for t in full.graph.initializer
        if t.data_location == TensorProto.EXTERNAL
        and file_weights.wrote_location(base_dir, {e.key: e.value for e in t.external_data}) is False
    ]
    load_external_data_for_model(full, str(base_dir))
    for tensor in unwritten:  # onnx's loader writes data_location as DEFAULT; these had none in the file
        tensor.ClearField("data_location")
    return full


def _location(tensor: TensorProto) -> str | None:
    if tensor.data_location != TensorProto.EXTERNAL:
        return None
    return next((e.value for e in tensor.external_data if e.key == "location"), None)


def save_model(
    proto: ModelProto,
    path: str | Path,
    base_dir: str | Path | None = None,
    *,
    external: bool | None = None,
    own_file: file_weights.OwnFile | None = None,
) -> Path:
    """Write `proto` to `path` (its folder made) with every weight, external ones read from `base_dir`: in the
    file, or in `<file name>.data` beside it when `external` is true or the model would pass protobuf's 2 GiB
    (`external=None`). A `.data` file left by an earlier write is replaced, not appended to. `own_file`: the
    model's own file, where its weights were left (Model.own_file): written in the file, they are streamed from
    it (file_weights.write_inline). Returns `path`.

    Written beside, the weights still in `base_dir`'s files are never read into memory: their bytes are copied
    from file to file by the kernel (`stream_weights`); only tensors the model holds itself pass through here."""
    from surgery.outputs import write_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = base_dir is not None and has_external_data(proto)
    blob = None  # the model as one message, when it is all in memory: serialized once, not sized first
    if external is None and not kept:
        try:
            blob = proto.SerializeToString()
        except EncodeError:  # past protobuf's 2 GiB
            external = True
    elif external is None:
        external = serialized_size(proto) + external_size(proto) > PROTOBUF_LIMIT
    if external:
        data = path.parent / (path.name + ".data")
        # new files, never written through: writing into an existing name would change every hard link to it
        data.unlink(missing_ok=True)
        path.unlink(missing_ok=True)
        out = ModelProto()
        out.CopyFrom(proto)  # the graph and the tensors held in memory; external weights are references
        stream_weights(out, Path(base_dir) if kept else None, data)
        write_atomic(path, out.SerializeToString())
    elif (
        blob is None
        and own_file is not None
        and _inlined_by_streaming(proto, own_file.name)
        and not has_external_data(proto, besides=own_file)
    ):
        write_atomic(path, lambda out: file_weights.write_inline(proto, own_file, out))  # weights streamed
    else:
        full = blob if blob is not None else with_weights(proto, base_dir).SerializeToString()
        write_atomic(path, full)
    return path


def model_bytes(proto: ModelProto, own_file: file_weights.OwnFile | None = None) -> bytes:
    """The model as one message (a download), with the weights it keeps in `own_file` (Model.own_file) inline,
    streamed from the file; weights in other external files stay references, as in `proto`."""
    if own_file is None or not any(_location(t) == own_file.name for t in proto.graph.initializer):
        return proto.SerializeToString()
    if not _inlined_by_streaming(proto, own_file.name):
        return with_weights(proto, own_file.parent).SerializeToString()
    out = io.BytesIO()
    file_weights.write_inline(proto, own_file, out)
    return out.getvalue()


def _inlined_by_streaming(proto: ModelProto, name: str) -> bool:
    """Whether every tensor of `proto` in the file `name` is a main-graph initializer: the ones
    file_weights.write_inline writes inline (a step could have moved one into a subgraph or a function)."""
    main = sum(1 for t in proto.graph.initializer if _location(t) == name)
    return main == sum(1 for _, info in _external_entries(proto) if info.get("location") == name)


def external_size(proto: ModelProto) -> int:
    """Bytes of the weights `proto` keeps in external files, a range two tensors share counted once (a tensor
    without a length counts for nothing: check_external_data gives it one, from the file's size)."""
    ranges = {
        (info.get("location", ""), info.get("offset") or "0", info.get("length") or "0")
        for _, info in _external_entries(proto)
    }
    return sum(int(length) for *_, length in ranges if length.isdigit())


EXTERNAL_THRESHOLD = (
    1024  # bytes: a smaller initializer stays in the model file (onnx.save_model's size_threshold)
)
_COPY_CHUNK = 64 * 1024 * 1024


def _tensors_of(graph, out: list, initializers: bool = True) -> list:
    """(tensor, is an initializer) for every tensor `_all_tensors` lists, in its order."""
    if initializers:
        out.extend((t, True) for t in graph.initializer)
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                out.append((a.t, False))
            out.extend((t, False) for t in a.tensors)
            if a.HasField("g"):
                _tensors_of(a.g, out)
            for sub in a.graphs:
                _tensors_of(sub, out)
    return out


def stream_weights(proto: ModelProto, base_dir: Path | None, data: Path) -> None:
    """Move the weights of `proto` (edited in place) into the new file `data`. A tensor in an external file under
    `base_dir` is copied range by range from that file (os.copy_file_range: its bytes never enter this process;
    a range two tensors share is copied once); an initializer held in memory with EXTERNAL_THRESHOLD bytes or
    more of raw data is written from memory (other tensors in memory stay in the model, as onnx.save_model leaves
    them). Each moved tensor then points at `data`, in the model's order, without padding."""
    tensors = _tensors_of(proto.graph, [])
    for function in proto.functions:
        _tensors_of(function, tensors, initializers=False)
    sources: dict[str, object] = {}
    copied: dict[tuple[str, int, int], int] = {}  # (location, offset, length) in the source -> offset in data
    offset = 0
    fd = os.open(data, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        with os.fdopen(fd, "wb", buffering=0) as out:
            for tensor, initializer in tensors:
                if tensor.data_location == TensorProto.EXTERNAL:
                    if base_dir is None:
                        continue  # nowhere to read it from: the reference is kept as it is
                    info = {e.key: e.value for e in tensor.external_data}
                    loc = info.get("location", "")
                    if loc not in sources:
                        sources[loc] = open(_inside(base_dir, loc), "rb")  # noqa: SIM115 - closed below
                    src = sources[loc]
                    start = int(info.get("offset") or 0)
                    length = int(info.get("length") or os.fstat(src.fileno()).st_size - start)
                    key = (loc, start, length)
                    if key not in copied:
                        copied[key] = offset
                        _copy_range(src, start, length, out)
                        offset += length
                    file_weights.point_at(tensor, data.name, copied[key], length)
                elif initializer and len(tensor.raw_data) >= EXTERNAL_THRESHOLD:
                    length = len(tensor.raw_data)  # before point_at clears it
                    out.write(tensor.raw_data)
                    file_weights.point_at(tensor, data.name, offset, length)
                    offset += length
    finally:
        for src in sources.values():
            src.close()
    if offset == 0:
        data.unlink()  # no weight to move: no file beside the model, as onnx leaves none


def _inside(base_dir: Path, location: str) -> Path:
    """`location` resolved under `base_dir`, refused when it leads out (the model was checked on loading; this
    keeps a model edited since from reading anywhere else)."""
    root = base_dir.resolve()
    path = (root / location).resolve()
    if not location or Path(location).is_absolute() or (path != root and root not in path.parents):
        raise ModelLoadError(
            LoadErrorKind.EXTERNAL_UNSAFE, f"external data '{location}' is not a file inside {root}"
        )
    return path


def _copy_range(src, start: int, length: int, out) -> None:
    """`length` bytes of `src` from `start` appended to `out`: by the kernel where it can, else in chunks."""
    done = 0
    try:
        while done < length:
            n = os.copy_file_range(src.fileno(), out.fileno(), length - done, start + done)
            if n == 0:
                break  # the source ended early
            done += n
    except OSError:  # not supported here (another file system, an old kernel): read and write in chunks
        pass
    src.seek(start + done)
    while done < length:
        chunk = src.read(min(_COPY_CHUNK, length - done))
        if not chunk:
            raise ModelLoadError(
                LoadErrorKind.EXTERNAL_MISSING,
                f"external data file '{src.name}' ends at byte {start + done}, before the {length} bytes a tensor "
                f"needs from byte {start}",
            )
        out.write(chunk)
        done += len(chunk)


@contextlib.contextmanager
def private_copy(data: bytes | ModelProto, base_dir: str | Path | None = None, *, file: str | None = None):
    """A file holding the model, in a private temporary folder removed afterwards (never in the user's folder).
    Each external-data file the model names appears in that folder under the same relative name: a hard link
    (no copy, the same bytes), or a copy where the folders are on different file systems. A symbolic link would
    not do: OpenVINO refuses a location that resolves outside the model's folder. `file`: the file `data` (a
    ModelProto) was read from, unedited (Model.file_as_read): linked the same way, not serialized again.
    Yields the path."""
    proto = data if isinstance(data, ModelProto) else None
    blob = None if file is not None else data.SerializeToString() if proto is not None else data
    with tempfile.TemporaryDirectory(prefix="onnx-surgery-model-") as tmp:
        locations: set[str] = set()
        if base_dir is not None:
            if proto is None:
                proto = ModelProto()
                proto.ParseFromString(blob)
            locations = {info.get("location", "") for _, info in _external_entries(proto)} - {""}
            for location in locations:
                target = Path(tmp) / location
                target.parent.mkdir(parents=True, exist_ok=True)
                _link_or_copy(Path(base_dir).resolve() / location, target)
        # a name no external file has: weights left in the model's own file (surgery.file_weights) are linked in
        # under that file's name, often model.onnx, and writing through that link would write the user's file
        taken = {os.path.normpath(location) for location in locations}
        name = next(n for i in range(len(taken) + 1) if (n := f"model{i or ''}.onnx") not in taken)
        path = Path(tmp) / name
        if blob is None:
            _link_or_copy(Path(file), path)
        else:
            with open(path, "xb") as out:  # a new file, never one linked in
                out.write(blob)
        yield str(path)


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system (or links not allowed): a copy
        shutil.copyfile(source, target)
