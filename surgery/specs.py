"""What users type for shapes, profiles and input values — one parser each, shared by the CLI and the app.

  shape     1x3x224x224 or 1,3,224,224                       -> (1, 3, 224, 224)
  shapes    NAME:1x3x224x224 (or a bare shape, for every input) -> {NAME: [1, 3, 224, 224]} ('' for bare);
            '?', '-1' or a name keeps that dim dynamic: NAME:?x3x224x224 -> {NAME: [None, 3, 224, 224]}
  profile   NAME:MIN:OPT:MAX with shapes as above             -> {NAME: (min, opt, max)}
  value     NAME=5, NAME=[1, 3, 224, 224], NAME=0.5            -> {NAME: 5}, ...

Each raises ValueError whose message says what was expected, for a one-line error (exit 2).
"""

from __future__ import annotations

import json
import re

PROFILE_EXAMPLE = "input:1x3x224x224:4x3x224x224:8x3x224x224"


def parse_shape(text: str, dynamic: bool = False) -> tuple:
    """'1x3x224x224' or '1,3,224,224' -> (1, 3, 224, 224); non-negative integers only. With `dynamic` (an input's
    shape, not a profile's), a dim may stay dynamic as users write it: '?' or '-1' -> None, a name ('batch') ->
    that name: '?x3x224x224' freezes every dim but the batch."""
    parts = (
        text.strip().replace(",", "x").split("x")
        if dynamic
        else text.strip().lower().replace(",", "x").split("x")
    )
    dims: list = []
    for p in parts:
        p = p.strip()
        if dynamic and p in ("?", "-1"):
            dims.append(None)
        elif dynamic and p.isidentifier():
            dims.append(p)
        else:
            try:
                dims.append(int(p))
            except ValueError:
                raise ValueError(
                    f"'{text}' is not a shape. Note: write dims joined by x, e.g. 1x3x224x224"
                ) from None
    if any(isinstance(d, int) and d < 0 for d in dims):
        raise ValueError(f"'{text}' has a negative dim. Note: dims are non-negative integers")
    return tuple(dims)


def parse_shapes(specs: list[str], flag: str = "--input-shape") -> dict[str, list[int]]:
    """['image:1x3x32x32', '1x3x32x32'] -> {'image': [1, 3, 32, 32], '': [1, 3, 32, 32]}."""
    shapes = {}
    for spec in specs:
        name, _, dims = spec.rpartition(":")
        try:
            shape = list(parse_shape(dims, dynamic=True))
        except ValueError:
            raise ValueError(
                f"{flag} '{spec}': expected NAME:1x3x224x224 ('?' or a name keeps a dim dynamic)"
            ) from None
        size = 1
        for d in shape:
            size *= d if isinstance(d, int) else 1
        if size > SHAPE_MAX_ELEMENTS:
            raise ValueError(
                f"{flag} '{spec}': {size:,} elements; an input this tool feeds holds at most {SHAPE_MAX_ELEMENTS:,}"
            )
        if name in shapes:
            raise ValueError(f"{flag} '{spec}': {name or 'the bare shape'} is given twice")
        shapes[name] = shape
    return shapes


SHAPE_MAX_ELEMENTS = 1 << 28  # 1 GiB of float32 for one seeded input: more does not fit beside the model here


def parse_profiles(specs: list[str], inputs: list[str]) -> dict[str, tuple[tuple[int, ...], ...]]:
    """'name:MIN:OPT:MAX' (shapes like 1x3x224x224) -> {name: (min, opt, max)}."""
    profiles = {}
    for spec in specs:
        parts = spec.rsplit(":", 3)
        if len(parts) != 4:
            raise ValueError(f"--profile '{spec}': expected INPUT:MIN:OPT:MAX, e.g. {PROFILE_EXAMPLE}")
        name, *shapes = parts
        try:
            lo, opt, hi = (parse_shape(s) for s in shapes)
        except ValueError:
            raise ValueError(
                f"--profile '{spec}': shapes are non-negative integers joined by x, e.g. {PROFILE_EXAMPLE}"
            ) from None
        if name not in inputs:
            raise ValueError(
                f"--profile '{spec}': the model has no input '{name}'. Note: inputs: {', '.join(inputs)}"
            )
        if not len(lo) == len(opt) == len(hi):
            raise ValueError(f"--profile '{spec}': min, opt and max must have the same rank")
        if name in profiles:
            raise ValueError(
                f"--profile '{spec}': input '{name}' has a profile already (one --profile per input)"
            )
        profiles[name] = (lo, opt, hi)
    return profiles


