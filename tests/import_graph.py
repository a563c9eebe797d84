"""The package's import graph, read from the source, and the rules its floors keep.

`python -m tests.import_graph` prints every edge (module -> imported module), then any
cycle and any import that breaks a rule; `--dot` prints Graphviz instead. Imports
inside functions count: a lazy import is still a dependency.

The floors:
  imgpipe.components.common          imports no other part of the package; the shared
                                     room: each of its modules is public to every room
  imgpipe.components.<component>     imports common and its own modules only; other
                                     rooms import the package alone (its __init__,
                                     the front door) or a sub-package with a front
                                     door of its own (sub_front_doors), never one of
                                     their modules
  imgpipe.pipelines                  may import the components
  imgpipe.pipelines.kubeflow         (compile time) never imports pipelines.container
  imgpipe.pipelines.container        (in the pod) imports only kfp_contract, tfx_patches,
                                     termination, and the end of a run's collection
                                     (collect, run_folders, launcher_mounts)
  imgpipe.pipelines.cli              nothing below imports the CLI
"""

from __future__ import annotations

import ast
import os
import re
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
    # Retention on Kubeflow (pipelines/retention_runs.py), loaded after the executor.
    f"{NAMESPACE}.pipelines.collect",
    f"{NAMESPACE}.pipelines.retention",
    f"{NAMESPACE}.pipelines.run_folders",
    f"{NAMESPACE}.components.common.storage.launcher_mounts",
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


# How a package's __init__ serves its names as a front door
# (components/common/runtime/front_door.py).
_LAZY_DOOR = "__getattr__ = front_door.lazy(__name__)"


def sub_front_doors() -> set[str]:
    """The sub-packages of a component with a front door of their own: an __init__ that
    serves its names on first use (front_door.lazy), each from its own modules. Other
    rooms may import such a door, never a module behind it."""
    found = set()
    for module, path in modules().items():
        component = _component_of(module)
        if component and component != module and path.endswith("__init__.py"):
            with open(path, encoding="utf-8") as f:
                if _LAZY_DOOR in f.read():
                    found.add(module)
    return found


def rule_breaks(edges: dict[str, set[str]], doors: set[str] | None = None) -> list[str]:
    """Imports that cross a floor sideways or upwards; `doors`, the sub-packages with a
    front door of their own (sub_front_doors() when None)."""
    doors = sub_front_doors() if doors is None else doors
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
            elif (
                _component_of(target)
                and _component_of(target) != target
                and target not in doors
                and _component_of(target) != _component_of(module)
            ):
                why = "other rooms use a component through its front door (its __init__)"
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


# Libraries whose private names live in one module each (pipelines/tfx_patches.py; the
# tests' tests/plugin_patches.py), each with its reason and the version it was checked on.
PRIVATE_API_LIBRARIES = ("tfx", "kfp", "apache_beam", "xdist", "_pytest", "pluggy")
PRIVATE_API_HOMES = ("pipelines/tfx_patches.py", "tests/plugin_patches.py")
# Modules of those libraries that are private as a whole (not in tfx.v1, kfp or Beam's
# documented API), though their names do not start with an underscore.
PRIVATE_MODULES = ("tfx.orchestration.portable", "kfp.local.docker_task_handler")


def _library(module: str) -> bool:
    return module.split(".", 1)[0] in PRIVATE_API_LIBRARIES


def _private_module(module: str) -> bool:
    parts = module.split(".")
    return _library(module) and (
        any(p.startswith("_") and not p.startswith("__") for p in parts[1:])
        or any(module == m or module.startswith(m + ".") for m in PRIVATE_MODULES)
    )


