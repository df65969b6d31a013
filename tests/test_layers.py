"""The package's shape: plugins use only the public plugin API, and rewriter's modules import
each other without a cycle, each only from its own layer or those below it: the stages as
subpackages in the order data flows (io, detect, plan, apply, verify, the engine that runs
them, compare, report), the graph utilities and plugin machinery below them, the facades
(``rewriter``, ``rewriter.api``, ``rewriter.plugin``, ``rewriter.testing``) and the CLI on
top."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rewriter"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _imports(path: Path) -> set[str]:
    """Every ``rewriter...`` module a file imports, at module level or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                node.module == "rewriter" or node.module.startswith("rewriter.")):
            submodules = {f"{node.module}.{a.name}" for a in node.names}
            known = {m for m in submodules if _is_module(m)}
            out.update(known)
            if len(known) < len(submodules):  # names the module defines
                out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("rewriter"))
    return out


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in _imports(path) if m in modules and m != name}
            for name, path in modules.items()}


def test_plugins_and_kernels_import_only_the_plugin_api():
    wrong = []
    for folder in ("plugins", "custom_ops"):
        for path in sorted((ROOT / folder).rglob("*.py")):  # (plugin packages included)
            where = path.relative_to(ROOT)
            for module in _imports(path):
                if module.startswith("rewriter.") and not module.startswith("rewriter.plugin"):
                    wrong.append(f"{where}: {module}")
                elif module == "rewriter":
                    wrong.append(f"{where}: import rewriter")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle():
    assert not _cycles(_graph()), _cycles(_graph())


# the layers, lowest first; a module's layer is its longest matching prefix
LAYERS = [
    ("rewriter.errors", "rewriter.console", "rewriter.progress", "rewriter.graph"),
    ("rewriter.registry", "rewriter.hookspecs", "rewriter.manager"),
    ("rewriter.io",),
    ("rewriter.detect",),
    ("rewriter.plan",),
    ("rewriter.apply",),
    ("rewriter.verify",),
    ("rewriter.engine",),
    ("rewriter.comparison",),
    ("rewriter.report",),
    ("rewriter.api", "rewriter.plugin", "rewriter.testing", "rewriter.cli", "rewriter"),
]


def _layer(module: str) -> int:
    best, found = -1, None
    for rank, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), rank
    assert found is not None, f"{module} is in no layer: add it to LAYERS"
    return found


def test_imports_only_go_down():
    upward = [f"{a} ({_layer(a)}) imports {b} ({_layer(b)})"
              for a, targets in sorted(_graph().items()) for b in sorted(targets)
              if _layer(b) > _layer(a)]
    assert not upward, "\n".join(upward)


def test_every_subpackage_is_installed():
    """pyproject lists rewriter's packages one by one (plugins and kernels live in folders of
    other names): a subpackage missing there is missing from `pip install .`."""
    import re

    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^packages = \[(.*?)\]", text, re.M | re.S).group(1)
    listed = set(re.findall(r'"([\w.]+)"', block))
    found = {_module_name(p.parent) for p in PACKAGE.rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)


# -- the built-in plugins and kernels (plugins/, custom_ops/) ---------------------------------

_FOLDERS = {"plugins": "rewriter_plugins", "custom_ops": "rewriter_custom_ops"}
# what plugins/ does that it must not: none since issue 31 (a debt added here must say why)
KNOWN_PRIVATE_IMPORTS: set[tuple[str, str, str]] = set()
KNOWN_CYCLES: list[list[str]] = []


def _plugin_modules() -> dict[str, Path]:
    out = {}
    for folder, package in _FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = [package, *path.relative_to(ROOT / folder).with_suffix("").parts]
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _plugin_imports() -> tuple[dict[str, set[str]], set[tuple[str, str, str]]]:
    """Each built-in module's imports of other built-in modules (module level or lazy, and
    relative ones), and the private names (``_x``) imported from another module."""
    modules = _plugin_modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    private = set()
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name in modules)
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                if f"{source}.{alias.name}" in modules:
                    graph[name].add(f"{source}.{alias.name}")
                elif source in modules and source != name:
                    graph[name].add(source)
                    if alias.name.startswith("_"):
                        private.add((name, source, alias.name))
    return graph, private


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_plugins_import_no_private_name_of_another_module():
    _, private = _plugin_imports()
    assert private - KNOWN_PRIVATE_IMPORTS == set(), sorted(private - KNOWN_PRIVATE_IMPORTS)
    assert KNOWN_PRIVATE_IMPORTS - private == set(), (
        "fixed: remove from KNOWN_PRIVATE_IMPORTS", sorted(KNOWN_PRIVATE_IMPORTS - private))


def test_plugins_have_no_import_cycle():
    graph, _ = _plugin_imports()
    assert _cycles(graph) == KNOWN_CYCLES


def test_every_plugin_package_is_installed():
    import re

    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^packages = \[(.*?)\]", text, re.M | re.S).group(1)
    listed = set(re.findall(r'"([\w.]+)"', block))
    found = {name for name, path in _plugin_modules().items() if path.name == "__init__.py"}
    assert found <= listed, sorted(found - listed)


LONG_MODULE_LINES = 600


def test_long_plugin_modules_say_why():
    """A built-in module over 600 lines says why at the top of its docstring (issue 31: one op
    family per module, so a contributor finds an op's code by its module's name)."""
    unexplained = []
    for name, path in sorted(_plugin_modules().items()):
        lines = path.read_text().count("\n")
        if lines <= LONG_MODULE_LINES:
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if not any(p.startswith("Longer than 600 lines because") for p in doc.split("\n\n")):
            unexplained.append(f"{name}: {lines} lines")
    assert not unexplained, "\n".join(unexplained)


def test_every_package_init_indexes_its_modules():
    """Each plugin package's ``__init__`` docstring names every module of the package."""
    missing = []
    for name, path in sorted(_plugin_modules().items()):
        if path.name != "__init__.py":
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        for child in sorted(path.parent.iterdir()):
            module = child.stem if child.suffix == ".py" else child.name
            if child.name == "__init__.py" or module.startswith("__"):
                continue
            if (child.suffix == ".py" or (child / "__init__.py").exists()) \
                    and module not in doc:
                missing.append(f"{name}: {module}")
    assert not missing, "\n".join(missing)
