"""Running a broker process: logging, signals, clean shutdown."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import resource
import signal
import sys

from kaflet.server.broker import Broker, BrokerStartError
from kaflet.server.config import BrokerConfig


def setup_logging(level: str = "INFO") -> None:
    """One line per event on stderr, with a timestamp and the component."""
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s [%(name)s] %(message)s",
        stream=sys.stderr,
    )


async def serve(config: BrokerConfig) -> int:
    """Start a broker and run it until SIGTERM or SIGINT, then stop it cleanly; the exit status."""
    broker = Broker(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # Start-up makes objects by the hundred thousand (a log with its segments, indexes and states
    # per partition, the controller's context, the first LeaderAndIsr) and frees few, so each
    # collection the allocations trigger walks a heap that only grows, a full one at every
    # quarter of growth: paused, loading 20,000 partitions took 2.6-3.7 s instead of 3.5-6.7 s.
    # A collection after it found nothing to free (0 objects at 20,000 partitions) and cost
    # 0.5-0.8 s before the first client was served, so start-up ends in the freeze below, and
    # collections resume after it.
    gc.disable()
    try:
        await broker.start()
    except BaseException:
        gc.enable()
        await broker.stop()
        raise
    # What start-up built (modules, codec schemas, configs, the metadata) lives as long as the
    # process: kept out of the collector, a full collection no longer walks it, which took
    # 30-45 ms of the event loop each time (measured on a 3-broker cluster) and stalled requests.
    gc.freeze()
    # What is made later (topics created at run time, a scrape's snapshot, requests in flight)
    # is promoted to the oldest generation when a collection of the middle one finds it alive,
    # and a quarter of that generation promoted costs a full collection: 0.3-0.5 s of the
    # loop at 10,000 partitions. With a collection every 700 allocations, a handler or a
    # scrape that allocates a few thousand objects was found alive by many and promoted them
    # (a full collection every second or two while /metrics was scraped every second, see
    # benchmarks/README.md); every 50,000 finds far fewer alive, and collects no less of the
    # garbage (what refcounting frees never waits for the collector).
    gc.set_threshold(50_000, 10, 10)
    gc.enable()
    waits = [asyncio.create_task(stop.wait()), asyncio.create_task(broker.halted.wait())]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for w in waits:
        w.cancel()
    if broker.halt_reason is None:
        logging.getLogger("kaflet.broker").info("shutting down")
    await broker.stop()
    return 1 if broker.halt_reason is not None else 0


def raise_open_file_limit() -> None:
    """Raise the soft limit of open files to the hard one, as the JVM does for Kafka
    (MaxFDLimit): every segment holds descriptors, and the soft default (often 1024) runs out
    with a few hundred partitions."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard or (hard != resource.RLIM_INFINITY and hard <= soft):
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:
        logging.getLogger("kaflet.broker").warning("cannot raise the open file limit from %d: %s", soft, exc)
        return
    logging.getLogger("kaflet.broker").info("open file limit raised from %d to %s", soft,
                                            "unlimited" if hard == resource.RLIM_INFINITY else hard)


def run(config: BrokerConfig) -> int:
    """Run a broker in this process; returns the exit status (1 when it could not start or
    stopped by itself because its log directories failed)."""
    raise_open_file_limit()
    try:
        return asyncio.run(serve(config))
    except BrokerStartError as exc:
        logging.getLogger("kaflet.broker").error("cannot start: %s", exc)
        return 1


def exit_process(status: int) -> None:
    """End the process with ``status`` once the broker has stopped, without tearing down the
    interpreter's heap object by object.

    By then every log is closed and fsync'd and the clean-shutdown marker written; what is left
    is freeing the objects of every partition, 0.5-2.4 s at 10,000 partitions (measured from
    "stopped cleanly" to the exit), during which the broker's files are already final. Kafka's
    JVM exits without such a walk too. The log handlers and the standard streams are flushed
    first, so nothing written is lost."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a closed or broken pipe: nothing more can reach it
    os._exit(status)
