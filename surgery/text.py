"""Line helpers every floor uses: the first line of a text, the line of a backend's words that says what is wrong,
an exception in one line. The ground floor: it imports nothing of the project."""

from __future__ import annotations


def first_line(text: str, limit: int = 300) -> str:
    """The first non-empty line of `text`, at most `limit` characters ("" for empty text). The one home of the
    "first line of an error" idiom."""
    for line in str(text).splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


# TensorRT's parser opens a node's error with a line that only names the node ("Invalid Node - NAME") and says
# what is wrong on the next one (the words recorded in surgery/backends/tensorrt/data/recorded-tensorrt-rtx.json)
_NAMES_THE_NODE_ONLY = "Invalid Node - "


def telling_line(text: str, limit: int = 300) -> str:
    """The one line of a backend's words that says what is wrong: the first non-empty line, or the next one where
    the first only names the node. Still the backend's words, verbatim (cut at `limit`)."""
    lines = [line for line in str(text).splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].strip().startswith(_NAMES_THE_NODE_ONLY):
        return first_line(lines[1], limit)
    return first_line(text, limit)


def error_line(exc: BaseException, limit: int = 300) -> str:
    """`Type: first line of the message` for an exception whose message may be empty."""
    line = first_line(str(exc), limit)
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def size_text(n: float) -> str:
    """Bytes as a person reads them, in binary units: 512 B, 1.5 KiB, 2.0 GiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
