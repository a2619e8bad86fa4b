"""The broker's HTTP client of the management service (Logi-KafkaManager's gateway API).

Every answer is the envelope ``{"code", "message", "data", "tips"}`` with HTTP 200; ``code`` 0
is success. The published manager puts ``data`` as a JSON-encoded *string*; Logi-Kafka's own
test mock puts an object. Both are accepted: a string that holds a JSON object or array is
decoded, any other string (the jmx endpoint's "t1,t2") is returned as it is.

Whatever goes wrong (connection refused, a timeout, HTTP 500, a body that is not JSON, a
``code`` other than 0, an envelope of the wrong shape) becomes one
:class:`~kaflet.gateway.model.ManagementServiceError` whose message is one line fit for the
log; no exception of aiohttp or json escapes. The caller decides about retries and logging.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import aiohttp

from kaflet.gateway.model import ManagementServiceError

#: Largest answer read from the service (Logi-Kafka's HTTP client stops at 10 MiB too).
MAX_RESPONSE_BYTES = 10 * 1024 * 1024


class EndpointMissingError(ManagementServiceError):
    """HTTP 404: the service does not offer this endpoint at all (no published manager serves
    /partition/topicPartitions, for one)."""


class HttpManagementService:
    """:class:`~kaflet.gateway.model.ManagementService` over aiohttp, on the broker's loop.

    ``base_url`` is ``gateway.url`` (e.g. ``http://km:8080/gateway``); paths such as
    ``/api/v1/security/users`` are appended to it. ``timeout_s`` bounds each call as a whole.
    """

    def __init__(self, base_url: str, timeout_s: float = 10.0, headers: Mapping[str, str] | None = None) -> None:
        """``headers``: sent with every call besides the content type (a gateway's identity)."""
        self.base_url = base_url.rstrip("/")
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.headers = {"Content-Type": "application/json;charset=UTF-8", **(headers or {})}
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        # Created lazily so it binds to the running loop, not the one that built the broker.
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=self.timeout, headers=self.headers)
        return self._session

    async def close(self) -> None:
        """Close the connection pool."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def post(self, path: str, body: Mapping[str, Any], query: Mapping[str, Any] | None = None) -> Any:
        """POST ``body`` as JSON to ``gateway.url + path``; the envelope's ``data``."""
        return await self._call("POST", path, query, json.dumps(body, separators=(",", ":")).encode())

    async def get(self, path: str, query: Mapping[str, Any] | None = None) -> Any:
        """GET ``gateway.url + path``; the envelope's ``data``."""
        return await self._call("GET", path, query, None)

    async def _call(self, method: str, path: str, query: Mapping[str, Any] | None, body: bytes | None) -> Any:
        url = self.base_url + path
        params = {k: str(v) for k, v in (query or {}).items()}
        try:
            async with self._http().request(method, url, params=params, data=body) as resp:
                raw = await resp.content.read(MAX_RESPONSE_BYTES + 1)
                status = resp.status
        except TimeoutError:
            raise ManagementServiceError(
                f"{method} {url}: no answer within {self.timeout.total:g} s") from None
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise ManagementServiceError(f"{method} {url}: {type(exc).__name__}: {exc}") from None
        if len(raw) > MAX_RESPONSE_BYTES:
            raise ManagementServiceError(f"{method} {url}: answer larger than {MAX_RESPONSE_BYTES} bytes")
        if status == 404:
            raise EndpointMissingError(f"{method} {url}: HTTP 404, the service does not offer it")
        if status != 200:
            raise ManagementServiceError(f"{method} {url}: HTTP {status}: {_snippet(raw)}")
        return parse_envelope(raw, f"{method} {url}")


def parse_envelope(raw: bytes, what: str = "answer") -> Any:
    """The ``data`` of a management-service envelope, a JSON string in it decoded; raises
    ManagementServiceError for anything but a well-formed envelope with ``code`` 0."""
    try:
        envelope = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        raise ManagementServiceError(f"{what}: not JSON: {_snippet(raw)}") from None
    if not isinstance(envelope, dict):
        raise ManagementServiceError(f"{what}: not a JSON object: {_snippet(raw)}")
    code = envelope.get("code")
    if isinstance(code, bool) or not isinstance(code, int):
        raise ManagementServiceError(f"{what}: envelope without an integer code: {_snippet(raw)}")
    if code != 0:
        message = envelope.get("message")
        raise ManagementServiceError(f"{what}: code {code}: {str(message)[:200]!s}")
    data = envelope.get("data")
    if isinstance(data, str) and data.lstrip()[:1] in ("{", "["):
        try:
            data = json.loads(data)
        except (ValueError, RecursionError):
            raise ManagementServiceError(f"{what}: data is not valid JSON: {data[:200]!r}") from None
    return data


def rows_of(data: Any, what: str = "answer") -> list[dict[str, Any]]:
    """The ``rows`` of an incremental pull's ``data``; ManagementServiceError when ``data`` has
    none or they are not a list of objects."""
    if not isinstance(data, dict) or "rows" not in data:
        raise ManagementServiceError(f"{what}: data has no 'rows': {_snippet(repr(data).encode())}")
    rows = data["rows"]
    if rows is None:
        return []
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ManagementServiceError(f"{what}: 'rows' is not a list of objects: {_snippet(repr(rows).encode())}")
    return rows


def _snippet(raw: bytes, limit: int = 200) -> str:
    text = raw[:limit].decode("utf-8", "replace").replace("\n", " ")
    return text + ("..." if len(raw) > limit else "")
