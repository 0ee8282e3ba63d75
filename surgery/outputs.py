"""Where a command may write: the one place every output path is resolved and every file is written.

A path a command writes is never one of its inputs (the same file by inode: a hard link to the model counts,
and so do the model's external-data files), never reached through a symbolic link, never a folder, a FIFO or a
device; a folder of parts is new or empty. Files are written whole or not at all (a temporary file beside the
target, renamed over it), so an interrupted write leaves no half file. Each refusal is an OutputError whose message
is one line saying what to give instead."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()  # what open() would give a new file here (mkstemp's files are private: 0600)


class OutputError(ValueError):
    """A path a command must not write; the message is one line."""


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _stats(paths: Iterable[str | os.PathLike | None]) -> list[tuple[Path, os.stat_result]]:
    out = []
    for p in paths:
        if p is None:
            continue
        try:
            out.append((Path(p), os.stat(p)))
        except OSError:
            continue  # an input that does not exist cannot be overwritten
    return out


def output_file(
    path: str | os.PathLike, *, flag: str = "-o", inputs: Iterable[str | os.PathLike | None] = ()
) -> Path:
    """`path` as a file a command may write: refuses a folder, a symbolic link, a FIFO or device, a place nothing
    can be written (its missing folders are made when it is written), and any of `inputs` (by inode, so a hard
    link to the input is the input)."""
    p = Path(path)
    if not str(path):
        raise OutputError(f"{flag}: give a file name")
    if p.is_symlink():
        raise OutputError(
            f"{flag} {p} is a symbolic link; give a new file name (links are never written through)"
        )
    parent = p.parent if str(p.parent) else Path(".")
    existing = next(
        (a for a in [parent, *parent.parents] if a.exists()), Path(".")
    )  # the write makes the rest
    if not existing.is_dir():
        raise OutputError(f"{flag} {p}: {existing} is not a folder")
    try:
        os.close(_probe(existing))
    except OSError as exc:
        raise OutputError(f"{flag} {p}: nothing can be written in {existing} ({exc.strerror})") from None
    try:
        st = os.stat(p)
    except FileNotFoundError:
        return p
    except OSError as exc:
        raise OutputError(f"{flag} {p}: cannot be written ({exc.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{flag} {p} is a folder; give a file name")
    if not stat.S_ISREG(st.st_mode):
        raise OutputError(f"{flag} {p} is not a regular file (a FIFO, a device, ...); give a file name")
    for source, other in _stats(inputs):
        if _same_file(st, other):
            same = "is" if p.resolve() == source.resolve() else "is the same file as (a hard link to)"
            raise OutputError(f"{flag} {p} {same} the input {source}; inputs are never overwritten")
    return p


def output_folder(
    path: str | os.PathLike,
    *,
    flag: str = "-o",
    inputs: Iterable[str | os.PathLike | None] = (),
    make: bool = True,
) -> Path:
    """`path` as a folder a command may fill with new files: it does not exist yet (it is made, unless not
    `make`: a check before the work), or it is an empty folder. Refuses a file, a symbolic link, a folder with
    files in it, and a folder that holds an input."""
    p = Path(path)
    if p.is_symlink():
        raise OutputError(f"{flag} {p} is a symbolic link; give a new folder")
    if p.exists():
        if not p.is_dir():
            raise OutputError(f"{flag} {p} is a file; give a new or empty folder")
        if any(p.iterdir()):
            raise OutputError(f"{flag} {p} is a folder with files in it; give a new or empty folder")
    for source, _ in _stats(inputs):
        if source.resolve().parent == p.resolve():
            raise OutputError(f"{flag} {p} holds the input {source}; give a new or empty folder")
    if not make:
        return p
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{flag} {p}: cannot make the folder ({exc.strerror})") from None
    return p


def _probe(folder: Path) -> int:
    """Make (and remove) a private file in `folder`: whether a write there can succeed at all."""
    fd, tmp = tempfile.mkstemp(prefix=".onnx-surgery-probe.", dir=folder)
    os.unlink(tmp)
    return fd


def write_atomic(path: str | os.PathLike, data: bytes | str | Callable[[BinaryIO], None]) -> Path:
    """Write `data` to `path` whole: into a private temporary file beside it, then renamed over it (a rename
    replaces the name, never the file a hard link shares). `data` may be a function that writes to the file."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(
            prefix=f".{p.name}.", suffix=".part", dir=p.parent if str(p.parent) else "."
        )
    except OSError as exc:
        raise OutputError(f"{p}: cannot be written ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode() if isinstance(data, str) else data)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def check_outputs(model, outputs: list[tuple[str, str | os.PathLike | None]]) -> dict[str, Path]:
    """The files a command will write, by flag ([("-o", OUT), ("--recipe", FILE)]; None: not written), each
    checked by `output_file` against the model's own files and the other outputs (two flags naming one file are
    refused). A model file's external data is written beside it as `<name>.data`: that is checked too."""
    inputs = model.files()
    checked: dict[str, Path] = {}
    for flag, path in outputs:
        if path is None:
            continue
        p = output_file(path, flag=flag, inputs=inputs)
        for other_flag, other in checked.items():
            if p.resolve() == other.resolve():
                raise OutputError(f"{flag} {p} is also {other_flag}; give each its own file")
        if flag == "-o":
            output_file(f"{p}.data", flag=f"{flag} (its external data)", inputs=inputs)
        checked[flag] = p
    return checked
