"""The layers of DESIGN.md, held by the imports themselves: who may import whom, and no circles.

Read from the source with `ast` (nothing is imported): every `import` and `from … import`, at any
depth of the module — a lazy import inside a function is an arrow like any other — except those
under `if TYPE_CHECKING:`, which never run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "runbook"

# The layers of DESIGN.md, top first: a module may import its own package and the layers below its
# own, never one above (an arrow back up), and the packages of one layer never import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("runbook.__main__",),
    ("runbook.cli",),
    ("runbook.triage", "runbook.webhook", "runbook.drill"),
    ("runbook.engine",),
    ("runbook.actions", "runbook.sim"),
    ("runbook.commandline",),
    ("runbook.backends", "runbook.loading", "runbook.reporting"),
    ("runbook.config", "runbook.advise", "runbook.text", "runbook.signals"),
    ("runbook.files",),
    ("runbook.settings",),
    ("runbook.record", "runbook.parsers"),
    ("runbook.model",),
    ("runbook.errors", "runbook.clock", "runbook"),  # what every layer uses, and the package's face
)

REAL_BACKENDS = ("runbook.backends.kubernetes", "runbook.backends.prometheus", "runbook.backends.ssh",
                 "runbook.backends.http")
NETWORK_AND_UI = ("click", "rich", "kubernetes", "paramiko", "httpx", "requests", "urllib3", "starlette", "uvicorn",
                  "prometheus_api_client", "websockets")

# Besides the layers: layer -> what it must never import (the real backends and the network and UI
# libraries stay at the edges, where the CLI and the webhook build the world).
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "runbook.engine": (*NETWORK_AND_UI, *REAL_BACKENDS),
    "runbook.actions": (*NETWORK_AND_UI, *REAL_BACKENDS),
    "runbook.sim": (*NETWORK_AND_UI, *REAL_BACKENDS),
    "runbook.triage": REAL_BACKENDS,
    "runbook.drill": (*NETWORK_AND_UI, *REAL_BACKENDS),
    "runbook.loading": (*NETWORK_AND_UI, *REAL_BACKENDS),
    # the one safe YAML reader (runbook.files.yamlsource) reads kubeconfigs too; playbook validation is not theirs
    "runbook.backends": ("click", "rich"),
    "runbook.reporting": (*REAL_BACKENDS, "click", "rich", "kubernetes", "paramiko"),
    "runbook.advise": (*NETWORK_AND_UI, *REAL_BACKENDS),
    "runbook.model": NETWORK_AND_UI,
    "runbook.parsers": NETWORK_AND_UI,
    "runbook.record": NETWORK_AND_UI,
    "runbook.text": NETWORK_AND_UI,
    "runbook.files": NETWORK_AND_UI,
    "runbook.signals": NETWORK_AND_UI,
}
# Every call to the Kubernetes API lives under backends/kubernetes (Leases and coordination included).
KUBERNETES_CLIENT_ONLY_IN = "runbook.backends.kubernetes"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """Every node below `node`, leaving out the bodies of `if TYPE_CHECKING:`."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield other
                yield from _walk(other)
            continue
        yield child
        yield from _walk(child)


