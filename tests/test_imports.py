"""No import circle among the project's modules, counting every import (top level, inside functions and under
TYPE_CHECKING) and packages' `__init__` as modules of their own. Circles found so far, now gone: the store's
grounding.py imported the repository, which imports revert.py, which imports grounding.py; convert.py and
convert_records.py imported each other (their shared types now live in traces/model.py and transforms.py)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pipelines", "annotator", "stepmark", "protos")


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (REPO_ROOT / package).rglob("*.py"):
            parts = path.relative_to(REPO_ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Project modules `path` imports, wherever the import statement is (`from pkg import mod` counts mod)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in modules else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found & modules.keys()


def test_project_modules_import_without_circles() -> None:
    modules = _modules()
    graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
    assert "pipelines.store.access" in graph["pipelines.store.grounding"]  # the walk sees real edges
    assert "pipelines.convert_records" in graph["pipelines.convert"]
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            assert state.get(target) != 1, "import circle: " + " -> ".join([*path, module, target])
            if target not in state:
                visit(target, [*path, module])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