def profile_example(shape) -> str:
    """A min:opt:max profile for `shape` as `build --profile` takes it: static dims kept, dynamic ones (a name,
    None, -1) shown as 1, 4 and 8, e.g. 1x3x224x224:4x3x224x224:8x3x224x224."""
    dims = [d if isinstance(d, int) and d >= 0 else None for d in shape]
    return ":".join("x".join(str(v if d is None else d) for d in dims) for v in (1, 4, 8))


VALUE_MAX_CHARS = 1 << 20  # a value typed or passed on a command line: 1 MiB of text is already absurd
VALUE_MAX_DEPTH = 32  # lists nested deeper than any tensor's rank


def parse_value(text: str):
    """A value typed by a user: '1x3x224x224' or '1,3,224,224' -> [1, 3, 224, 224]; else JSON (5, 0.5, [1, 2],
    "text"); else the text itself. Raises ValueError for text over VALUE_MAX_CHARS or lists nested deeper than
    VALUE_MAX_DEPTH (json would recurse until Python's stack ends)."""
    t = text.strip()
    if len(t) > VALUE_MAX_CHARS:
        raise ValueError(f"a value of {len(t):,} characters; values are at most {VALUE_MAX_CHARS:,}")
    depth = deepest = 0
    for ch in t:
        depth += (ch == "[") - (ch == "]")
        deepest = max(deepest, depth)
    if deepest > VALUE_MAX_DEPTH:
        raise ValueError(
            f"lists nested {deepest} deep; a tensor's value nests at most {VALUE_MAX_DEPTH} deep"
        )
    if (
        t
        and all(part.strip().isdigit() for part in t.replace(",", "x").split("x"))
        and ("x" in t or "," in t)
    ):
        return [int(part) for part in t.replace(",", "x").split("x")]
    try:
        return json.loads(t)
    except ValueError:
        return t


def parse_input_values(specs: list[str]) -> dict:
    """['k=5', 'sizes=[1, 3, 64, 64]'] -> {'k': 5, 'sizes': [1, 3, 64, 64]}."""
    values = {}
    for spec in specs:
        name, sep, text = spec.partition("=")
        if not sep or not name.strip() or not text.strip():
            raise ValueError(f"--input-value '{spec}': expected NAME=VALUE, e.g. k=5 or sizes=[1,3,64,64]")
        try:
            value = parse_value(text)
        except ValueError as exc:
            raise ValueError(f"--input-value '{name.strip()}=…': {exc}") from None
        if isinstance(value, str) or not _numbers(value):
            raise ValueError(
                f"--input-value '{spec[:80]}': '{text[:40]}' is not a finite number or a list of finite numbers"
            )
        if name.strip() in values:
            raise ValueError(f"--input-value '{name.strip()}' is given twice; give each input once")
        values[name.strip()] = value
    return values


def _numbers(value) -> bool:
    """A finite number (bool excluded), or a list of such, nested."""
    import math

    if isinstance(value, list):
        return all(_numbers(v) for v in value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or math.isfinite(value)


def parse_answer(text: str, what: str = "value"):
    """The answer to a rule's question ($ask:<what>), as typed in the app: a shape where `what` names one
    (1x3x224x224 or 1,3,224,224: non-negative whole dims), else a finite number or a (nested) list of them.
    Raises ValueError with a one-line message."""
    if "shape" in what:
        return list(parse_shape(text))
    value = parse_value(text)
    if isinstance(value, str) or not _numbers(value):
        raise ValueError(
            f"'{text[:40]}' is not a finite number or a list of finite numbers, e.g. 5 or [0, 2]"
        )
    return value


SIZE_UNITS = {
    "": 1 << 20,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", re.IGNORECASE)


def parse_size(text: str, flag: str = "--upload-limit") -> int:
    """'2GiB', '500MB', '300 MiB', '1.5GB' -> bytes: MB and GB are decimal (10**6, 10**9, as a file manager
    counts), MiB and GiB binary; a bare number is MiB."""
    m = _SIZE.fullmatch(text or "")
    unit = m.group(2).lower() if m else None
    if unit not in SIZE_UNITS:
        raise ValueError(f"{flag} '{text}': a size is a number and a unit, e.g. 2GiB, 500MB or 300MiB")
    size = int(float(m.group(1)) * SIZE_UNITS[unit])
    if size < 1:
        raise ValueError(f"{flag} '{text}': a size above 0 bytes")
    return size
