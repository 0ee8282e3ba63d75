"""Reading the files users hand a command, other than models (surgery.model reads those): recipes, rule files.
Regular files only (a FIFO is opened without blocking and refused unread, a folder or device refused), a size
limit read before the bytes, UTF-8 text, and for structured text a nesting limit and no YAML anchors or aliases
checked before anything is built (an alias bomb, or JSON nested until Python's stack ends). Every refusal is an
InputError whose message is one line naming the file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_DEPTH = 32  # nesting of a recipe or a rule file: their deepest values are lists of lists


class InputError(ValueError):
    """A file a command cannot read as asked; the message is one line naming it."""


def read_regular(path: str | os.PathLike, what: str, max_bytes: int) -> bytes:
    """The bytes of `path` when it is a regular file of at most `max_bytes` (`what` names it in messages: "the
    recipe")."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:  # a folder (on some systems), permission, a NUL in the name ...
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InputError(f"{path}: cannot read {what}: {reason}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        kind = (
            "is a directory" if stat.S_ISDIR(info.st_mode) else "is not a regular file (a FIFO or a device)"
        )
        raise InputError(f"{path}: {kind}, not {what}")
    with os.fdopen(fd, "rb") as f:
        if info.st_size > max_bytes:
            raise InputError(f"{path}: {info.st_size:,} bytes, over the {max_bytes:,}-byte limit for {what}")
        data = f.read(max_bytes + 1)  # /proc files say size 0 and may hold more
    if len(data) > max_bytes:
        raise InputError(f"{path}: over the {max_bytes:,}-byte limit for {what}")
    return data


def decode_text(data: bytes, where: str, what: str) -> str:
    """UTF-8 text (a byte order mark allowed), else one line saying where it is not."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"{where}:{line}: not UTF-8 text; {what} is UTF-8") from None


def check_structure(text: str, where: str, what: str, max_depth: int = MAX_DEPTH) -> None:
    """Before anything is built from JSON or YAML text: nested at most `max_depth` deep, no anchors or aliases
    (a small file standing for billions of nodes, or for itself). The YAML scanner is iterative, and JSON is YAML
    here, so a deep file cannot crash it."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    depth = 0
    opening = (
        yaml.BlockMappingStartToken,
        yaml.BlockSequenceStartToken,
        yaml.FlowMappingStartToken,
        yaml.FlowSequenceStartToken,
    )
    closing = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)
    try:
        for token in yaml.scan(text, Loader=loader):
            if isinstance(token, opening):
                depth += 1
                if depth > max_depth:
                    line = token.start_mark.line + 1
                    raise InputError(f"{where}:{line}: nested deeper than {max_depth} levels; not {what}")
            elif isinstance(token, closing):
                depth -= 1
            elif isinstance(token, yaml.AnchorToken | yaml.AliasToken):
                line = token.start_mark.line + 1
                raise InputError(f"{where}:{line}: YAML anchors and aliases are not allowed in {what}")
    except yaml.YAMLError as exc:
        raise InputError(f"{where}: not JSON or YAML: {str(exc).splitlines()[0]}") from None


def load_structured(path: str | os.PathLike, what: str, max_bytes: int) -> object:
    """A JSON or YAML file read with every check above, parsed safely (yaml.safe_load: nothing runs)."""
    import json

    import yaml

    where = str(path)
    text = decode_text(read_regular(Path(path), what, max_bytes), where, what)
    check_structure(text, where, what)
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (yaml.YAMLError, ValueError, OverflowError) as exc:
        raise InputError(
            f"{where}: not JSON or YAML: {str(exc).splitlines()[0] if str(exc) else exc}"
        ) from None
