"""What the gateway learns from the management service's discovery API, and how it keeps it.

The API (../shared/logikm-contract.md 1.5, served by kaflet/manager/gateway.py) is pulled by
version, as the brokers pull: each endpoint is asked for what is newer than the highest version
held (``versionNumber``) and answers ``{"version": "N", "data": ...}`` or null when nothing is.

- ``discovery/update``: every cluster's service addresses, ``{"<clusterId>": ["host:port", ...]}``
- ``discovery/max-request-num``, ``appId-rate``, ``ip-rate``: one whole number each (null: the
  setting was deleted, no limit)
- ``discovery/sp-limit``: special rates, ``"<appId or IP>#<rate>,..."``

The manager's strings are parsed strictly (numeric cluster ids, ``host:port`` values, whole
numbers): a bad row is one log line and is left out (a cluster keeps its last good addresses),
the other rows are applied.

`DiscoverySync` pulls on a schedule through the brokers' own management-service client
(kaflet/gateway/client.py) and reports outages to an `OutageLog`. After every successful sync
the state is written to the cache file, if one is configured (a temporary file, fsync, rename).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kaflet.gateway.model import ManagementService, ManagementServiceError
from kaflet.util.outage_log import OutageLog
from kaflet.util.tasks import cancel_and_wait

log = logging.getLogger("kaflet.proxy.discovery")

UPDATE_PATH = "/api/v1/discovery/update"
LIMIT_PATHS = {
    "max_request_num": "/api/v1/discovery/max-request-num",
    "app_rate": "/api/v1/discovery/appId-rate",
    "ip_rate": "/api/v1/discovery/ip-rate",
}
SP_LIMIT_PATH = "/api/v1/discovery/sp-limit"
#: Sent with every pull so the manager's console can tell gateways apart and see when one stopped
#: (kaflet/manager/gateway_instances.py reads them; the contract itself has no identity).
INSTANCE_HEADER = "X-Kaflet-Gateway-Instance"
INTERVAL_HEADER = "X-Kaflet-Gateway-Sync-Interval-Ms"

_CLUSTER_ID = re.compile(r"^\d{1,18}$")
_WHOLE = re.compile(r"^\d{1,19}$")
_ADDRESS = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})$")
#: Version held before the first pull: every row the manager has is newer.
NO_VERSION = -1
CACHE_FORMAT = 1


class DiscoveryParseError(ValueError):
    """A row of the manager's answer that is not what the contract says; one log line."""


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` of a cluster's service address; DiscoveryParseError when it is not one."""
    m = _ADDRESS.match(text.strip()) if isinstance(text, str) else None
    if m is None or not 1 <= int(m.group("port")) <= 65535:
        raise DiscoveryParseError(f"{text!r} is not host:port")
    return m.group("host").strip("[]"), int(m.group("port"))


def parse_cluster_map(data: Any) -> tuple[dict[int, tuple[tuple[str, int], ...]], dict[str, str]]:
    """(cluster id -> addresses, the bad rows' keys -> what is wrong) of a ``{"<id>": ["host:port"]}`` map."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError:
            raise DiscoveryParseError(f"the cluster map is not JSON: {data[:200]!r}") from None
    if not isinstance(data, dict):
        raise DiscoveryParseError(f"the cluster map is not a JSON object: {str(data)[:200]!r}")
    clusters: dict[int, tuple[tuple[str, int], ...]] = {}
    bad: dict[str, str] = {}
    for key, value in data.items():
        if not isinstance(key, str) or not _CLUSTER_ID.match(key):
            bad[str(key)] = f"cluster id {key!r} is not a number"
            continue
        if not isinstance(value, list) or not value:
            bad[key] = f"cluster {key}: the addresses are not a non-empty list: {str(value)[:200]!r}"
            continue
        try:
            clusters[int(key)] = tuple(parse_address(a) for a in value)
        except DiscoveryParseError as exc:
            bad[key] = f"cluster {key}: {exc}"
    return clusters, bad


def parse_whole(data: Any, what: str) -> int:
    """A whole number the manager sends as a string (or a JSON number)."""
    if isinstance(data, int) and not isinstance(data, bool) and data >= 0:
        return data
    if isinstance(data, str) and _WHOLE.match(data.strip()):
        return int(data)
    raise DiscoveryParseError(f"{what}: {str(data)[:200]!r} is not a whole number")


def parse_sp_limits(data: Any) -> tuple[dict[str, int], list[str]]:
    """(appId or IP -> rate, one message per bad entry) of ``"name#rate,name#rate"``."""
    if not isinstance(data, str):
        raise DiscoveryParseError(f"sp-limit: {str(data)[:200]!r} is not a string")
    limits: dict[str, int] = {}
    bad: list[str] = []
    for entry in (e.strip() for e in data.split(",")):
        if not entry:
            continue
        name, sep, rate = entry.rpartition("#")
        if not sep or not name.strip() or not _WHOLE.match(rate.strip()):
            bad.append(f"sp-limit entry {entry!r} is not <appId or IP>#<rate>")
            continue
        limits[name.strip()] = int(rate)
    return limits, bad


def versioned(data: Any, what: str) -> tuple[int, Any] | None:
    """(version, data) of a versioned answer; None when the manager has nothing newer."""
    if data is None:
        return None
    if not isinstance(data, dict) or "version" not in data or "data" not in data:
        raise DiscoveryParseError(f"{what}: not a versioned answer: {str(data)[:200]!r}")
    return parse_whole(data["version"], f"{what} version"), data["data"]


@dataclass(frozen=True, slots=True)
class DiscoveryState:
    """One consistent view of the discovery settings; replaced whole, never changed."""

    clusters: Mapping[int, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    #: The bound on requests queued per connection, the default per-app and per-IP request
    #: rates, and the special rates by appId or IP (None or empty: the manager has none).
    max_request_num: int | None = None
    app_rate: int | None = None
    ip_rate: int | None = None
    sp_limits: Mapping[str, int] = field(default_factory=dict)
    #: The highest version held per endpoint (the ``versionNumber`` of the next pull).
    versions: Mapping[str, int] = field(default_factory=dict)

    def version(self, endpoint: str) -> int:
        return self.versions.get(endpoint, NO_VERSION)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": CACHE_FORMAT,
            "clusters": {str(k): [f"{h}:{p}" if ":" not in h else f"[{h}]:{p}" for h, p in v]
                         for k, v in sorted(self.clusters.items())},
            "max_request_num": self.max_request_num, "app_rate": self.app_rate, "ip_rate": self.ip_rate,
            "sp_limits": dict(sorted(self.sp_limits.items())), "versions": dict(sorted(self.versions.items())),
        }

    @classmethod
    def from_json(cls, data: Any) -> DiscoveryState:
        """The state a cache file holds; DiscoveryParseError when it is not one."""
        if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
            raise DiscoveryParseError(f"not a gateway config cache of format {CACHE_FORMAT}")
        clusters, bad = parse_cluster_map(data.get("clusters"))
        if bad:
            raise DiscoveryParseError(next(iter(bad.values())))
        limits = {k: None if data.get(k) is None else parse_whole(data.get(k), k)
                  for k in ("max_request_num", "app_rate", "ip_rate")}
        sp = data.get("sp_limits") or {}
        versions = data.get("versions") or {}
        if not isinstance(sp, dict) or not isinstance(versions, dict):
            raise DiscoveryParseError("sp_limits and versions must be objects")
        return cls(clusters, limits["max_request_num"], limits["app_rate"], limits["ip_rate"],
                   {str(k): parse_whole(v, f"sp_limits.{k}") for k, v in sp.items()},
                   {str(k): int(v) if isinstance(v, int) else NO_VERSION for k, v in versions.items()})


def write_cache(path: Path, state: DiscoveryState) -> None:
    """Write the state to ``path`` atomically: a reader sees the old file or the new, never half."""
    tmp = path.with_name(path.name + ".tmp")
    data = json.dumps(state.to_json(), indent=1).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    with contextlib.suppress(OSError):  # some file systems cannot fsync a directory
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def read_cache(path: Path) -> DiscoveryState:
    """The state in the cache file; DiscoveryParseError (one line) when it is missing or unusable."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DiscoveryParseError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return DiscoveryState.from_json(json.loads(raw))
    except (ValueError, RecursionError) as exc:
        raise DiscoveryParseError(f"{path} is not a usable gateway config cache: {exc}") from None


class DiscoverySync:
    """Keeps a `DiscoveryState` current by versioned pulls every ``interval_s``.

    ``on_change`` is called with the old and new state after each sync that changed it.
    """

    def __init__(self, service: ManagementService, interval_s: float, *, cache_path: Path | None = None,
                 on_change: Callable[[DiscoveryState, DiscoveryState], None] | None = None,
                 state: DiscoveryState | None = None) -> None:
        self.service = service
        self.interval_s = interval_s
        self.cache_path = cache_path
        self.on_change = on_change
        self.state = state or DiscoveryState()
        self.outage = OutageLog(log, "discovery pull from the management service")
        #: When a pull last worked (monotonic; None before one has) and the pulls that failed.
        self.last_success: float | None = None
        self.failures = 0
        self._task: asyncio.Task[None] | None = None

    async def sync_once(self) -> bool:
        """One round of pulls; True when every pull answered (the state then holds what the
        manager has). Raises ManagementServiceError when the manager did not answer."""
        before = self.state
        news: list[str] = []
        state = await self._pull(before, news)
        if state != before:
            self.state = state
            if self.on_change is not None:
                self.on_change(before, state)
        # Said once in force, not when read: the round's later pulls still await the manager.
        for line in news:
            log.info("%s", line)
        if self.cache_path is not None:
            try:
                write_cache(self.cache_path, state)
            except OSError as exc:
                log.warning("cannot write the config cache %s: %s", self.cache_path, exc.strerror or exc)
        self.last_success = time.monotonic()
        return True

    async def _pull(self, state: DiscoveryState, news: list[str]) -> DiscoveryState:
        """The state the manager's answers make of ``state``; what changed goes on ``news``."""
        versions = dict(state.versions)
        got = await self._versioned(UPDATE_PATH, state)
        clusters = dict(state.clusters)
        if got is not None:
            version, data = got
            try:
                parsed, bad = parse_cluster_map(data)
            except DiscoveryParseError as exc:
                log.warning("discovery/update version %d left out: %s", version, exc)
            else:
                for message in bad.values():
                    log.warning("discovery/update version %d: %s; the row is left out (a known cluster keeps "
                                "its last good addresses)", version, message)
                # A cluster missing from the map was removed (the map is always complete);
                # a bad row keeps the cluster's last good addresses.
                kept = {cid: addresses for cid, addresses in clusters.items() if str(cid) in bad}
                clusters = {**kept, **parsed}
                for cid in sorted(set(clusters) | set(state.clusters)):
                    if clusters.get(cid) != state.clusters.get(cid):
                        news.append(f"cluster {cid}: {_show(clusters.get(cid))}")
            versions[UPDATE_PATH] = version
        limits: dict[str, int | None] = {"max_request_num": state.max_request_num, "app_rate": state.app_rate,
                                         "ip_rate": state.ip_rate}
        for name, path in LIMIT_PATHS.items():
            got = await self._versioned(path, state)
            if got is None:
                continue
            version, data = got
            versions[path] = version
            if data is None:  # the manager deleted the setting: no limit any more
                limits[name] = None
                news.append(f"{path.rsplit('/', 1)[1]}: none (version {version})")
                continue
            try:
                limits[name] = parse_whole(data, path.rsplit("/", 1)[1])
            except DiscoveryParseError as exc:
                log.warning("%s version %d left out: %s", path.rsplit("/", 1)[1], version, exc)
                continue
            news.append(f"{path.rsplit('/', 1)[1]}: {limits[name]} (version {version})")
        sp_limits = state.sp_limits
        got = await self._versioned(SP_LIMIT_PATH, state)
        if got is not None:
            version, data = got
            versions[SP_LIMIT_PATH] = version
            try:
                sp_limits, bad_entries = parse_sp_limits(data)
            except DiscoveryParseError as exc:
                log.warning("sp-limit version %d left out: %s", version, exc)
            else:
                for message in bad_entries:
                    log.warning("sp-limit version %d: %s; the entry is left out", version, message)
                news.append(f"sp-limit: {len(sp_limits)} special rates (version {version})")
        return replace(state, clusters=clusters, max_request_num=limits["max_request_num"],
                       app_rate=limits["app_rate"], ip_rate=limits["ip_rate"], sp_limits=sp_limits,
                       versions=versions)

    async def _versioned(self, path: str, state: DiscoveryState) -> tuple[int, Any] | None:
        data = await self.service.get(path, {"versionNumber": state.version(path)})
        try:
            return versioned(data, path)
        except DiscoveryParseError as exc:
            raise ManagementServiceError(str(exc)) from None

    def failed(self, exc: Exception, note: str) -> None:
        """A pull the manager did not answer: counted, and logged as part of an outage."""
        self.failures += 1
        self.outage.failed(exc, note)

    def start(self) -> None:
        """Pull every interval from now on (the first pull is the caller's, at start-up)."""
        self._task = asyncio.create_task(self._run(), name="discovery-sync")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.sync_once()
            except ManagementServiceError as exc:
                self.failed(exc, "the last known clusters and limits are kept")
            else:
                self.outage.succeeded()

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None


def _show(addresses: tuple[tuple[str, int], ...] | None) -> str:
    if addresses is None:
        return "removed"
    return ",".join(f"{h}:{p}" for h, p in addresses)
