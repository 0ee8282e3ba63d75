"""Read rule files safely: regular UTF-8 files only, a size limit, a depth limit and no anchors or aliases before
parsing, `yaml.safe_load` (a rule file never runs code), then schema validation with file:line in every message."""

from __future__ import annotations

import codecs
import hashlib
import os
import pickle
import stat
import sys
import tempfile
from pathlib import Path

import yaml

from surgery.resources import RULES_DIR
from surgery.rulebook.schema import Rule, RuleError, validate

MAX_BYTES = 256 * 1024
MAX_DEPTH = 32
BUILTIN_DIR = RULES_DIR  # rules/ in a checkout, the package's copy when installed (surgery/resources.py)


def default_dirs() -> list[Path]:
    env = os.environ.get("ONNX_SURGERY_RULES")
    return [Path(p) for p in env.split(os.pathsep)] if env else [BUILTIN_DIR]


def _check_structure(text: str, path: str) -> None:
    """Before anything is built: not nested deeper than MAX_DEPTH, and no anchors or aliases (&a, *a). An alias
    repeats a whole subtree, so a small file can stand for billions of nodes (an 'alias bomb' hangs whatever
    walks it) or for itself (a cycle); a rule file has no need of either."""
    depth = 0
    for token in yaml.scan(text, Loader=_SafeLoader):  # the scanner is iterative: a deep file cannot crash it
        if isinstance(
            token,
            yaml.BlockMappingStartToken
            | yaml.BlockSequenceStartToken
            | yaml.FlowMappingStartToken
            | yaml.FlowSequenceStartToken,
        ):
            depth += 1
            if depth > MAX_DEPTH:
                line = token.start_mark.line + 1
                raise RuleError(f"{path}:{line}: nested deeper than {MAX_DEPTH} levels; not a rule file")
        elif isinstance(token, yaml.BlockEndToken | yaml.FlowMappingEndToken | yaml.FlowSequenceEndToken):
            depth -= 1
        elif isinstance(token, yaml.AnchorToken | yaml.AliasToken):
            sign = "&" if isinstance(token, yaml.AnchorToken) else "*"
            raise RuleError(
                f"{path}:{token.start_mark.line + 1}: YAML anchors and aliases ({sign}{token.value}) are not "
                "allowed in a rule file; write the value out"
            )


class _BadValue(Exception):
    def __init__(self, mark, reason: str):
        super().__init__(reason)
        self.mark = mark


# libyaml's parser where PyYAML was built with it (the wheels are): the same tokens, nodes and marks, ~10x faster
# than the pure-Python one (all built-in rules: 0.32 -> ~0.04 s, the app loads them for the first selection)
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _RuleLoader(_SafeLoader):
    """SafeLoader whose every value that cannot be built (a 100k-digit integer: Python refuses to convert it; a
    date that does not exist) says where it is."""

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError) as exc:
            raise _BadValue(node.start_mark, str(exc).split(";")[0]) from None

    def construct_yaml_int(self, node):
        try:  # a 100k-digit decimal fails here; a 100k-digit hex number converts, and fails when printed
            value = super().construct_yaml_int(node)
        except ValueError:
            value = None
        if value is None or not -(2**63) <= value < 2**64:
            raise ValueError(
                f"an integer {len(node.value)} characters long, over the 64 bits a rule's number may have"
            )
        return value


_RuleLoader.add_constructor("tag:yaml.org,2002:int", _RuleLoader.construct_yaml_int)


def _locator(path: str, root):
    def where(field: str) -> str:
        node, line = root, (root.start_mark.line + 1 if root is not None else 1)
        for part in [p for p in field.split(".") if p]:
            if not isinstance(node, yaml.MappingNode):
                break
            for k, v in node.value:
                if str(k.value) == part:
                    node, line = v, k.start_mark.line + 1
                    break
            else:
                break
        return f"{path}:{line}"

    return where


