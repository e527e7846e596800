"""The architecture as the imports draw it: one-way arrows between packages, an engine with nothing above it, and
llama-cpp-python in one module. Run as a script to print the package graph:

    python3 tests/test_layout.py
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"
PACKAGE = APP / "specchat"
# The engine may read model files' headers (models.gguf, models.compat: leaves that import only errors), nothing
# else outside itself: no catalog, downloads, host, UI, API, CLI or benchmark.
ENGINE_MAY_IMPORT = {"specchat.errors", "specchat.models", "specchat.models.gguf", "specchat.models.compat"}
LLAMA_ROOM = "specchat.engine.llama_backend"


def module_name(path: Path) -> str:
    parts = path.relative_to(APP).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """module -> every module it imports, at the top or inside functions (relative imports resolved)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base]).strip(".")
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import module`
        graph[name] = found
    known = set(graph)
    return {name: {m for m in found if m in known or not m.startswith("specchat")} for name, found in graph.items()}


def unit(module: str) -> str:
    """The layer a module belongs to: specchat.<unit>[...]."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def unit_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for module, found in graph.items():
        for other in found:
            if other.startswith("specchat.") and unit(other) != unit(module):
                edges[unit(module)].add(unit(other))
        edges.setdefault(unit(module), set())
    return dict(edges)


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    return next((found for node in sorted(edges) if node not in state and (found := visit(node))), None)


def test_the_packages_import_one_way():
    edges = unit_graph(imports())
    assert cycle(edges) is None, f"import circle: {' -> '.join(cycle(edges))}"


def test_the_engine_imports_nothing_above_it():
    graph = imports()
    above = {
        f"{module} imports {other}"
        for module, found in graph.items()
        if unit(module) == "engine"
        for other in found
        if other.startswith("specchat.") and unit(other) != "engine" and other not in ENGINE_MAY_IMPORT
    }
    assert not above
    assert not {m for m, found in graph.items() if unit(m) == "engine" and {"gradio", "fastapi", "httpx"} & found}


def test_llama_cpp_is_imported_in_one_module():
    importers = {m for m, found in imports().items() if any(f.split(".")[0] == "llama_cpp" for f in found)}
    assert importers == {LLAMA_ROOM}


def test_generate_and_models_list_do_not_load_gradio_or_matplotlib(tmp_path):
    # `generate` fails fast on a missing model, after importing all it needs; `models list` runs whole. matplotlib
    # is the bench report's only: its import was a third of every command's start.
    code = (
        "import sys\n"
        "from specchat.cli.main import main\n"
        "assert main(['models', 'list']) == 0\n"
        f"assert main(['generate', '--target', {str(tmp_path / 'absent.gguf')!r}, '--prompt', 'hi']) == 1\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('gradio', 'fastapi', 'matplotlib')))\n"
    )
    env = {"PYTHONPATH": str(APP), "SPECCHAT_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "[]"


def test_the_api_and_specchat_serve_do_not_load_gradio(tmp_path):
    graph = imports()
    assert not {m for m, found in graph.items() if unit(m) == "api" and any(f.split(".")[0] == "gradio" for f in found)}
    # `serve` fails fast on a missing model, after importing all it needs.
    code = (
        "import sys\n"
        "from specchat.cli.main import main\n"
        f"assert main(['serve', '--target', {str(tmp_path / 'absent.gguf')!r}]) == 1\n"
        "assert 'uvicorn' in sys.modules\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'gradio'))\n"
    )
    env = {"PYTHONPATH": str(APP), "SPECCHAT_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "[]"


if __name__ == "__main__":
    edges = unit_graph(imports())
    for node in sorted(edges):
        print(f"{node:10} -> {', '.join(sorted(edges[node])) or '(nothing in specchat)'}")
    print("circle: " + (" -> ".join(found) if (found := cycle(edges)) else "none"))
    rooms = sorted(m for m, found in imports().items() if any(f.split(".")[0] == "llama_cpp" for f in found))
    print("llama_cpp imported by: " + ", ".join(rooms))
