"""The code's rooms hold: the collector's wings import only downwards, no package
has an import cycle (a lazy import counts), no module borrows another's private
name, and the collector, the importer and the builder stay apart.

docs/contributing.md draws the same order; a new module goes in a wing listed here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("rundir", "importer", "bench", "site_builder")

# The collector's wings, lowest first: a module imports from its own wing or one before it.
WINGS = ("core", "server", "workload", "measure", "distributed", "run")
# the command line, above every wing
TOP = {"bench", "bench.cli", "bench.options", "bench.params", "bench.validate_cmd"}

# Which package may import which (the run-directory contract is everyone's).
ALLOWED = {
    "rundir": {"rundir"},
    "importer": {"importer", "rundir"},
    "bench": {"bench", "rundir", "importer"},
    "site_builder": {"site_builder", "rundir"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            found[_module_name(path)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, str | None, int]]:
    """(module imported, name taken from it or None, line), lazy imports included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, None, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([module] if module else []))
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                out.append((sub, None, node.lineno) if sub in MODULES else (module, alias.name, node.lineno))
    return [(m, n, line) for m, n, line in out if m.split(".")[0] in PACKAGES]


def _resolve(module: str) -> str:
    """The nearest module of ours that ``module`` names (a.b.c -> a.b when c is a name)."""
    while module and module not in MODULES:
        module = module.rpartition(".")[0]
    return module


GRAPH = {
    name: {(_resolve(m), taken, line) for m, taken, line in _imports(name, path)}
    for name, path in MODULES.items()
}


def _wing(module: str) -> int:
    if module in TOP:
        return len(WINGS)
    parts = module.split(".")
    assert len(parts) >= 3 and parts[1] in WINGS, (
        f"{module}: every collector module lives in a wing ({', '.join(WINGS)}) or is the CLI")
    return WINGS.index(parts[1])


def test_every_collector_module_is_in_a_wing():
    for module in MODULES:
        if module.startswith("bench.") and module not in TOP and module.count(".") >= 1:
            if module.count(".") == 1 and module.split(".")[1] in WINGS:
                continue  # the wing's own __init__
            _wing(module)


def test_the_wings_import_only_downwards():
    upward = []
    for module, edges in GRAPH.items():
        if not module.startswith("bench.") or module.split(".")[1] in WINGS and module.count(".") == 1:
            continue
        for target, _, line in edges:
            if target.startswith("bench.") and target.count(".") >= 2 and _wing(target) > _wing(module):
                upward.append(f"{MODULES[module].relative_to(ROOT)}:{line} imports {target}")
    assert not upward, "upward imports:\n" + "\n".join(sorted(upward))


@pytest.mark.parametrize("package", PACKAGES)
def test_packages_import_only_what_they_may(package):
    wrong = [
        f"{MODULES[module].relative_to(ROOT)}:{line} imports {target}"
        for module, edges in GRAPH.items() if module.split(".")[0] == package
        for target, _, line in edges if target.split(".")[0] not in ALLOWED[package]
    ]
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_cycle_lazy_or_not():
    edges = {m: {t for t, _, _ in e if t != m and t in MODULES} for m, e in GRAPH.items()}
    # A package's __init__ re-exporting its own modules is not a cycle of concern.
    for module in edges:
        edges[module] = {t for t in edges[module] if not module.startswith(t + ".")}
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_module_imports_another_modules_private_name():
    borrowed = [
        f"{MODULES[module].relative_to(ROOT)}:{line} takes {taken} from {target}"
        for module, edges in GRAPH.items()
        for target, taken, line in edges
        if taken and taken.startswith("_") and not taken.startswith("__") and target != module
    ]
    assert not borrowed, "\n".join(sorted(borrowed))


def test_only_the_command_line_imports_the_importer():
    """`bench import` is a command of the collector's CLI; nothing that measures uses it."""
    users = sorted(
        f"{MODULES[module].relative_to(ROOT)}:{line}"
        for module, edges in GRAPH.items() if module.startswith("bench")
        for target, _, line in edges if target.split(".")[0] == "importer" and module not in TOP
    )
    assert not users, "imports the importer below the command line:\n" + "\n".join(users)
