"""The runtime's imports, read with `ast` (nothing is imported): its modules and the edges between them, the import
circles (every import counts: at the top, in a function, under TYPE_CHECKING), the private names (`_x`) one module
takes from another, and the files and lines of each layer (its sub-packages; the modules at its top are the API).

    python scripts/layers.py [ROOT]        # ROOT: a package folder, default runtime/; exit 1 on a circle or a
                                           # private name taken across modules
"""
from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Set, Tuple

REPO = Path(__file__).resolve().parent.parent
DISTRIBUTION = "seq2onnx"               # the runtime's absolute name is seq2onnx.runtime (pyproject's package-dir)
TOP = "(top-level API)"


@dataclass
class Report:
    root: Path
    modules: Dict[str, Path]                                            # dotted name -> file
    edges: Dict[str, Set[str]] = field(default_factory=lambda: defaultdict(set))
    private: List[Tuple[str, int, str, str]] = field(default_factory=list)    # (module, line, from module, name)

    @property
    def circles(self) -> List[List[str]]:
        return circles(self.edges)


def module_names(root: Path) -> Dict[str, Path]:
    """Every .py file under `root` by its dotted name (root's folder name first; a package is its __init__)."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = (root.name,) + path.relative_to(root).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def read(root: Path) -> Report:
    """The report of the package at `root`."""
    report = Report(root, module_names(root))
    known = report.modules

    def internal(name: str) -> str:
        """An absolute module name as the package's own (seq2onnx.runtime.x -> runtime.x), or "" if outside it."""
        name = name.removeprefix(DISTRIBUTION + ".")
        return name if name == root.name or name.startswith(root.name + ".") else ""

    for module, path in known.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        aliases: Dict[str, str] = {}                    # a local name bound to a module of the package
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = internal(alias.name)
                    if target:
                        report.edges[module].add(target)
                        if alias.asname:
                            aliases[alias.asname] = target
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = internal(node.module or "")
                if not source:
                    continue
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    if sub in known:                    # `from . import cli`: the module itself
                        report.edges[module].add(sub)
                        aliases[alias.asname or alias.name] = sub
                        continue
                    report.edges[module].add(source)
                    if _private(alias.name) and source != module:
                        report.private.append((module, node.lineno, source, alias.name))
        for node in ast.walk(tree):                     # module._name, for a module bound by an import
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and _private(node.attr) and aliases[node.value.id] != module):
                report.private.append((module, node.lineno, aliases[node.value.id], node.attr))
        report.edges[module].discard(module)
    return report


def circles(edges: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm): each an import circle."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    return found


def layer_sizes(report: Report) -> Dict[str, Tuple[int, int]]:
    """Files and lines per layer: a sub-package of the root, or TOP for the modules at the root."""
    sizes: Dict[str, List[int]] = defaultdict(lambda: [0, 0])
    for path in report.modules.values():
        parts = path.relative_to(report.root).parts
        layer = parts[0] if len(parts) > 1 else TOP
        sizes[layer][0] += 1
        sizes[layer][1] += len(path.read_text(encoding="utf-8").splitlines())
    return {k: (v[0], v[1]) for k, v in sorted(sizes.items())}


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root", nargs="?", default=str(REPO / "runtime"), help="a package folder (default runtime/)")
    root = Path(p.parse_args(argv).root).resolve()
    report = read(root)
    n_edges = sum(len(v) for v in report.edges.values())
    print(f"{root.name}: {len(report.modules)} modules, {n_edges} import edges")
    found = report.circles
    print(f"import circles: {len(found)}")
    for c in found:
        print("  " + " <-> ".join(c))
    print(f"private names imported across modules: {len(report.private)}")
    for module, line, source, name in report.private:
        print(f"  {module}:{line} takes {name} from {source}")
    print(f"{'layer':<18}{'files':>6}{'lines':>8}")
    sizes = layer_sizes(report)
    for layer, (files, lines) in sizes.items():
        print(f"{layer:<18}{files:>6}{lines:>8}")
    print(f"{'total':<18}{sum(f for f, _ in sizes.values()):>6}{sum(n for _, n in sizes.values()):>8}")
    return 1 if found or report.private else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
