#!/usr/bin/env python3
"""Finds import cycles between the modules of a crate: a module's dependencies are the
other modules it names through `crate::<module>` (in `use` lines or paths) or `super::`
from a submodule file. Prints each cycle (a strongly connected component of more than one
module) and exits 1 if there is one. Submodules of a directory module (handlers/x.rs) are
modules of their own; `mod.rs` is the directory's module.

    scripts/module-cycles.py crates/broker/src
"""
import re
import sys
from pathlib import Path


def module_of(src: Path, f: Path) -> str:
    rel = f.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("lib", "main"):
        return "crate"
    if parts[-1] == "mod":
        parts = parts[:-1]
    return "::".join(parts)


def strip_tests(text: str) -> str:
    # Unit tests may use whatever they like; they are not part of the module graph.
    i = text.find("#[cfg(test)]")
    return text if i < 0 else text[:i]


def main() -> int:
    src = Path(sys.argv[1] if len(sys.argv) > 1 else "crates/broker/src")
    files = sorted(src.rglob("*.rs"))
    modules = {module_of(src, f): f for f in files}
    names = set(modules)
    edges = {m: set() for m in names}
    for m, f in modules.items():
        text = strip_tests(f.read_text())
        # Drop comments so that docs naming a module do not count as using it.
        text = re.sub(r"//[^\n]*", "", text)
        refs = set()
        for path in re.findall(r"crate::([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*)", text):
            refs.add(path)
        for group in re.findall(r"crate::\{([^}]*)\}", text):
            refs.update(p.strip().split("::")[0] for p in group.split(",") if p.strip())
        # A module brought into scope (`use crate::handlers;`) and used by its name
        # (`handlers::produce::handle`).
        for path in re.findall(r"use crate::([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*);", text):
            if path in names:
                alias = path.split("::")[-1]
                for sub in re.findall(rf"(?<![:\w]){alias}::([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*)", text):
                    refs.add(f"{path}::{sub}")
        parent = "::".join(m.split("::")[:-1])
        for path in re.findall(r"super::([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*)", text):
            refs.add(f"{parent}::{path}" if parent else path)
        for path in re.findall(r"super::\{([^}]*)\}", text):
            refs.update(f"{parent}::{p.strip()}" if parent else p.strip() for p in path.split(",") if p.strip())
        for r in refs:
            parts = r.split("::")
            # The longest prefix that names a module (a name in it may be an item).
            for n in range(len(parts), 0, -1):
                target = "::".join(parts[:n])
                if target in names and target != m:
                    edges[m].add(target)
                    break
            else:
                # `super::item` in a submodule refers to its parent module.
                if parent in names and r.split("::")[0] not in names and parent != m and refs and r.startswith(parent):
                    edges[m].add(parent)
    # The crate root only declares modules; it is everyone's parent, not a dependency.
    edges.pop("crate", None)
    for m in edges:
        edges[m].discard("crate")
    # Tarjan's strongly connected components.
    index, low, stack, on, sccs = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    for comp in sccs:
        inner = {m: sorted(e for e in edges[m] if e in comp) for m in comp}
        print(f"cycle of {len(comp)} modules in {src}:")
        for m in comp:
            print(f"  {m} -> {', '.join(inner[m])}")
    if not sccs:
        print(f"{src}: {len(edges)} modules, no import cycle")
    return 1 if sccs else 0


if __name__ == "__main__":
    sys.exit(main())