def imports_of(module: str) -> set[str]:
    """The absolute names `module` imports: a `from pkg import name` names pkg.name when that is a module."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in _walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in MODULES else base)
    return found


GRAPH = {module: {name for name in imports_of(module) if name in MODULES and name != module} for module in MODULES}


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layer_of(module: str) -> tuple[int, str]:
    """(its layer's place from the top, the package it belongs to): the longest layer prefix it is within."""
    found = [(len(prefix), depth, prefix) for depth, layer in enumerate(LAYERS) for prefix in layer
             if _within(module, prefix)]
    if not found:
        raise LookupError(f"{module} is in no layer of LAYERS: add its package to one")
    _, depth, prefix = max(found)
    return depth, prefix


def arrows_against_the_layers(graph: dict[str, set[str]]) -> list[str]:
    """Each import that runs back up a layer, or across to another package of the same layer."""
    wrong = []
    for module, names in sorted(graph.items()):
        depth, package = layer_of(module)
        for name in sorted(names):
            their_depth, their_package = layer_of(name)
            if their_package == package:
                continue
            if their_depth < depth:
                wrong.append(f"{module} imports {name}: {their_package} is a layer above {package}")
            elif their_depth == depth:
                wrong.append(f"{module} imports {name}: {their_package} and {package} are one layer, independent")
    return wrong


def test_every_module_is_in_a_layer():
    for module in MODULES:
        layer_of(module)


def test_no_import_runs_back_up_a_layer_or_across_one():
    wrong = arrows_against_the_layers(GRAPH)
    assert not wrong, "imports against DESIGN.md's layers:\n" + "\n".join(wrong)


def test_the_layer_check_catches_a_bad_import():
    """The check itself, shown a deliberately bad tree: a lower layer importing a higher one, two
    packages of one layer importing each other, and the real tree's arrows, which pass."""
    backends_up = {**GRAPH, "runbook.backends.base": GRAPH["runbook.backends.base"] | {"runbook.engine.runner"}}
    assert arrows_against_the_layers(backends_up) == [
        "runbook.backends.base imports runbook.engine.runner: runbook.engine is a layer above runbook.backends"]
    across = {**GRAPH, "runbook.sim.world": GRAPH["runbook.sim.world"] | {"runbook.actions.base"}}
    assert arrows_against_the_layers(across) == [
        "runbook.sim.world imports runbook.actions.base: runbook.actions and runbook.sim are one layer, independent"]
    model_up = {**GRAPH, "runbook.model.events": GRAPH["runbook.model.events"] | {"runbook.record.journal"}}
    assert len(arrows_against_the_layers(model_up)) == 1


def test_the_tree_is_read():
    assert {"runbook.engine.runner", "runbook.cli", "runbook.backends.kubernetes.cluster", "runbook.sim.world"} <= set(MODULES)
    assert "runbook.engine.guards" in GRAPH["runbook.engine.runner"]


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_each_layer_imports_only_what_it_may(layer):
    broken = []
    for module in MODULES:
        if not _within(module, layer):
            continue
        for name in sorted(imports_of(module)):
            if any(_within(name, banned) for banned in FORBIDDEN[layer]):
                broken.append(f"{module} imports {name}")
    assert not broken, f"{layer} may not import these (DESIGN.md, Layers):\n" + "\n".join(broken)


def test_the_kubernetes_client_is_used_only_under_backends_kubernetes():
    outside = [f"{module} imports {name}" for module in MODULES if not _within(module, KUBERNETES_CLIENT_ONLY_IN)
               for name in imports_of(module) if _within(name, "kubernetes")]
    assert not outside, "\n".join(outside)


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return found


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_two_modules_import_each_other_directly_or_in_a_loop():
    circles = _circles(GRAPH)
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


# ValueError on purpose: pydantic turns a validator's ValueError into its ValidationError.
NOT_IN_THE_TREE = {"runbook.files.problems.ValidationProblem"}


def test_every_exception_runbook_defines_is_in_the_one_tree():
    """This one imports the modules: exceptions are found by what they are, not by how they are spelt."""
    import importlib
    import inspect

    from runbook import errors

    drawn = errors.__doc__ or ""
    stray, undrawn = [], []
    for module in MODULES:
        if module.endswith("__main__"):
            continue
        loaded = importlib.import_module(module)
        for name, value in vars(loaded).items():
            if not (inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == module):
                continue
            qualified = f"{module}.{name}"
            if name.startswith("_") or qualified in NOT_IN_THE_TREE:
                continue
            if not issubclass(value, errors.RunbookError):
                stray.append(qualified)
            elif f" {name} " not in drawn:
                undrawn.append(qualified)
    assert not stray, f"exceptions outside errors.RunbookError: {stray}"
    assert not undrawn, f"exceptions not drawn in the tree of runbook/errors.py: {undrawn}"
