"""The folders of autospmv are layers, and every import points down.

From the bottom: what every part uses (devices, threads, compiled-code caches, validation, the
timer), the storage formats, the kernel registry (which names formats, kernels, choosers and
cost functions as ``"module:attribute"`` strings and so imports none of them), the kernels,
deciding (feature extraction, parameter choosers, cost quantities, the trained model, the
selection), preparing an operator, the solvers' iteration, and at the top the public faces: the
package, the command line and its tools, the distributed operator and the training pipeline.

Every import counts, module-level and inside functions. A module may import its own layer (the
cycle test keeps those imports free of loops) and the layers below, and nothing else: a lower
layer that needs something from above is handed it (a matrix on the GPU carries the conversion
kernels that the formats run, :attr:`autospmv.formats.base.DeviceCSR.conversions`).

And no module imports another module's underscore names, except between the modules of one
subpackage below the top (:func:`test_no_module_imports_another_modules_private_names`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

LAYERS = (
    ("support", ("autospmv._support",)),
    ("formats", ("autospmv.formats",)),
    ("registry", ("autospmv._registry",)),
    ("kernels", ("autospmv.kernels",)),
    ("decide", ("autospmv._decide",)),
    ("prepare", ("autospmv._prepare",)),
    ("solve", ("autospmv._solve",)),
    ("top", ("autospmv", "autospmv.solvers", "autospmv.__main__", "autospmv._tools",
             "autospmv.distributed", "autospmv.training")),
)
"""Each layer's packages and modules, bottom first; a module is in the layer of the longest
name that is it or a package above it (``autospmv`` itself is only ``autospmv/__init__.py``)."""

def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    if parts[0] == "training":
        parts = ("autospmv", *parts)  # installed as autospmv.training
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    paths = sorted((REPO / "autospmv").rglob("*.py")) + sorted((REPO / "training").rglob("*.py"))
    return {module_name(path): path for path in paths}


def layer(name: str) -> int:
    best = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            exact = prefix == "autospmv"
            if (name == prefix or (not exact and name.startswith(prefix + "."))) and (
                    best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    if best is None:
        raise AssertionError(f"{name} is in no layer: add its folder to LAYERS")
    return best[0]


def imports(known: dict[str, Path]):
    """``(module, imported module, names, line, inside a function)`` for every import of an
    autospmv or training module by one: a ``from`` import of a submodule names the submodule,
    one of names the module they are read from."""
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        yield from _walk(tree, name, package, known, False)


def _walk(node, name, package, known, in_function):
    for child in ast.iter_child_nodes(node):
        inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                   ast.Lambda))
        if isinstance(child, ast.Import):
            for alias in child.names:
                target = alias.name.replace("training", "autospmv.training", 1) \
                    if alias.name.split(".")[0] == "training" else alias.name
                if target in known:
                    yield name, target, (), child.lineno, in_function
        elif isinstance(child, ast.ImportFrom):
            if child.level:
                base = package
                for _ in range(child.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{child.module}" if child.module else base
            else:
                base = child.module or ""
                if base.split(".")[0] == "training":
                    base = "autospmv." + base
            for alias in child.names:
                if f"{base}.{alias.name}" in known:
                    yield name, f"{base}.{alias.name}", (), child.lineno, in_function
                elif base in known:
                    yield name, base, (alias.name,), child.lineno, in_function
        yield from _walk(child, name, package, known, inside)


def test_every_module_is_in_a_layer():
    for name in modules():
        layer(name)


def test_every_import_points_down_a_layer_or_stays_in_its_own():
    known = modules()
    up = []
    for name, target, _, line, _ in imports(known):
        if layer(target) <= layer(name):
            continue
        up.append(f"{name}:{line} imports {target} ({LAYERS[layer(name)][0]} -> "
                  f"{LAYERS[layer(target)][0]})")
    assert not up, "imports pointing up a layer:\n" + "\n".join(up)


def _subpackage_below_the_top(name: str) -> str | None:
    """The package holding module ``name`` when it is a subpackage of a folder below the top
    layer (``autospmv._decide.features``, ``autospmv.kernels.cuda``), else None."""
    package = name.rpartition(".")[0]
    if package.count(".") < 2 or layer(name) == len(LAYERS) - 1:
        return None
    return package


def test_no_module_imports_another_modules_private_names():
    found = []
    for name, target, names, line, _ in imports(modules()):
        private = [n for n in names if n.startswith("_") and not n.startswith("__")]
        shared = _subpackage_below_the_top(name)
        if private and not (shared and shared == _subpackage_below_the_top(target)):
            found.append(f"{name}:{line} imports {', '.join(private)} from {target}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("name, expected", [
    ("autospmv._support.devices", "support"),
    ("autospmv.formats.base", "formats"),
    ("autospmv._registry", "registry"),
    ("autospmv.kernels.cuda.csr", "kernels"),
    ("autospmv._decide.features.scan", "decide"),
    ("autospmv._prepare.operator", "prepare"),
    ("autospmv._solve.driver", "solve"),
    ("autospmv", "top"),
    ("autospmv.training.label", "top"),
])
def test_layer_of_a_module(name, expected):
    assert LAYERS[layer(name)][0] == expected


def test_the_walk_sees_function_level_and_training_imports():
    found = {(name, target, in_function) for name, target, _, _, in_function in
             imports(modules())}
    assert ("autospmv._prepare.device_input", "autospmv.kernels.cuda.conversions", True) in found
    assert ("autospmv.training.label", "autospmv._registry", False) in found
