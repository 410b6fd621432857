"""Layers point one way (issue 35): the runtime never imports the grader, and no module imports itself back.

Every module of ``cudacourse/`` is parsed with ``ast``; each ``import`` and ``from ... import`` counts, those
inside functions too (a function-level import is a dependency that waits, not one that is gone). What this file
enforces:

- the runtime (loading, the simulator, the workers, the sandbox, profiling, settings, the course model, the
  errors) imports nothing of ``cudacourse.grading``;
- the pytest side (the plugin) imports only the grader/task-process contract of ``cudacourse.grading``
  (``grading/protocol.py``), which imports nothing else of it;
- there is no import circle.

Known exceptions are named below, each with where it is and what removes it: they are reported (printed at the
end of the run) and kept out of the checks, never skipped silently, and an exception that no longer occurs fails
the test, so that it is taken off the list.
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cudacourse"

# The runtime: what learner code runs in, and what it is built from. Modules of these names, or under these
# packages, may not import cudacourse.grading.
RUNTIME = ("cudacourse", "cudacourse.answer_guard", "cudacourse.arguments", "cudacourse.backends",
           "cudacourse.buildcache", "cudacourse.course", "cudacourse.cuda_backend", "cudacourse.errors",
           "cudacourse.gpuinfo", "cudacourse.lessons", "cudacourse.loader", "cudacourse.module", "cudacourse.profile",
           "cudacourse.profile_cli", "cudacourse.sandbox", "cudacourse.settings", "cudacourse.sim",
           "cudacourse.source", "cudacourse.torch_worker", "cudacourse.triton_track", "cudacourse.workers")

# The grader/task-process contract: the one module of cudacourse.grading that the pytest side imports.
CONTRACT = "cudacourse.grading.protocol"
PYTEST_SIDE = ("cudacourse.pytest_plugin", "cudacourse.failure_text")

# (importer, imported): imports that point the wrong way today, in files other sessions of issue 35 own.
KNOWN_UPWARD: dict[tuple[str, str], str] = {
}
# Edges left out of the circle check, each one that closes a circle today.
KNOWN_CIRCLE_EDGES: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    """``cudacourse/workers/torch.py`` -> ``cudacourse.workers.torch``; a package's ``__init__.py`` -> its name."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the cudacourse modules it imports (anywhere in the file, functions included).

    ``from cudacourse import settings`` imports the module ``cudacourse.settings`` (not the package facade);
    ``from cudacourse.x import name`` imports ``cudacourse.x``; ``import cudacourse as cc`` imports the facade."""
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    mods = set(files)

    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the importing module's package
                    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        pkg = pkg.rpartition(".")[0]
                    base = f"{pkg}.{base}" if base else pkg
                subs = [f"{base}.{a.name}" for a in node.names]
                names = [s for s in subs if s in mods] or [base]
            else:
                continue
            for n in names:
                if n == "cudacourse" or n.startswith("cudacourse."):
                    target = owner(n)
                    if target and target != mod:
                        deps.add(target)
        graph[mod] = deps
    return graph


def is_runtime(mod: str) -> bool:
    """Whether ``mod`` belongs to the runtime layer (:data:`RUNTIME`)."""
    return mod in RUNTIME or any(mod.startswith(r + ".") for r in RUNTIME if r != "cudacourse")


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


GRAPH = import_graph()


def test_the_runtime_never_imports_the_grader() -> None:
    bad = sorted((m, d) for m, deps in GRAPH.items() if is_runtime(m) for d in deps
                 if d.startswith("cudacourse.grading"))
    assert not bad, "runtime modules import cudacourse.grading (move what they need below it):\n" + "\n".join(
        f"  {m} -> {d}" for m, d in bad)


def test_upward_imports_are_only_the_known_ones() -> None:
    """Imports of cudacourse.grading from outside it, and of a learner verb from inside it."""
    verbs = ("cudacourse.check", "cudacourse.checkcmd")
    upward = {(m, d) for m, deps in GRAPH.items() for d in deps
              if (d.startswith("cudacourse.grading") and not m.startswith("cudacourse.grading")
                  and m != "cudacourse.__main__" and not (m in PYTEST_SIDE and d == CONTRACT))
              or (m.startswith("cudacourse.grading") and d in verbs)}
    new = sorted(upward - set(KNOWN_UPWARD))
    assert not new, "imports pointing up the layers:\n" + "\n".join(f"  {m} -> {d}" for m, d in new)
    gone = sorted(set(KNOWN_UPWARD) - upward)
    assert not gone, f"remove these from KNOWN_UPWARD, they no longer occur: {gone}"


def test_the_contract_module_imports_nothing_of_the_grader() -> None:
    """The pytest side imports the grader/task-process contract alone: the contract must not bring the rest."""
    assert CONTRACT in GRAPH["cudacourse.pytest_plugin"]
    bad = sorted(d for d in GRAPH[CONTRACT] if d.startswith("cudacourse.grading"))
    assert not bad, f"{CONTRACT} imports {bad}: the pytest side would import the grader through it"


def test_no_import_circle() -> None:
    graph = {m: {d for d in deps if (m, d) not in KNOWN_CIRCLE_EDGES} for m, deps in GRAPH.items()}
    found = circles(graph)
    assert not found, "import circles (imports inside functions count):\n" + "\n".join(
        "  " + " <-> ".join(c) for c in found)
    unused = [e for e in KNOWN_CIRCLE_EDGES if e[1] not in GRAPH.get(e[0], set())]
    assert not unused, f"remove these from KNOWN_CIRCLE_EDGES, they no longer occur: {unused}"
    still = [e for e in KNOWN_CIRCLE_EDGES if circles({**graph, e[0]: graph[e[0]] | {e[1]}})]
    assert still == list(KNOWN_CIRCLE_EDGES), (
        f"these edges no longer close a circle; remove them from KNOWN_CIRCLE_EDGES: "
        f"{sorted(set(KNOWN_CIRCLE_EDGES) - set(still))}")


def test_the_graph_sees_function_level_imports() -> None:
    """The checks above would pass vacuously if the parser missed imports inside functions."""
    assert "cudacourse.workers.gpu" in GRAPH["cudacourse.module"]  # imported inside Module.__init__
    assert "cudacourse.sandbox" in GRAPH["cudacourse.workers.channel"]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_known_exceptions_are_reported() -> None:
    """Each known exception is shown in the run's warnings summary: to remove, not to forget."""
    for (m, d), why in {**KNOWN_UPWARD, **KNOWN_CIRCLE_EDGES}.items():
        warnings.warn(f"known layer exception, to remove: {m} -> {d}: {why}", UserWarning, stacklevel=1)
