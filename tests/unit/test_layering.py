"""The package's layering: no module imports a package of a higher layer.

Every import statement counts, wherever it is: module level, inside functions, and under
``if TYPE_CHECKING:`` (an annotation-only import still ties the layers together). Parts below
server/ get the narrow interfaces they use passed in (callables, Protocols) instead.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import kaflet

# Lowest first. A package may import its own layer and the layers below; a new top-level
# package must be placed here.
LAYERS: list[set[str]] = [
    {"util"},
    {"protocol"},
    {"log", "metadata"},
    {"security"},
    {"network"},
    {"controller", "replication"},
    {"quota", "coordinator"},
    {"gateway"},
    # The gateway process (`kaflet gateway`) reuses the brokers' management-service client.
    {"metrics", "proxy"},
    {"server"},
    {"cli", "embedded_broker", ""},  # "": kaflet/__init__.py
    # The management service talks to brokers over the wire; `kaflet manager` loads it by name.
    {"manager"},
]
RANK = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}
# Imports of a lower layer that the docs still forbid: the controller, replication and the
# coordinators reach other brokers through kaflet/protocol/broker_connection.py's interfaces,
# handed in by the composition root, never through network/ (sockets, the inter-broker client).
FORBIDDEN = {"controller": {"network"}, "replication": {"network"}, "coordinator": {"network"}}
ROOT = Path(kaflet.__file__).parent


def _package_of(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return "" if parts == ("__init__",) else parts[0]


def _module_of(path: Path, root: Path) -> list[str]:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ["kaflet", *parts]


def _nodes(path: Path) -> list[ast.AST]:
    """Every node of ``path``'s syntax tree; parsed once per file version, as each test here
    walks the whole package."""
    stat = path.stat()
    return _parsed(str(path), stat.st_mtime_ns, stat.st_size)


@functools.cache
def _parsed(path: str, mtime_ns: int, size: int) -> list[ast.AST]:
    return list(ast.walk(ast.parse(Path(path).read_text(encoding="utf-8"), path)))


def _imported_modules(path: Path, root: Path) -> Iterator[tuple[int, list[str]]]:
    """(line, dotted name split, without "kaflet") of every import of a kaflet module in ``path``;
    a ``from`` import gives one per name it takes, appended to its module (it may be a module)."""
    module = _module_of(path, root)
    is_package = path.name == "__init__.py"
    for node in _nodes(path):
        if isinstance(node, ast.Import):
            targets = [alias.name.split(".") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module if is_package else module[:-1]
                base = base[: len(base) - (node.level - 1)]
                name = [*base, *(node.module.split(".") if node.module else [])]
            else:
                name = (node.module or "").split(".")
            # The names may be modules (``from kaflet import server``, ``from . import zk_client``).
            targets = [[*name, alias.name] for alias in node.names]
        else:
            continue
        for target in targets:
            if target[0] == "kaflet" and len(target) > 1:
                yield node.lineno, target[1:]


def _imported_packages(path: Path, root: Path) -> Iterator[tuple[int, str]]:
    """(line, top-level kaflet package) of every import of a kaflet module in ``path``."""
    seen: set[tuple[int, str]] = set()
    for line, target in _imported_modules(path, root):
        if (line, target[0]) not in seen:
            seen.add((line, target[0]))
            yield line, target[0]


def upward_imports(root: Path) -> list[str]:
    """Every import of a higher layer (or of a package not in LAYERS) under ``root``."""
    out = []
    for path in sorted(root.rglob("*.py")):
        pkg = _package_of(path, root)
        for line, target in _imported_packages(path, root):
            if target == pkg:
                continue
            where = f"{path.relative_to(root.parent)}:{line}"
            if pkg not in RANK or target not in RANK:
                out.append(f"{where}: kaflet.{pkg or '__init__'} -> kaflet.{target}: place the package in LAYERS")
            elif RANK[target] > RANK[pkg]:
                out.append(f"{where}: kaflet.{pkg} imports kaflet.{target}, a higher layer")
    return out


def package_cycles(root: Path) -> list[list[str]]:
    """Cycles between top-level packages (possible within one layer)."""
    edges: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        pkg = _package_of(path, root)
        edges.setdefault(pkg, set()).update(t for _, t in _imported_packages(path, root) if t != pkg)
    cycles = []
    for start in edges:
        stack = [(start, [start])]
        while stack:
            node, trail = stack.pop()
            for nxt in edges.get(node, ()):
                if nxt == start:
                    cycles.append(trail)
                elif nxt not in trail:
                    stack.append((nxt, [*trail, nxt]))
    return cycles


def test_no_package_imports_a_higher_layer() -> None:
    assert upward_imports(ROOT) == []


def test_no_import_cycles_between_packages() -> None:
    assert package_cycles(ROOT) == []


def test_the_controller_replication_and_coordinators_do_not_import_network() -> None:
    offenders = [
        f"{path.relative_to(ROOT.parent)}:{line}: kaflet.{target}"
        for path in ROOT.rglob("*.py")
        for line, target in _imported_packages(path, ROOT) if target in FORBIDDEN.get(_package_of(path, ROOT), ())
    ]
    assert offenders == []


def test_nothing_below_server_imports_server() -> None:
    below = {pkg for pkg, rank in RANK.items() if rank < RANK["server"]}
    offenders = [
        f"{path.relative_to(ROOT.parent)}:{line}"
        for path in ROOT.rglob("*.py") if _package_of(path, ROOT) in below
        for line, target in _imported_packages(path, ROOT) if target in ("server", "cli", "embedded_broker")
    ]
    assert offenders == []


def test_controller_components_get_narrow_seams_not_the_controller() -> None:
    """Reassignment, leader elections, topic deletion and the state machines are handed the
    context, the ZooKeeper client, the state machines and callables; none of them imports the
    KafkaController module (which would let it reach the whole controller)."""
    offenders = [
        f"{path.relative_to(ROOT.parent)}:{line}"
        for path in (ROOT / "controller").glob("*.py") if path.name != "controller.py"
        for line, target in _imported_modules(path, ROOT) if target[:2] == ["controller", "controller"]
    ]
    assert offenders == []


def test_only_the_composition_root_and_its_callers_import_the_broker() -> None:
    """Handlers get a `Services` (kaflet/server/services.py), and the parts the Broker makes get
    the narrow parts they use: no module imports kaflet/server/broker.py except the entry points
    that start a Broker (`kaflet broker`'s server/main.py, kaflet.embedded, the cli/ commands)."""
    entry_points = {ROOT / "server" / "broker.py", ROOT / "server" / "main.py", ROOT / "embedded_broker.py"}
    offenders = [
        f"{path.relative_to(ROOT.parent)}:{line}"
        for path in sorted(ROOT.rglob("*.py"))
        if path not in entry_points and _package_of(path, ROOT) != "cli"
        for line, target in _imported_modules(path, ROOT) if target[:2] == ["server", "broker"]
    ]
    assert offenders == []


def test_checker_sees_type_checking_relative_and_function_imports(tmp_path: Path) -> None:
    root = tmp_path / "kaflet"
    for pkg in ("log", "server", "replication"):
        (root / pkg).mkdir(parents=True)
        (root / pkg / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "log" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kaflet.server.broker import Broker\n")
    (root / "log" / "b.py").write_text("def f():\n    from ..replication import partition\n")
    (root / "log" / "c.py").write_text("from kaflet import server\nimport kaflet.protocol.errors\n")
    (root / "replication" / "d.py").write_text("from kaflet.log.log import Log\nfrom . import d\n")
    found = upward_imports(root)
    assert found == [
        "kaflet/log/a.py:3: kaflet.log imports kaflet.server, a higher layer",
        "kaflet/log/b.py:2: kaflet.log imports kaflet.replication, a higher layer",
        "kaflet/log/c.py:1: kaflet.log imports kaflet.server, a higher layer",
    ]
    (root / "log" / "e.py").write_text("from kaflet.wormhole import cache\n")
    assert upward_imports(root)[-1] == "kaflet/log/e.py:1: kaflet.log -> kaflet.wormhole: place the package in LAYERS"
    assert sorted(package_cycles(root)) == [["log", "replication"], ["replication", "log"]]


def test_the_manager_uses_no_broker_internals() -> None:
    """kaflet/manager is a separate service: it reaches brokers over the wire only (the client
    tools' connection and the protocol codec), never the broker's own packages nor the CLI's."""
    broker_side = {"server", "coordinator", "replication", "controller", "log", "metadata", "network", "quota",
                   "gateway", "embedded_broker", "cli"}
    client_side = {"network.raw_connection"}  # the tools' connection, which the CLI uses too
    offenders = [
        f"{path.relative_to(ROOT.parent)}:{line}: kaflet.{'.'.join(target)}"
        for path in (ROOT / "manager").rglob("*.py")
        for line, target in _imported_modules(path, ROOT)
        if target[0] in broker_side and ".".join(target[:2]) not in client_side
    ]
    assert offenders == []


# A partition's log, split as Kafka's storage module (docs/architecture.md, "Storage"): each part
# imports only parts of a lower rank, so the pure ones (the validator, retention's predicates)
# stay free of the segment list and of the Log that puts the parts together.
LOG_PARTS = {"log_validator": 0, "retention": 0, "local_log": 0, "log_loader": 1, "log": 2}


def _imported_log_modules(path: Path) -> set[str]:
    """The kaflet.log modules ``path`` imports, however it spells the import."""
    out = set()
    for node in _nodes(path):
        if isinstance(node, ast.Import):
            names = [alias.name.split(".") for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            base = node.module.split(".")
            names = [[*base, alias.name] for alias in node.names] if base == ["kaflet", "log"] else [base]
        else:
            continue
        out.update(n[2] for n in names if n[:2] == ["kaflet", "log"] and len(n) > 2)
    return out


def test_the_parts_of_a_partition_log_import_downward() -> None:
    offenders = [
        f"log/{part}.py imports log/{other}.py"
        for part, rank in LOG_PARTS.items()
        for other in _imported_log_modules(ROOT / "log" / f"{part}.py")
        if other in LOG_PARTS and LOG_PARTS[other] >= rank
    ]
    assert offenders == []
