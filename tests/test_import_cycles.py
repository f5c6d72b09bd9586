"""The modules of autospmv import each other without a cycle.

Every import counts: those that run when a module is imported (including imports inside
module-level ``if``/``try`` blocks and class bodies) and those inside functions and methods,
which run when the function is called. A function-level import may defer loading a heavy
module (numba-cuda, CuPy, the training pipeline), never hide a loop between two modules: the
modules stand in layers, each importing only those below it. An import names the module it reads from
(``from .registry import KERNELS`` and ``from . import registry`` both point at
``autospmv._registry``); the parent packages Python imports on the way are not counted, since
every module would otherwise depend on ``autospmv/__init__.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "autospmv"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _module_level_imports(tree: ast.Module, functions: bool = False):
    """The Import and ImportFrom nodes that run when the module is imported (with
    ``functions``, also those inside functions)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if not functions and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                               ast.Lambda)):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _from_module(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute name of the module a ``from ... import`` of module ``name`` reads from."""
    if not node.level:
        return node.module or ""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _targets(name: str, path: Path, node, modules) -> set[str]:
    """The autospmv modules one import statement of module ``name`` reads from."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in modules}
    base = _from_module(name, path, node)
    out = set()
    for alias in node.names:
        if f"{base}.{alias.name}" in modules:  # a submodule: from . import registry
            out.add(f"{base}.{alias.name}")
        elif base in modules:
            out.add(base)
    return out


def import_graph(functions: bool = False) -> dict[str, set[str]]:
    """Module name -> the autospmv modules its module-level imports (with ``functions``, all
    its imports) read from."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        graph[name] = set().union(*(_targets(name, path, node, modules)
                                    for node in _module_level_imports(tree, functions)))
        graph[name].discard(name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as the list of its modules (first repeated at the end), or None."""
    done, on_path = set(), []

    def visit(node):
        if node in on_path:
            return on_path[on_path.index(node):] + [node]
        if node in done:
            return None
        on_path.append(node)
        for target in sorted(graph.get(node, ())):
            cycle = visit(target)
            if cycle:
                return cycle
        on_path.pop()
        done.add(node)
        return None

    for start in sorted(graph):
        cycle = visit(start)
        if cycle:
            return cycle
    return None


@pytest.mark.parametrize("functions", [False, True], ids=["module-level", "all imports"])
def test_the_package_has_no_import_cycle(functions):
    cycle = find_cycle(import_graph(functions))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_graph_sees_the_imports_it_should():
    graph = import_graph()
    assert "autospmv._registry" in graph["autospmv._prepare.prepare"]  # from . import registry
    assert "autospmv.formats.base" in graph["autospmv._registry"]  # from .formats.base import ...
    assert "autospmv._support.devices" in graph["autospmv._decide.choosers"]  # from .devices import ...
    assert "autospmv._support.threads" in graph["autospmv.kernels.cpu"]  # from ..._support.threads import
    assert "autospmv.kernels.cpu" in graph["autospmv.kernels.cpu.csr"]  # from . import ...
    # devices imports autospmv.kernels.cuda inside cuda_available() only.
    assert graph["autospmv._support.devices"] == set()
    # tuning imports the timer inside measure (tune="measure") only.
    assert "autospmv._support.timing" not in graph["autospmv._prepare.tuning"]
    assert "autospmv._support.timing" in import_graph(functions=True)["autospmv._prepare.tuning"]


def test_the_timer_stands_on_numpy_alone():
    """autospmv._support.timing imports no autospmv module, and only NumPy and the standard library when
    imported (numba-cuda inside the functions that make CUDA clocks or vectors), so any module
    may use it."""
    assert import_graph(functions=True)["autospmv._support.timing"] == set()
    tree = ast.parse((PACKAGE / "_support" / "timing.py").read_text(encoding="utf-8"))
    imported = {alias.name if isinstance(node, ast.Import) else node.module
                for node in _module_level_imports(tree) for alias in node.names}
    assert imported <= {"__future__", "dataclasses", "math", "time", "numpy"}


def test_autospmv_imports_training_only_to_delegate_retrain():
    """The training pipeline is no part of the library: no autospmv module imports
    ``autospmv.training``, even inside a function, except the command line's ``retrain``,
    which hands over to it (and says how to install its optional packages)."""
    found = set()
    for name, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in _module_level_imports(tree, functions=True):
            modules = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                       else [_from_module(name, path, node)])
            found |= {(name, m) for m in modules
                      if m == "training" or m.startswith(("training.", "autospmv.training"))}
    assert found == {("autospmv.__main__", "autospmv.training.__main__")}


@pytest.mark.parametrize("module, other", [
    ("autospmv._decide.features.extract", "autospmv._prepare.prepare"),
    ("autospmv._decide.model.tree", "autospmv._prepare.prepare"),
    ("autospmv.formats.csr5", "autospmv._registry"),
])
def test_removed_cycles_stay_removed_even_through_functions(module, other):
    """These pairs once imported each other (one side inside a function): device questions now
    live in autospmv._support.devices, so neither side needs the other back."""
    graph = import_graph(functions=True)
    assert not (_reaches(graph, module, other) and _reaches(graph, other, module))


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, stack = set(), [start]
    while stack:
        node = stack.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            stack.extend(graph.get(node, ()))
    return False


@pytest.mark.parametrize("graph, cycle", [
    ({"a": {"b"}, "b": {"a"}}, ["a", "b", "a"]),
    ({"a": {"b"}, "b": {"c"}, "c": {"b"}}, ["b", "c", "b"]),
    ({"a": {"b", "c"}, "b": {"c"}, "c": set()}, None),
])
def test_find_cycle(graph, cycle):
    assert find_cycle(graph) == cycle


def test_function_level_imports_are_not_counted():
    tree = ast.parse("import a\nif x:\n    import b\nclass C:\n    import c\n"
                     "def f():\n    import d\n")
    names = sorted(alias.name for node in _module_level_imports(tree) for alias in node.names)
    assert names == ["a", "b", "c"]
