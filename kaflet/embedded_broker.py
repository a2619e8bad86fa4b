"""A real broker inside a Python program, on a free port and a temporary directory.

    with kaflet.embedded() as bootstrap:          # runs in a background thread
        Producer({"bootstrap.servers": bootstrap})...

    async with kaflet.embedded_async() as bootstrap:   # runs on the caller's event loop
        ...
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator, Mapping

from kaflet.server.broker import Broker
from kaflet.server.config import BrokerConfig


def _config(data_dir: str, config: Mapping[str, str] | None) -> BrokerConfig:
    props = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": data_dir}
    props.update({k: str(v) for k, v in (config or {}).items()})
    return BrokerConfig(props)


@contextlib.asynccontextmanager
async def embedded_async(config: Mapping[str, str] | None = None) -> AsyncIterator[str]:
    """Run a broker on the running loop; yields its bootstrap address "127.0.0.1:PORT"."""
    data_dir = tempfile.mkdtemp(prefix="kaflet-")
    broker = Broker(_config(data_dir, config))
    try:
        await broker.start()
        yield broker.bootstrap
    finally:
        await broker.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


@contextlib.contextmanager
def embedded(config: Mapping[str, str] | None = None, start_timeout: float = 30.0) -> Iterator[str]:
    """Run a broker in a background thread with its own event loop; yields "127.0.0.1:PORT"."""
    with embedded_broker(config, start_timeout) as (broker, _loop):
        yield broker.bootstrap


@contextlib.contextmanager
def embedded_broker(config: Mapping[str, str] | None = None, start_timeout: float = 30.0
                    ) -> Iterator[tuple[Broker, asyncio.AbstractEventLoop]]:
    """As `embedded`, but yields the broker and its loop (reach it with run_coroutine_threadsafe)."""
    data_dir = tempfile.mkdtemp(prefix="kaflet-")
    loop = asyncio.new_event_loop()
    broker = Broker(_config(data_dir, config))
    started = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(broker.start())
        except BaseException as exc:
            failure.append(exc)
            started.set()
            loop.run_until_complete(broker.stop())
            return
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, name="kaflet-embedded", daemon=True)
    thread.start()
    try:
        if not started.wait(start_timeout):
            raise TimeoutError("the embedded broker did not start in time")
        if failure:
            raise failure[0]
        yield broker, loop
    finally:
        if not failure and thread.is_alive():
            asyncio.run_coroutine_threadsafe(broker.stop(), loop).result(timeout=60)
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=60)
        loop.close()
        shutil.rmtree(data_dir, ignore_errors=True)
