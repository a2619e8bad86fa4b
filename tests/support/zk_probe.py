"""A kazoo client as a separate process, for partition tests (run it inside a namespace).

    python -m tests.support.zk_probe HOST:PORT SESSION_TIMEOUT_S

Prints ``STATE <CONNECTED|SUSPENDED|LOST>`` on every connection state change and
``SESSION <id>`` once connected; on stdin, ``ping`` answers ``PONG <session id>`` after a
round trip to the server (``FAIL <error>`` if it fails within 2 s) and ``quit`` exits.
"""

from __future__ import annotations

import sys
import threading

from kazoo.client import KazooClient

_out = threading.Lock()


def emit(line: str) -> None:
    # Kazoo's thread and the main thread both write: one whole line at a time.
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main() -> None:
    hosts, session_timeout = sys.argv[1], float(sys.argv[2])
    zk = KazooClient(hosts=hosts, timeout=session_timeout)
    zk.add_listener(lambda state: emit(f"STATE {state}"))
    zk.start(timeout=20)
    emit(f"SESSION {zk.client_id[0]:#x}")
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "quit":
            break
        if cmd == "ping":
            try:
                zk.exists_async("/").get(timeout=2)
                emit(f"PONG {zk.client_id[0]:#x}")
            except Exception as exc:
                emit(f"FAIL {type(exc).__name__}")
    zk.stop()
    zk.close()


if __name__ == "__main__":
    main()
