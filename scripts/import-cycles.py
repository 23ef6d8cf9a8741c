#!/usr/bin/env python3
"""Draws the module import graph of a crate's `src/` and reports its import circles.

Usage: scripts/import-cycles.py [SRC_DIR] [--exclude MODULE]... [--dot]

Every `.rs` file is a module (`a/b.rs` and `a/b/mod.rs` are `a::b`; `lib.rs` and
`main.rs` the root). An edge A -> B is any path `crate::B...` or `super::...` in A's
text (comments and string literals removed, but for the paths serde's `with` attributes
name) that resolves to module B: the longest
prefix of the path that names a module. Edges between a module and its own ancestors
or descendants are left out: a parent and the children it declares are one unit (the
parent's facade re-exports them, a child uses the parent's items), so only circles
between separate modules count. `--exclude` drops a module and everything under it
(the binary's `demo`).

Prints every strongly connected component of more than one module and exits 1 when
there is one; `--dot` prints the graph in Graphviz form instead.
"""

import os
import re
import sys


def module_of(rel):
    parts = rel[:-3].split(os.sep)
    if parts[-1] == "mod":
        parts = parts[:-1]
    if parts in (["lib"], ["main"]):
        return ()
    return tuple(parts)


def strip(text):
    """Removes comments and string literals (doc comments name paths that are not uses),
    except the paths that serde's `with`, `serialize_with` and `deserialize_with`
    attributes name in strings: those are uses."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r'\b((?:de)?serialize_with|with)\s*=\s*"([\w:]+)"', r"\1 = \2", text)
    text = re.sub(r'r#*"(?:.|\n)*?"#*', '""', text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    return text


PATH = re.compile(r"(?<![\w:])(\$?crate|super(?:::super)*)((?:::\w+)*)(::\{[^;]*?\})?")


def expand(prefix, group):
    """`a::{b, c::d}` -> [a::b, a::c::d] (one level of braces is enough for targets)."""
    if not group:
        return [prefix]
    inner = group[3:-1]
    out = []
    depth, cur = 0, ""
    for ch in inner + ",":
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            item = cur.strip()
            if item:
                head = re.match(r"\w+(?:::\w+)*", item)
                if head:
                    out.append(prefix + tuple(head.group(0).split("::")))
            cur = ""
        else:
            cur += ch
    return out or [prefix]


def resolve(path, modules):
    for n in range(len(path), 0, -1):
        if path[:n] in modules:
            return path[:n]
    return None


def related(a, b):
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def graph(src, exclude):
    files = {}
    for root, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs"):
                rel = os.path.relpath(os.path.join(root, name), src)
                files[module_of(rel)] = os.path.join(root, name)
    modules = set(files)
    edges = {m: set() for m in modules}
    for m, path in files.items():
        text = strip(open(path, encoding="utf-8").read())
        for line in text.split("\n"):
            indented = line[:1].isspace()
            for match in PATH.finditer(line):
                base, rest, group = match.groups()
                if base.endswith("crate"):
                    start = ()
                else:
                    ups = base.count("super")
                    # `super` inside an inline module (indented) is the file's own module.
                    ups -= 1 if indented else 0
                    start = m[: len(m) - ups]
                prefix = start + tuple(p for p in rest.split("::") if p)
                for target in expand(prefix, group):
                    t = resolve(target, modules)
                    if t is not None and t != m and not related(m, t):
                        edges[m].add(t)
    keep = lambda m: m != () and not any(m[: len(e)] == e for e in exclude)
    return {m: {t for t in ts if keep(t)} for m, ts in edges.items() if keep(m)}


def sccs(edges):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
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
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return [c for c in out if len(c) > 1]


def name(m):
    return "::".join(m)


def main(argv):
    src, exclude, dot = "src", [], False
    args = iter(argv)
    for a in args:
        if a == "--exclude":
            exclude.append(tuple(next(args).split("::")))
        elif a == "--dot":
            dot = True
        else:
            src = a
    edges = graph(src, exclude)
    if dot:
        print("digraph imports {")
        for m in sorted(edges):
            for t in sorted(edges[m]):
                print(f'  "{name(m)}" -> "{name(t)}";')
        print("}")
        return 0
    circles = sccs(edges)
    for c in circles:
        inner = [(name(a), name(b)) for a in c for b in sorted(edges[a]) if b in c]
        print("circle: " + ", ".join(name(m) for m in c))
        for a, b in inner:
            print(f"  {a} -> {b}")
    n_edges = sum(len(t) for t in edges.values())
    print(f"{len(edges)} modules, {n_edges} imports, {len(circles)} circles")
    return 1 if circles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
