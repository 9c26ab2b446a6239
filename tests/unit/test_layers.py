"""The layers docs/architecture.md promises, checked over the import graph of ``src/``.

Every import counts, wherever it is written: at module level, under ``TYPE_CHECKING`` and inside functions (an
import moved into a function or hidden from the interpreter still ties the two modules together, so it is how
cycles hide, not how they are broken). The checks read the source with :mod:`ast`; nothing is imported.

What is checked:
- ``driver`` never imports ``endpoint``;
- the driver's packages form a stack: a module imports only from its own package or from packages below it, and
  packages side by side on one layer (the client and the driver core; the archive and the tools) not each other;
  so the archive sits above the client and the core, and nothing below imports it;
- ``endpoint.pipeline`` sits on top: nothing else in ``endpoint`` imports it;
- the sans-IO modules (the driver's wire codecs, log buffers, concurrent structures and commands, the end point's
  handshake, Noise, liveness, sealing, internal messages, serialization and schemas) import no sockets, threads, event
  loops, selectors or clocks, call no clock, and import nothing of the project but each other and the error modules;
- no import cycle in ``driver``; in ``endpoint`` only the known circle, listed below until it is gone.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PROJECT_PACKAGES = frozenset({"driver", "endpoint"})

# -- the contract --------------------------------------------------------------------------------------------------

DRIVER_LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"driver", "driver.__main__"}),  # the package's front door and the driver's command line
    frozenset({"driver.archive", "driver.tools"}),
    frozenset({"driver.client", "driver.core"}),  # they meet in shared memory (cnc.dat, the logs) and local_clients
    frozenset({"driver.config", "driver.agent", "driver.ownership", "driver.doorbell", "driver.local_clients"}),
    frozenset({"driver.media"}),
    frozenset({"driver.cnc", "driver.command", "driver.wire", "driver.sbe"}),
    frozenset({"driver.logbuffer"}),
    frozenset({"driver.concurrent"}),
    frozenset({"driver.clock", "driver.idle", "driver.logs", "driver.uri"}),
    frozenset({"driver.int32"}),
    frozenset({"driver.errors"}),
)
"""Top to bottom. Each entry is a module or a package (with everything in it); every driver module must fall in one
(``driver`` itself names only the package's ``__init__``)."""

SANS_IO = (
    "driver.wire",
    "driver.logbuffer",
    "driver.concurrent",
    "driver.command",
    "driver.int32",
    "driver.core.silence",
    "driver.archive.control",
    "driver.archive.sessions",
    "driver.archive.exchange",
    "driver.archive.codecs",
    "driver.archive.errors",
    "driver.archive.replay_bound",
    "driver.sbe",
    "endpoint.handshake.protocol",
    "endpoint.handshake.admission",
    "endpoint.handshake.noise",
    "endpoint.connection.liveness",
    "endpoint.connection.agenda",
    "endpoint.connection.core",
    "endpoint.connection.newest",
    "endpoint.connection.sealing",
    "endpoint.connection.session",
    "endpoint.rpc.correlation",
    "endpoint.reconnect",
    "endpoint.messages",
    "endpoint.serialization",
    "endpoint.schema",
    "endpoint._codec",
)
"""Pure code: bytes and time in (``now_ns``), decisions out. Entries are modules or packages; each must exist (a
renamed module fails here, to be named again, rather than drop out of the check)."""

SANS_IO_MAY_IMPORT = frozenset({"driver.errors", "endpoint.errors"})
"""What a sans-IO module may import of the project besides other sans-IO modules."""

IO_MODULES = frozenset(
    {"socket", "threading", "_thread", "asyncio", "selectors", "select", "anyio", "trio", "time", "multiprocessing"}
)
"""Standard and third-party modules a sans-IO module must not import (``time``: the clock comes in as ``now_ns``)."""

CLOCK_CALLS = frozenset(
    {
        "time.time",
        "time.time_ns",
        "time.monotonic",
        "time.monotonic_ns",
        "time.perf_counter",
        "time.perf_counter_ns",
        "datetime.now",
        "datetime.utcnow",
        "datetime.datetime.now",
        "datetime.datetime.utcnow",
        "date.today",
    }
)

SANS_IO_EXCEPTIONS: dict[tuple[str, str], str] = {
    ("driver.concurrent.counters", "time"): (
        "CountersManager reads the epoch clock only when it is given none (a reader in the tools); the driver "
        "passes its own"
    ),
    ("driver.concurrent.error_log", "threading"): (
        "the distinct error log is written by the driver's three agents at once: a lock, not I/O"
    ),
}
"""(module, what it imports or calls) -> why it is allowed. An entry that no longer matches anything fails the
test, so the list only shrinks."""

KNOWN_CYCLES: dict[frozenset[str], str] = {}
"""Import cycles tolerated until they are broken; the test fails once one is gone, to remove its entry."""


# -- the import graph ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Import:
    importer: str
    target: str
    """The project module imported, or for an outside module its full dotted name."""
    line: int
    where: str
    """``module`` level, ``type-checking`` block, or ``function`` body."""

    def __str__(self) -> str:
        return f"{self.importer} -> {self.target} (line {self.line}, {self.where})"


@dataclass
class Graph:
    modules: dict[str, Path] = field(default_factory=dict)
    """Project modules read from source (packages by their ``__init__``)."""
    native: set[str] = field(default_factory=set)
    """Project modules that exist only compiled (C extensions, with a ``.pyi``)."""
    internal: dict[str, list[Import]] = field(default_factory=dict)
    external: dict[str, list[Import]] = field(default_factory=dict)
    calls: dict[str, list[tuple[str, int]]] = field(default_factory=dict)

    def known(self, name: str) -> bool:
        return name in self.modules or name in self.native

    def edges(self, prefix: str | None = None) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for importer, imports in self.internal.items():
            if prefix is not None and not _within(importer, prefix):
                continue
            out.setdefault(importer, set()).update(
                i.target for i in imports if i.target != importer and (prefix is None or _within(i.target, prefix))
            )
        return out


def _within(module: str, entry: str) -> bool:
    return module == entry or module.startswith(entry + ".")


def _module_name(path: Path, root: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, where: str) -> Iterator[tuple[ast.AST, str]]:
    for child in ast.iter_child_nodes(node):
        inner = where
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inner = "function"
        elif isinstance(child, ast.If) and _is_type_checking(child.test) and where == "module":
            inner = "type-checking"
        yield child, inner
        yield from _walk(child, inner)


def build_graph(root: Path, packages: Iterable[str] = PROJECT_PACKAGES) -> Graph:
    graph = Graph()
    trees: dict[str, tuple[ast.Module, bool]] = {}
    for package in packages:
        base = root / package
        for path in sorted(base.rglob("*.py")):
            name, is_package = _module_name(path, root)
            graph.modules[name] = path
            trees[name] = (ast.parse(path.read_text(), str(path)), is_package)
        for path in sorted(base.rglob("*.pyi")):
            name, _ = _module_name(path, root)
            if name not in graph.modules:
                graph.native.add(name)
    tops = {name.split(".")[0] for name in graph.modules}
    for name, (tree, is_package) in trees.items():
        internal = graph.internal.setdefault(name, [])
        external = graph.external.setdefault(name, [])
        calls = graph.calls.setdefault(name, [])
        for node, where in _walk(tree, "module"):
            if isinstance(node, ast.Call):
                calls.append((ast.unparse(node.func), node.lineno))
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base_parts = name.split(".") if is_package else name.split(".")[:-1]
                    base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                    module = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                # ``from package import submodule`` imports the submodule; ``from module import name``, the module.
                targets = [
                    f"{module}.{alias.name}" if graph.known(f"{module}.{alias.name}") else module
                    for alias in node.names
                ]
            else:
                continue
            for target in targets:
                if target.split(".")[0] in tops:
                    resolved = target
                    while resolved and not graph.known(resolved):
                        resolved = resolved.rpartition(".")[0]
                    internal.append(Import(name, resolved or target, node.lineno, where))
                else:
                    external.append(Import(name, target, node.lineno, where))
    return graph


def strongly_connected(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """Tarjan's algorithm, iterative: the groups of modules that import each other (size > 1, or self-imports)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    counter = 0
    nodes = set(edges) | {t for targets in edges.values() for t in targets}
    for start in sorted(nodes):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1 or node in edges.get(node, ()):
                    found.append(frozenset(group))
    return found


def describe_cycle(graph: Graph, group: frozenset[str]) -> str:
    lines = [f"cycle of {len(group)} modules: {', '.join(sorted(group))}"]
    for module in sorted(group):
        edges = {str(i): None for i in graph.internal.get(module, ()) if i.target in group and i.target != module}
        lines.extend(f"    {edge}" for edge in edges)
    return "\n".join(lines)


def driver_layer(module: str) -> tuple[int, str] | None:
    """The layer (0 at the top) and entry a driver module falls in; None if it is in none."""
    best: tuple[int, str] | None = None
    for depth, layer in enumerate(DRIVER_LAYERS):
        for entry in layer:
            matches = module == entry if entry == "driver" else _within(module, entry)
            if matches and (best is None or len(entry) > len(best[1])):
                best = (depth, entry)
    return best


def sans_io_entry(module: str) -> str | None:
    return next((entry for entry in SANS_IO if _within(module, entry)), None)


def sans_io_violations(graph: Graph) -> tuple[list[str], set[tuple[str, str]]]:
    """What the sans-IO modules do that they must not, and which listed exceptions were used."""
    problems: list[str] = []
    excused: set[tuple[str, str]] = set()
    for module in sorted(graph.modules):
        if sans_io_entry(module) is None:
            continue
        for imp in graph.external.get(module, ()):
            top = imp.target.split(".")[0]
            if top in IO_MODULES:
                if (module, top) in SANS_IO_EXCEPTIONS:
                    excused.add((module, top))
                else:
                    problems.append(f"imports {top}: {imp}")
        for imp in graph.internal.get(module, ()):
            if sans_io_entry(imp.target) is None and imp.target not in SANS_IO_MAY_IMPORT:
                problems.append(f"imports a module that is not sans-IO: {imp}")
        for call, line in graph.calls.get(module, ()):
            if call in CLOCK_CALLS:
                key = (module, call.split(".")[0])
                if key in SANS_IO_EXCEPTIONS:
                    excused.add(key)
                else:
                    problems.append(f"reads a clock: {module} calls {call}() (line {line}); take now_ns instead")
    return problems, excused


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_graph(SRC)


# -- the checks ----------------------------------------------------------------------------------------------------


def test_driver_never_imports_endpoint(graph: Graph) -> None:
    offending = [str(i) for m, imports in graph.internal.items() if _within(m, "driver") for i in imports]
    offending = [line for line in offending if " -> endpoint" in line]
    assert offending == [], "the driver must not know the end points:\n" + "\n".join(offending)


def test_every_driver_module_has_a_layer(graph: Graph) -> None:
    unplaced = sorted(m for m in graph.modules if _within(m, "driver") and driver_layer(m) is None)
    assert unplaced == [], f"place these in DRIVER_LAYERS (and docs/architecture.md): {unplaced}"


def test_driver_packages_import_only_downwards(graph: Graph) -> None:
    problems = []
    for module, imports in sorted(graph.internal.items()):
        here = driver_layer(module)
        if here is None:
            continue
        for imp in imports:
            there = driver_layer(imp.target)
            if there is None or there[1] == here[1]:
                continue
            if there[0] < here[0]:
                problems.append(f"up from layer {here[0]} ({here[1]}) to {there[0]} ({there[1]}): {imp}")
            elif there[0] == here[0]:
                problems.append(f"across layer {here[0]} ({here[1]} and {there[1]} are independent): {imp}")
    assert problems == [], "\n".join(problems)


def test_the_pipeline_sits_on_top(graph: Graph) -> None:
    problems = [
        str(i)
        for m, imports in graph.internal.items()
        if not _within(m, "endpoint.pipeline")
        for i in imports
        if _within(i.target, "endpoint.pipeline")
    ]
    assert problems == [], "only the pipeline imports the pipeline:\n" + "\n".join(problems)


def test_every_sans_io_entry_exists(graph: Graph) -> None:
    missing = [entry for entry in SANS_IO if not any(_within(m, entry) for m in (*graph.modules, *graph.native))]
    assert missing == [], f"renamed or removed? name them again in SANS_IO: {missing}"


def test_sans_io_modules_do_no_io(graph: Graph) -> None:
    problems, excused = sans_io_violations(graph)
    assert problems == [], "sans-IO modules doing I/O, threads or clocks:\n" + "\n".join(problems)
    stale = sorted(set(SANS_IO_EXCEPTIONS) - excused)
    assert stale == [], f"these exceptions are no longer needed: remove them from SANS_IO_EXCEPTIONS: {stale}"


def test_no_import_cycle_in_the_driver(graph: Graph) -> None:
    cycles = strongly_connected(graph.edges("driver"))
    assert cycles == [], "\n".join(describe_cycle(graph, c) for c in cycles)


def test_endpoint_cycles_are_only_the_known_ones(graph: Graph) -> None:
    cycles = set(strongly_connected(graph.edges("endpoint")))
    new = [describe_cycle(graph, c) for c in cycles if c not in KNOWN_CYCLES]
    assert new == [], "new import cycles:\n" + "\n".join(new)
    gone = [sorted(c) for c in KNOWN_CYCLES if c not in cycles]
    assert gone == [], f"broken at last, or changed: update KNOWN_CYCLES (and docs/architecture.md): {gone}"


def test_no_cycle_across_the_packages(graph: Graph) -> None:
    cycles = [c for c in strongly_connected(graph.edges()) if c not in KNOWN_CYCLES]
    assert cycles == [], "\n".join(describe_cycle(graph, c) for c in cycles)


# -- the checker itself, on packages made for it -------------------------------------------------------------------


def _package(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_checker_finds_cycles_hidden_in_functions_and_type_checking(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
            "pkg/b.py": "def f() -> None:\n    from . import c\n",
            "pkg/c.py": "import pkg.a\n",
            "pkg/d.py": "from pkg import a\n",
        },
    )
    graph = build_graph(root, ["pkg"])
    assert strongly_connected(graph.edges()) == [frozenset({"pkg.a", "pkg.b", "pkg.c"})]
    kinds = {i.where for imports in graph.internal.values() for i in imports}
    assert kinds == {"module", "type-checking", "function"}


def test_the_checker_finds_io_and_clocks_in_sans_io_code(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "driver/__init__.py": "",
            "driver/wire/__init__.py": "",
            "driver/wire/codec.py": (
                "import socket\nfrom driver.core import x\n\ndef now() -> int:\n    import time\n"
                "    return time.monotonic_ns()\n"
            ),
            "driver/core/__init__.py": "",
            "driver/core/x.py": "",
        },
    )
    problems, _ = sans_io_violations(build_graph(root, ["driver"]))
    text = "\n".join(problems)
    assert "imports socket" in text
    assert "imports time" in text
    assert "calls time.monotonic_ns()" in text
    assert "not sans-IO: driver.wire.codec -> driver.core.x" in text
