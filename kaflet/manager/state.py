"""What every request handler of the service shares."""

from __future__ import annotations

from dataclasses import dataclass, field

from kaflet.manager.config import ManagerConfig
from kaflet.manager.db import Database
from kaflet.manager.gateway_instances import PullRecorder
from kaflet.manager.hostnames import HostNames
from kaflet.manager.quotas import QuotaWriter
from kaflet.manager.sampling import ObserverPool
from kaflet.manager.security import LoginLimiter, SecretBox


@dataclass
class ManagerState:
    """The database, the secret box, the quota writer, the login limiter, the cluster
    observers, the host-name cache and the gateways' pull recorder of one service."""

    config: ManagerConfig
    db: Database
    box: SecretBox
    quota_writer: QuotaWriter
    login_limiter: LoginLimiter
    observers: ObserverPool = field(default_factory=ObserverPool)
    host_names: HostNames = field(default_factory=HostNames)
    pulls: PullRecorder = field(default_factory=PullRecorder)