def private_names_used(path: str) -> list[str]:
    """`line: name` for every private name of PRIVATE_API_LIBRARIES a file uses: a
    private module imported, a private name imported from one of them, an attribute with
    a leading underscore read from a module or class imported from one of them, and a
    private method overridden in a subclass of one of their classes."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    imported: set[str] = set()  # local names bound to the libraries' modules and classes
    found = []

    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _library(alias.name):
                    imported.add((alias.asname or alias.name).split(".")[0])
                    if _private_module(alias.name):
                        found.append(f"{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if not _library(node.module):
                continue
            private_from = _private_module(node.module)
            if private_from:
                found.append(f"{node.lineno}: from {node.module}")
            for alias in node.names:
                imported.add(alias.asname or alias.name)
                if private(alias.name) or (
                    not private_from and _private_module(f"{node.module}.{alias.name}")
                ):
                    found.append(f"{node.lineno}: {node.module}.{alias.name}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and private(node.attr)
            and isinstance(node.value, ast.Name)
            and node.value.id in imported
        ):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
        if isinstance(node, ast.ClassDef) and any(
            isinstance(base, ast.Name | ast.Attribute)
            and (base.id if isinstance(base, ast.Name) else _root_name(base)) in imported
            for base in node.bases
        ):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and private(item.name):
                    found.append(f"{item.lineno}: overrides {node.name}.{item.name}")
    return sorted(set(found), key=lambda line: int(line.split(":", 1)[0]))


def _root_name(node: ast.expr) -> str:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def private_api_outside_its_homes() -> list[str]:
    """`file:line: name` for every private library name outside PRIVATE_API_HOMES, over
    the package, the tests and the benchmarks."""
    found = []
    for folder in ("components", "pipelines", "tests", "benchmarks", "bin"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, folder)):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                where = os.path.relpath(path, ROOT)
                if not name.endswith(".py") or where in PRIVATE_API_HOMES:
                    continue
                found += [
                    f"{where}:{line}"
                    for line in private_names_used(path)
                    if not _own_method(where, line)
                ]
    return found


_OVERRIDE = re.compile(r"\d+: overrides (\w+)\.(\w+)$")


def _own_method(where: str, line: str) -> bool:
    """Whether an `overrides Class._name` line is a private method of our own, which no
    library base class defines (the class is imported to see)."""
    import importlib

    match = _OVERRIDE.match(line)
    if match is None:
        return False
    folder, _, rest = where.partition("/")
    package = PACKAGE_DIRS.get(folder, folder)
    module = importlib.import_module(f"{package}.{rest[:-3].replace('/', '.')}")
    cls = getattr(module, match.group(1))
    return not any(
        match.group(2) in vars(base) for base in cls.__mro__[1:] if _library(base.__module__)
    )


# Where the product starts: the CLI, every component (TFX loads its executor, and the
# functions its properties name), and what runs in a pod.
ENTRY_POINTS = (
    f"{NAMESPACE}.pipelines.cli.__main__",
    f"{NAMESPACE}.pipelines.container.entrypoint",
)
_DOTTED = re.compile(rf"\b{NAMESPACE}(?:\.\w+)+")


def string_references(path: str) -> set[str]:
    """Modules a file names in strings (a run_fn's or an executor's dotted path)."""
    known = modules()
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            for dotted in _DOTTED.findall(node.value):
                while dotted and dotted not in known:
                    dotted = dotted.rpartition(".")[0]
                if dotted:
                    found.add(dotted)
    return found


def unreachable_modules() -> list[str]:
    """Modules of the package that no entry point reaches through imports (lazy ones
    included), component packages or dotted names in strings: code the wheel ships and
    the product never runs."""
    known = modules()
    edges = graph()
    for module, path in known.items():
        edges[module] |= string_references(path) - {module}
    roots = set(ENTRY_POINTS) | {
        m for m in known if m.startswith(f"{NAMESPACE}.components.") and m.endswith(".component")
    }
    seen: set[str] = set()
    pending = list(roots)
    while pending:
        module = pending.pop()
        if module in seen:
            continue
        seen.add(module)
        # A module's package (its __init__) is imported with it.
        parent = module.rpartition(".")[0]
        pending += [m for m in (edges.get(module, set()) | {parent}) if m in known]
    return sorted(set(known) - seen)
