"""The house as its imports draw it: every module of surgery/ (and the app's), the modules each one imports (at
the top or inside a function: both are dependencies), the floors they stand on and any circle.

    python3 scripts/imports.py            floors, lowest first, and the circles (exit 1 if there is one)
    python3 scripts/imports.py --edges    also every import, module -> module

A module's floor is one above the highest floor it imports from, so an arrow only ever points down. A circle
(modules that import each other, however far round) has no such order: it is listed, and the script exits 1.
Read with Python's own `ast`: nothing is imported or run.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("surgery",)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """module name -> file, for every .py file of the packages."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `path` (module `name`) imports, relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            # `from a.b import c`: c may be a module of a.b, else a name in it
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for t in targets:
            while t and t not in known:  # a name inside a module: the module it lives in
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    mods = modules(root)
    known = set(mods)
    g = {name: imports_of(name, path, known) for name, path in mods.items()}
    for name in g:  # a package's __init__ is imported with any of its modules: not a dependency of its own
        g[name] = {t for t in g[name] if not name.startswith(t + ".")}
    return g


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v: str) -> None:
        work = [(v, iter(sorted(g[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        group.append(w)
                        if w == node:
                            break
                    if len(group) > 1:
                        out.append(sorted(group))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def floors(g: dict[str, set[str]]) -> dict[str, int]:
    """Floor 0: imports nothing of the house; else one above the highest floor imported (circles excluded)."""
    level: dict[str, int] = {}

    def floor(v: str, seen: tuple = ()) -> int:
        if v in level:
            return level[v]
        if v in seen:
            return 0
        level[v] = 1 + max((floor(w, (*seen, v)) for w in g[v]), default=-1)
        return level[v]

    for v in g:
        floor(v)
    return level


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--edges", action="store_true", help="print every import too")
    args = ap.parse_args(argv)
    g = graph()
    level = floors(g)
    for f in sorted(set(level.values())):
        names = sorted(n for n, v in level.items() if v == f)
        print(f"floor {f:2d}: {', '.join(names)}")
    if args.edges:
        for name in sorted(g):
            for t in sorted(g[name]):
                print(f"  {name} -> {t}")
    found = circles(g)
    for group in found:
        print(f"circle: {' <-> '.join(group)}")
    print(f"{len(g)} modules, {sum(len(v) for v in g.values())} imports, {len(found)} circle(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
