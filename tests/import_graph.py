"""The package's import graph, read from the source, and the rules its floors keep.

`python -m tests.import_graph` prints every edge (module -> imported module), then any
cycle and any import that breaks a rule; `--dot` prints Graphviz instead. Imports
inside functions count: a lazy import is still a dependency.

The floors:
  imgpipe.components.common          imports no other part of the package
  imgpipe.components.<component>     imports common and its own modules only
  imgpipe.pipelines                  may import the components
  imgpipe.pipelines.kubeflow         (compile time) never imports pipelines.container
  imgpipe.pipelines.container        (in the pod) imports only kfp_contract, tfx_patches
                                     and termination
  imgpipe.pipelines.cli              nothing below imports the CLI
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMESPACE = "imgpipe"
# Folder -> package, as pyproject.toml's package-dir maps them.
PACKAGE_DIRS = {"components": f"{NAMESPACE}.components", "pipelines": f"{NAMESPACE}.pipelines"}
COMMON = f"{NAMESPACE}.components.common"
CONTAINER = f"{NAMESPACE}.pipelines.container"
KUBEFLOW = f"{NAMESPACE}.pipelines.kubeflow"
CLI = f"{NAMESPACE}.pipelines.cli"
CONTAINER_MAY_IMPORT = (
    f"{NAMESPACE}.pipelines.kfp_contract",
    f"{NAMESPACE}.pipelines.tfx_patches",
    f"{NAMESPACE}.pipelines.termination",
)


def modules() -> dict[str, str]:
    """Module name -> file path, for every module of the package."""
    found = {}
    for folder, package in PACKAGE_DIRS.items():
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, folder)):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            rel = os.path.relpath(dirpath, os.path.join(ROOT, folder))
            prefix = package if rel == "." else f"{package}.{rel.replace(os.sep, '.')}"
            for name in sorted(filenames):
                if name.endswith(".py"):
                    module = prefix if name == "__init__.py" else f"{prefix}.{name[:-3]}"
                    found[module] = os.path.join(dirpath, name)
    return found


def imported_names(path: str) -> Iterator[str]:
    """Every absolute module name a file imports, at any depth (`from a import b` gives
    a.b as well as a, since b may be a module)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            for alias in node.names:
                yield f"{node.module}.{alias.name}"


def graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    known = modules()
    edges: dict[str, set[str]] = {}
    for module, path in known.items():
        targets = set()
        for name in imported_names(path):
            if name in known and name != module and not module.startswith(name + "."):
                targets.add(name)
        edges[module] = targets
    return edges


# Folders whose code imports the package as a user would.
CLIENT_DIRS = ("tests", "benchmarks")


def _python_files(folder: str) -> Iterator[str]:
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, folder)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        yield from (os.path.join(dirpath, n) for n in sorted(filenames) if n.endswith(".py"))


def foreign_top_level_imports() -> list[str]:
    """Imports of the folders' bare names (`components...`, `pipelines...`), which an
    installed distribution does not provide, in the package, the tests and the
    benchmarks; and relative imports, which the graph could not follow."""
    bad = []
    paths = list(modules().values())
    for folder in CLIENT_DIRS:
        paths.extend(_python_files(folder))
    for path in paths:
        where = os.path.relpath(path, ROOT)
        for name in imported_names(path):
            if name.split(".")[0] in PACKAGE_DIRS:
                bad.append(f"{where} imports {name}")
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        if any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(tree)):
            bad.append(f"{where} has a relative import")
    return sorted(set(bad))


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def _component_of(module: str) -> str | None:
    """`imgpipe.components.<name>` for a module inside a component, else None."""
    parts = module.split(".")
    if len(parts) >= 3 and parts[1] == "components" and parts[2] != "common":
        return ".".join(parts[:3])
    return None


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def rule_breaks(edges: dict[str, set[str]]) -> list[str]:
    """Imports that cross a floor sideways or upwards."""
    bad = []
    for module, targets in sorted(edges.items()):
        for target in sorted(targets):
            why = None
            if _inside(module, COMMON) and not _inside(target, COMMON):
                why = "the common floor imports nothing above it"
            elif _component_of(module) and not (
                _inside(target, COMMON) or _component_of(target) == _component_of(module)
            ):
                why = "a component reaches only into common and itself"
            elif _inside(module, KUBEFLOW) and _inside(target, CONTAINER):
                why = "compile-time code never imports the pod's code"
            elif _inside(module, CONTAINER) and not (
                _inside(target, CONTAINER) or target in CONTAINER_MAY_IMPORT
            ):
                why = "the pod's code imports only the contract and the patches"
            elif _inside(target, CLI) and not _inside(module, CLI):
                why = "nothing below the CLI imports it"
            elif module.startswith(f"{NAMESPACE}.components") and target.startswith(
                f"{NAMESPACE}.pipelines"
            ):
                why = "components never import pipelines"
            if why:
                bad.append(f"{module} -> {target}: {why}")
    return bad


def main(argv: list[str]) -> int:
    edges = graph()
    if "--dot" in argv:
        print("digraph imgpipe {")
        for module, targets in sorted(edges.items()):
            for target in sorted(targets):
                print(f'  "{module}" -> "{target}";')
        print("}")
        return 0
    for module, targets in sorted(edges.items()):
        for target in sorted(targets):
            print(f"{module} -> {target}")
    problems = (
        [f"cycle: {' <-> '.join(c)}" for c in cycles(edges)]
        + rule_breaks(edges)
        + foreign_top_level_imports()
    )
    print(
        f"{len(edges)} modules, {sum(map(len, edges.values()))} imports, {len(problems)} problems"
    )
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