def load_rule_text(text: str, path: str = "<rule>") -> Rule:
    if len(text.encode()) > MAX_BYTES:
        raise RuleError(
            f"{path}:1: {len(text.encode())} bytes, over the {MAX_BYTES}-byte limit for a rule file"
        )
    try:
        _check_structure(text, path)
        loader = _RuleLoader(text)  # safe: plain data only, no tags that build Python objects
        try:
            root = loader.get_single_node()  # the node tree keeps each field's line for messages
            data = loader.construct_document(root) if root is not None else None
        finally:
            loader.dispose()
    except _BadValue as exc:
        raise RuleError(f"{path}:{exc.mark.line + 1}: cannot read this value: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise RuleError(f"{path}:{line}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    rule = validate(data, _locator(path, root))
    rule.path = path
    return rule


_BOMS = [
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
]


def _read_regular(path: Path) -> bytes:
    """The bytes of a regular file of at most MAX_BYTES (surgery.inputs.read_regular: a FIFO is opened without
    blocking and refused unread), its refusal as a RuleError at line 1 of the file."""
    from surgery.inputs import InputError, read_regular

    try:
        return read_regular(path, "a rule file", MAX_BYTES)
    except InputError as exc:
        raise RuleError(f"{path}:1:{str(exc).removeprefix(str(path) + ':')}") from None


def decode_rule_bytes(data: bytes, path: str) -> str:
    """A rule file's text: UTF-8 only (a UTF-8 byte order mark is allowed), else one line naming the file, the
    line and the encoding it looks like."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            raise RuleError(
                f"{path}:1: the file is {name} text (it starts with a byte order mark); save it as UTF-8"
            )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise RuleError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); save it as UTF-8"
        ) from None


def load_rule(path: str | Path) -> Rule:
    path = Path(path)
    return load_rule_text(decode_rule_bytes(_read_regular(path), str(path)), str(path))


def load_rules(dirs=None) -> list[Rule]:
    """Every *.yaml/*.yml rule in the folders (later folders override earlier ones by id)."""
    rules: dict[str, Rule] = {}
    for d in [Path(x) for x in (dirs or default_dirs())]:
        if not d.is_dir():
            raise RuleError(f"{d}: no such rules folder")
        rules.update(_folder_rules(d))
    return list(rules.values())


def _folder_rules(d: Path) -> dict[str, Rule]:
    """One folder's rules by id. Reading, parsing and validating the built-in rules takes 0.17-0.2 s, every `fix` and
    every check that finds something refused; the rules a folder held are therefore kept, once validated, in
    the parsed-rules cache (`cache_folder`), under a key made of the bytes of every file read and the code that
    reads them: an edited, added or removed file, or other code, is a new key, parsed again."""
    files = [(path, _read_regular(path)) for path in sorted([*d.glob("*.yaml"), *d.glob("*.yml")])]
    key = hashlib.sha256(_code_stamp())
    for path, data in files:
        key.update(f"\0{path}\0{len(data)}\0".encode())
        key.update(data)
    cached = _cached(key.hexdigest())
    if cached is not None:
        return cached
    here: dict[str, Rule] = {}
    for path, data in files:
        rule = load_rule_text(decode_rule_bytes(data, str(path)), str(path))
        if rule.id in here:
            raise RuleError(
                f"{path}:1: field 'id': '{rule.id}' is also the id of {here[rule.id].path}. "
                "Note: ids are unique within a folder (a later folder may replace a rule on purpose)"
            )
        here[rule.id] = rule
    _keep(key.hexdigest(), here)
    return here


CACHE_KEPT = 16  # parsed folders kept (a new code version or a rule edit writes a new one)


def cache_folder() -> Path:
    """Where parsed rule folders are kept: $ONNX_SURGERY_CACHE/rules, else ~/.cache/onnx-surgery/rules."""
    root = os.environ.get("ONNX_SURGERY_CACHE") or "~/.cache/onnx-surgery"
    return Path(root).expanduser() / "rules"


def _code_stamp() -> bytes:
    """The code a parse depends on: this Python and every module of the package (path, size, modification time),
    so that a changed schema or fix registry never meets rules validated by the code before it."""
    package = Path(__file__).resolve().parents[1]
    parts = [sys.version, str(pickle.HIGHEST_PROTOCOL)]
    for root, _dirs, names in sorted(os.walk(package)):
        for name in sorted(n for n in names if n.endswith(".py")):
            st = os.stat(os.path.join(root, name))
            parts.append(
                f"{os.path.relpath(os.path.join(root, name), package)}:{st.st_size}:{st.st_mtime_ns}"
            )
    return "\n".join(parts).encode()


def _cached(key: str) -> dict[str, Rule] | None:
    """The rules kept under `key`; None when there are none, when the file is not a regular file this user alone
    can write (a cache file is unpickled: only one no one else could have written is read), or unreadable."""
    path = cache_folder() / f"{key}.pickle"
    try:
        st = path.stat()
        folder = path.parent.stat()
        if not stat.S_ISREG(st.st_mode) or any(
            s.st_uid != os.getuid() or s.st_mode & 0o022 for s in (st, folder)
        ):
            return None  # a FIFO would block the read; a file others could write is not unpickled
        with path.open("rb") as f:
            rules = pickle.load(f)
    except Exception:  # no cache, or one that cannot be read: the rules are parsed again
        return None
    if not isinstance(rules, dict) or not all(isinstance(r, Rule) for r in rules.values()):
        return None
    os.utime(path)  # recently used: kept when older ones are pruned
    return rules


def _keep(key: str, rules: dict[str, Rule]) -> None:
    """Write the parsed rules under `key` (private to this user, written whole or not at all), keeping the
    CACHE_KEPT most recently used; a cache that cannot be written is no error."""
    folder, tmp = cache_folder(), None
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".part")  # mode 0o600
        with os.fdopen(fd, "wb") as f:
            pickle.dump(rules, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, folder / f"{key}.pickle")
        tmp = None
        kept = sorted(folder.glob("*.pickle"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in kept[CACHE_KEPT:]:
            old.unlink(missing_ok=True)
    except Exception:  # a read-only home, a full disk: the next load parses again
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
