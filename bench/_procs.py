"""A process's peak memory and its children, read from /proc (bench/app_open.py and bench/fix_scale.py)."""

from __future__ import annotations

import contextlib
from pathlib import Path


def peak_mib(pid: int) -> float | None:
    """The process's peak resident memory (VmHWM) in MiB; None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def children(pid: int) -> list[int]:
    """The process's living children (each is listed under the thread that started it)."""
    kids: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                kids += [int(k) for k in (task / "children").read_text().split()]
    return kids
