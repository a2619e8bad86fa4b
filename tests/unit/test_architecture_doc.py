"""docs/architecture.md's maps stay true: the APIs kaflet serves, the files it writes, the znodes.

A plain parse of the markdown tables under the ``## Map: ...`` headings, checked against the
code: the handler registry (``HANDLER_MODULES``), the path constants of ``metadata/zkdata.py``,
``security/acl.py`` and the gateway's, the file-name constants of ``log/`` and ``metadata/embedded.py``, and
every module the page names.
"""

from __future__ import annotations

import re
from pathlib import Path

import kaflet
from kaflet.gateway import data_cache, gateway
from kaflet.log import checkpoints, log_manager, producer_state, segment
from kaflet.metadata import embedded, zkdata
from kaflet.protocol.api_keys import ApiKey
from kaflet.security import acl
from kaflet.server.handlers import HANDLER_MODULES

PACKAGE = Path(kaflet.__file__).parent
REPO = PACKAGE.parent
DOC = REPO / "docs" / "architecture.md"

API_MAP = "## Map: Kafka APIs"
FILE_MAP = "## Map: files on disk"
ZNODE_MAP = "## Map: znodes"

_CODE = re.compile(r"`([^`]+)`")


def _table(text: str, heading: str) -> list[list[str]]:
    """The rows (cells stripped, header and separator left out) of the first table after ``heading``."""
    lines = text.splitlines()
    assert heading in lines, f"{DOC.name} has no '{heading}' section"
    rows: list[list[str]] = []
    for line in lines[lines.index(heading) + 1:]:
        if line.startswith("## "):
            break
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            break
    assert len(rows) > 2, f"no table under '{heading}'"
    return rows[2:]


def _code(cell: str) -> list[str]:
    """The backticked parts of a cell."""
    return _CODE.findall(cell)


def _api_name(key: ApiKey) -> str:
    """Kafka's name of an API from our enum name: LEADER_AND_ISR -> LeaderAndIsr."""
    return "".join(part.capitalize() for part in key.name.split("_"))


