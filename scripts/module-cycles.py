#!/usr/bin/env python3
"""Import cycles between the modules of one crate.

Usage: scripts/module-cycles.py SRC_DIR [DEPTH]

Reads every .rs file under SRC_DIR (a crate's src/), collects the `crate::` and
`super::` paths it names, folds each module path to its first DEPTH segments
(default 1: top-level modules), and prints the edge count and every strongly
connected component of more than one module, i.e. every group of modules that
import each other. Example: scripts/module-cycles.py controlplane/src 2

A rough regex tool, not a parser: comments are dropped, but paths in strings,
`self::` paths and macro-generated ones are not followed, and a `super::` in a
nested inline module is resolved from its file. Read a reported cycle in the
code before acting on it.
"""
import os
import re
import sys

SEG = r"[a-z_0-9]+"


def module_of(root, path):
    parts = os.path.relpath(path, root)[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts


def referenced(src, parts, depth):
    """Module paths (tuples of at most `depth` segments) that `src` names."""
    src = re.sub(r"//[^\n]*", "", src)
    base = parts[:-1]  # what `super::` names, from this file's module
    refs = set()
    for m in re.finditer(r"crate::\{([^}]*)\}", src):
        refs.update(tuple(i.strip().split("::")[:depth]) for i in m.group(1).split(","))
    for m in re.finditer(rf"crate::((?:{SEG}::)*{SEG})", src):
        refs.add(tuple(m.group(1).split("::")[:depth]))
    for m in re.finditer(r"\bsuper::\{([^}]*)\}", src):
        refs.update(tuple((base + i.strip().split("::"))[:depth]) for i in m.group(1).split(","))
    for m in re.finditer(rf"\bsuper::((?:{SEG}::)*{SEG})", src):
        refs.add(tuple((base + m.group(1).split("::"))[:depth]))
    return {"::".join(x for x in r if re.fullmatch(SEG, x)) for r in refs}


def cycles(graph):
    """Tarjan's strongly connected components with more than one member."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
                on.discard(comp[-1])
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.split("\n\n")[1])
    root = sys.argv[1]
    depth = int(sys.argv[2]) if len(sys.argv) == 3 else 1
    graph = {}
    for dirpath, _, files in os.walk(root):
        for f in sorted(files):
            if not f.endswith(".rs"):
                continue
            path = os.path.join(dirpath, f)
            parts = module_of(root, path)
            if not parts:
                continue
            me = "::".join(parts[:depth])
            with open(path, encoding="utf-8") as fh:
                refs = referenced(fh.read(), parts, depth)
            edges = graph.setdefault(me, set())
            edges.update(r for r in refs if r and r != me and not me.startswith(r + "::"))
    found = cycles(graph)
    edges = sum(len(v) for v in graph.values())
    print(f"{len(graph)} modules, {edges} edges, {len(found)} cycles")
    for comp in found:
        print("  cycle:", " ".join(comp))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
