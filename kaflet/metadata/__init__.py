"""Cluster metadata: the tree interface (tree.py), its embedded and ZooKeeper backends,
Kafka's ZooKeeper layout (zkdata.py), replica assignment and topic-name rules."""

from __future__ import annotations

import os

from kaflet.metadata.tree import MetadataTree


async def open_metadata_tree(
    zookeeper_connect: str | None,
    data_dir: str | os.PathLike[str],
    *,
    session_timeout: float = 18.0,
    connection_timeout: float = 18.0,
) -> MetadataTree:
    """Open the broker's metadata tree: ZooKeeper when ``zookeeper.connect`` is set (chroot
    allowed), else the embedded store in ``data_dir``."""
    if zookeeper_connect:
        # Imported lazily: the embedded default must not need kazoo.
        from kaflet.metadata.zookeeper import ZooKeeperTree

        return await ZooKeeperTree.connect(
            zookeeper_connect, session_timeout=session_timeout, connection_timeout=connection_timeout
        )
    from kaflet.metadata.embedded import EmbeddedTree

    return await EmbeddedTree.open(data_dir)