def _versions(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _doc() -> str:
    return DOC.read_text(encoding="utf-8")


def test_api_map_lists_every_served_api_with_its_versions_and_handler() -> None:
    rows = {row[0]: row for row in _table(_doc(), API_MAP)}
    problems = []
    served = set()
    for module in HANDLER_MODULES:
        key = ApiKey(module.API_KEY)
        served.add(str(int(key)))
        expected = [str(int(key)), _api_name(key), _versions(module.MIN_VERSION, module.MAX_VERSION),
                    f"`{Path(module.__file__).relative_to(PACKAGE).as_posix()}`"]
        row = rows.get(expected[0])
        if row is None:
            problems.append("missing row: | " + " | ".join(expected) + " | <the modules that do the work> |")
        elif row[:4] != expected:
            problems.append(f"row of key {expected[0]} is {row[:4]}, the code says {expected}")
    for key in sorted(set(rows) - served, key=int):
        problems.append(f"row of key {key} ({rows[key][1]}) names an API kaflet does not serve")
    assert not problems, "\n".join(problems)


def test_api_map_names_what_does_the_work() -> None:
    for row in _table(_doc(), API_MAP):
        assert any(c.endswith(".py") for c in _code(row[4])), f"{row[1]}: no module in 'does the work'"


def test_znode_map_has_every_path_constant() -> None:
    paths = [_code(row[0])[0] for row in _table(_doc(), ZNODE_MAP) if _code(row[0])]
    rows = "\n".join(paths)
    constants = {name: value for module in (zkdata, acl, data_cache, gateway) for name, value in vars(module).items()
                 if name.endswith(("_PATH", "_ROOT", "_CHANGES")) and isinstance(value, str) and value.startswith("/")}
    missing = [f"{name} = {value!r}" for name, value in sorted(constants.items())
               if value not in paths and not any(p.startswith(value + "/") for p in paths)]
    missing += [f"PERSISTENT_PATHS: {p!r}" for p in zkdata.PERSISTENT_PATHS
                if p not in paths and not any(q.startswith(p + "/") for q in paths)]
    prefixes = {name: value for module in (zkdata, acl) for name, value in vars(module).items()
                if name.endswith("_PREFIX") and isinstance(value, str)}
    missing += [f"{name} = {value!r}" for name, value in sorted(prefixes.items()) if f"/{value}<" not in rows]
    assert not missing, "znodes missing from the map:\n" + "\n".join(missing)
    # And the other way: every row is a node under one of those roots (no invented path).
    roots = set(constants.values())
    invented = [p for p in paths if not any(p == r or p.startswith(r + "/") for r in roots)]
    assert not invented, f"znodes in the map under no known path constant: {invented}"


def test_file_map_has_every_file_kaflet_names() -> None:
    names = " ".join(" ".join(_code(row[0])) for row in _table(_doc(), FILE_MAP))
    constants = {
        "checkpoints": [checkpoints.RECOVERY_POINT_CHECKPOINT, checkpoints.LOG_START_OFFSET_CHECKPOINT,
                        checkpoints.REPLICATION_OFFSET_CHECKPOINT, checkpoints.CLEANER_OFFSET_CHECKPOINT,
                        checkpoints.LEADER_EPOCH_CHECKPOINT, checkpoints.PARTITION_METADATA,
                        checkpoints.META_PROPERTIES],
        "segment": [segment.LOG_SUFFIX, segment.INDEX_SUFFIX, segment.TIME_INDEX_SUFFIX, segment.TXN_INDEX_SUFFIX,
                    segment.DELETED_SUFFIX, segment.CLEANED_SUFFIX, segment.SWAP_SUFFIX],
        "producer_state": [producer_state.SNAPSHOT_SUFFIX],
        "log_manager": [log_manager.CLEAN_SHUTDOWN_FILE, log_manager.LOCK_FILE, log_manager.DELETE_DIR_SUFFIX],
        "embedded": [embedded.DB_FILE_NAME, embedded.LOCK_FILE_NAME],
    }
    missing = [f"{module}: {name!r}" for module, values in constants.items() for name in values if name not in names]
    assert not missing, "files missing from the map:\n" + "\n".join(missing)


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (inline code never spans lines here)."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append(line)
    return out


def test_every_module_the_page_names_exists() -> None:
    # Module paths are relative to kaflet/ unless they start with tests/ or benchmarks/.
    named = {c for line in _prose_lines(_doc()) for c in _code(line)
             if re.fullmatch(r"[a-z_]+(/[a-z_0-9]+)*/[a-z_0-9]+\.py", c)}
    assert named
    gone = sorted(n for n in named
                  if not (REPO / n if n.startswith(("tests/", "benchmarks/")) else PACKAGE / n).is_file())
    assert not gone, f"modules named in {DOC.name} that do not exist: {gone}"


_QUALIFIED = re.compile(r"([A-Z][A-Za-z0-9]+)\.([a-z_][a-z_0-9]*)(?:\(\))?")


def _kaflet_classes() -> dict[str, list[type]]:
    """Every class defined in the package, by name."""
    import importlib
    import inspect
    import pkgutil

    out: dict[str, list[type]] = {}
    for info in pkgutil.walk_packages([str(PACKAGE)], "kaflet."):
        if info.name.startswith("kaflet.manager.migrations"):
            continue  # Alembic scripts run only under Alembic
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if inspect.isclass(value) and value.__module__ == info.name:
                out.setdefault(name, []).append(value)
    return out


def _has(cls: type, attr: str) -> bool:
    """A method, class attribute or field of ``cls``, or an attribute its methods set."""
    import inspect

    if hasattr(cls, attr) or attr in getattr(cls, "__annotations__", {}):
        return True
    return re.search(rf"self\.{attr}\b(: [^=]+)? =", inspect.getsource(cls)) is not None


def test_every_method_the_docs_name_exists() -> None:
    """``Class.method`` in the docs (kaflet's classes; Kafka's are named in prose, not so)
    names a method or attribute the class has, and every module path in cluster.md exists."""
    classes = _kaflet_classes()
    problems = []
    checked = 0
    for doc in (DOC, REPO / "docs" / "cluster.md"):
        codes = [c for line in _prose_lines(doc.read_text(encoding="utf-8")) for c in _CODE.findall(line)]
        for code in codes:
            m = _QUALIFIED.fullmatch(code)
            if m is None or m.group(1) not in classes:
                continue
            checked += 1
            cls_name, attr = m.groups()
            if not any(_has(c, attr) for c in classes[cls_name]):
                problems.append(f"{doc.name}: `{code}`")
        problems += [f"{doc.name}: module `{c}`" for c in codes
                     if re.fullmatch(r"[a-z_]+(/[a-z_0-9]+)*/[a-z_0-9]+\.py", c)
                     and not (REPO / c if c.startswith(("tests/", "benchmarks/", "kaflet/")) else PACKAGE / c).is_file()]
    assert checked > 20
    assert not problems, sorted(set(problems))
