"""The poll-based wait kazoo's connection uses in ZooKeeperTree (kaflet/metadata/zookeeper.py)."""

from __future__ import annotations

import socket

import pytest

from kaflet.metadata.zookeeper import _PollingHandler


def test_it_answers_as_select_does() -> None:
    handler = _PollingHandler()
    a, b = socket.socketpair()
    try:
        assert handler.select([a], [], [], 0) == ([], [], [])
        assert handler.select([a], [a], [], 0) == ([], [a], [])
        b.sendall(b"x")
        assert handler.select([a, b], [], [], 1.0) == ([a], [], [])
        assert handler.select([a.fileno()], [], [], 0) == ([a.fileno()], [], [])
        b.close()  # a hung-up peer is ready to read: the read says so
        a.recv(1)
        assert handler.select([a], [], [], 1.0) == ([a], [], [])
        assert a.recv(1) == b""
    finally:
        a.close()
        b.close()


def test_it_refuses_what_select_refuses() -> None:
    handler = _PollingHandler()
    a, b = socket.socketpair()
    a.close()
    b.close()
    with pytest.raises(ValueError):
        handler.select([a], [], [], 0)  # a closed socket's fileno() is -1
    with pytest.raises(ValueError):
        handler.select([], [], [], -1)
