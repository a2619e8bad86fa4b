"""Logi-Kafka's preferred controllers on real broker processes: a broker listed under
/config/extension/candidates wins the election while it lives; when it is gone any broker takes
over, and a restarted candidate does not depose a working controller."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from kaflet.metadata import zkdata
from kaflet.metadata.zk_testing import ZooKeeperServer
from tests.support.cluster import Cluster

pytestmark = pytest.mark.timeout(240)

_chroots = itertools.count()


def test_live_candidate_wins_and_others_take_over_when_it_is_gone(zk_server: ZooKeeperServer,
                                                                   tmp_path: Path) -> None:
    chroot = f"/preferred-{next(_chroots)}-{int(time.time())}"
    zk = KazooClient(hosts=zk_server.connect_string + chroot, timeout=10)
    zk.start(timeout=15)
    try:
        # Broker 3 is the only candidate; it starts last, the others first.
        zk.create(f"{zkdata.CONTROLLER_CANDIDATES_PATH}/3", b"", makepath=True)
        cluster = Cluster(tmp_path / "c", 3, zookeeper=zk_server, chroot=chroot)
        try:
            cluster.start(timeout=90)
            cluster.wait_for_registered([1, 2, 3])
            assert cluster.wait_for_controller(timeout=30) == 3
            epoch = cluster.controller_epoch()
            # Without a live candidate the others compete at once.
            cluster.kill(3)
            successor = cluster.wait_for_controller(timeout=60, exclude=(3,))
            assert successor in (1, 2)
            # A candidate coming back does not depose a working controller.
            cluster.start_broker(3)
            cluster.wait_for_registered([1, 2, 3])
            time.sleep(5)  # longer than the non-candidates' 3 s wait: nothing moves meanwhile
            assert cluster.controller_id() == successor
            assert cluster.controller_epoch() == epoch + 1
        finally:
            cluster.close()
    finally:
        zk.stop()
        zk.close()
