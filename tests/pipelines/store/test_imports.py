"""No import circle among the store's modules, counting every import (top level, inside functions and under
TYPE_CHECKING): grounding.py imported the repository, which imports revert.py, which imports grounding.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pipelines.store

STORE = Path(pipelines.store.__file__).parent
PACKAGE = "pipelines.store"


def _imports(path: Path) -> set[str]:
    """Modules of the store package that `path` imports, wherever the import statement is."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == PACKAGE:
                found |= {f"{PACKAGE}.{a.name}" for a in node.names if (STORE / f"{a.name}.py").exists()}
            elif node.module.startswith(PACKAGE + "."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith(PACKAGE + ".")}
    return found


def test_store_modules_import_without_circles() -> None:
    graph = {f"{PACKAGE}.{p.stem}": _imports(p) for p in STORE.glob("*.py") if p.stem != "__init__"}
    assert graph[f"{PACKAGE}.grounding"] and f"{PACKAGE}.access" in graph[f"{PACKAGE}.grounding"]
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
