"""A ZooKeeper session in a process that has run out of descriptors.

Run as ``python -m tests.support.zk_starved <connect> <session seconds>`` (in a process of its
own: the descriptor limit is the whole process's). It connects a ZooKeeperTree, creates an
ephemeral ``/starved``, then takes every free descriptor for three session timeouts, taking
each one back the moment something else frees it, and reads the node meanwhile. It prints one
JSON line: the session id before and after, the connection states seen, how many descriptors
it held and what the reads while starved returned.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import threading

from kaflet.metadata.zookeeper import ZooKeeperTree


def _hog(held: list[int], done: threading.Event) -> None:
    # A busy loop, so a descriptor another thread closes is taken before it opens one again.
    while not done.is_set():
        try:
            held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass


async def main(connect: str, session_s: float) -> dict[str, object]:
    tree = await ZooKeeperTree.connect(connect, session_timeout=session_s)
    states: list[str] = []
    tree.on_state_change = states.append
    try:
        before = tree.session_id
        await tree.create("/starved", b"x", ephemeral=True)
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
        held: list[int] = []
        done = threading.Event()
        hog = threading.Thread(target=_hog, args=(held, done), daemon=True)
        hog.start()
        reads: list[str] = []
        try:
            for _ in range(6):
                await asyncio.sleep(session_s / 2)
                try:
                    reads.append((await asyncio.wait_for(tree.get("/starved"), session_s))[0].decode())
                except Exception as exc:  # noqa: BLE001 - the caller asserts on what happened
                    reads.append(type(exc).__name__)
        finally:
            done.set()
            hog.join()
            count = len(held)
            for fd in held:
                os.close(fd)
        try:
            stat = await asyncio.wait_for(tree.exists("/starved"), 4 * session_s)
            owner: object = stat.ephemeral_owner if stat is not None else None
        except Exception as exc:  # noqa: BLE001
            owner = type(exc).__name__
        return {"before": before, "after": tree.session_id, "states": list(states), "held": count, "reads": reads,
                "owner": owner}
    finally:
        await tree.close()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], float(sys.argv[2])))), flush=True)
