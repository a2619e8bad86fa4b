"""The manager's tables (SQLAlchemy 2, typed). Migrations in ``migrations/`` create them.

Times are milliseconds since the epoch (``*_ms``, and ``create_time`` where the gateway contract
names it), as the brokers exchange them. ``kafka_user`` and ``kafka_acl`` are append-only change
logs the brokers pull incrementally (the newest row of a user or (topic, user) wins; a revoke row
carries only the removed bits); ``authority`` is the current state they are derived from.
"""

from __future__ import annotations

import enum

from sqlalchemy import BigInteger, Boolean, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    """Base of every table."""


class Role(enum.StrEnum):
    """What an account may do: users own applications, operators approve and manage clusters,
    admins also manage accounts and gateway settings."""

    USER = "user"
    OPERATOR = "operator"
    ADMIN = "admin"


ROLE_RANK = {Role.USER: 0, Role.OPERATOR: 1, Role.ADMIN: 2}


class RequestStatus(enum.StrEnum):
    """A permission request's state (Logi-KafkaManager's order status 0-3)."""

    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    CANCELLED = "cancelled"


class Account(Base):
    """A person who logs in to the console."""

    __tablename__ = "account"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    username: Mapped[str] = mapped_column(String(64), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    role: Mapped[str] = mapped_column(String(16), default=Role.USER.value)
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_ms: Mapped[int] = mapped_column(BigInteger)


class Cluster(Base):
    """A Kafka cluster; ``id`` is the Logi-Kafka cluster id its brokers have as ``cluster.id``.

    The admin connection (``security_protocol`` and SASL settings) is what the manager uses to
    write quotas; its password is encrypted like application passwords.
    """

    __tablename__ = "cluster"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    bootstrap_servers: Mapped[str] = mapped_column(String(1024))
    zookeeper_connect: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    security_protocol: Mapped[str] = mapped_column(String(32), default="PLAINTEXT")
    sasl_mechanism: Mapped[str | None] = mapped_column(String(32), nullable=True)
    sasl_username: Mapped[str | None] = mapped_column(String(255), nullable=True)
    sasl_password_enc: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_ms: Mapped[int] = mapped_column(BigInteger)


class AppOwner(Base):
    """An account that owns an application (Logi-KafkaManager's ``principals``)."""

    __tablename__ = "app_owner"
    app_id: Mapped[str] = mapped_column(ForeignKey("app.app_id", ondelete="CASCADE"), primary_key=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("account.id", ondelete="CASCADE"), primary_key=True)


class App(Base):
    """An application: the Kafka user ``<clusterId>.<appId>`` of gateway clusters."""

    __tablename__ = "app"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    app_id: Mapped[str] = mapped_column(String(64), unique=True)
    password_enc: Mapped[str] = mapped_column(Text)
    description: Mapped[str] = mapped_column(String(1024), default="")
    super_user: Mapped[bool] = mapped_column(Boolean, default=False)
    created_by: Mapped[str] = mapped_column(String(64))
    created_ms: Mapped[int] = mapped_column(BigInteger)
    owners: Mapped[list[Account]] = relationship(secondary="app_owner", lazy="selectin")


class Authority(Base):
    """The access an application has now on a topic of a cluster (1 read, 2 write, 3 both)."""

    __tablename__ = "authority"
    __table_args__ = (UniqueConstraint("app_id", "cluster_id", "topic_name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    app_id: Mapped[str] = mapped_column(ForeignKey("app.app_id", ondelete="CASCADE"))
    cluster_id: Mapped[int] = mapped_column(ForeignKey("cluster.id", ondelete="CASCADE"))
    topic_name: Mapped[str] = mapped_column(String(249))
    access: Mapped[int] = mapped_column(Integer)
    modified_ms: Mapped[int] = mapped_column(BigInteger)


class KafkaUser(Base):
    """Append-only log of application changes for /security/users (0 create, 1 update, 2 delete)."""

    __tablename__ = "kafka_user"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    app_id: Mapped[str] = mapped_column(String(64))
    password_enc: Mapped[str] = mapped_column(Text)
    user_type: Mapped[int] = mapped_column(Integer, default=0)
    operation: Mapped[int] = mapped_column(Integer)
    create_time: Mapped[int] = mapped_column(BigInteger, index=True)


class KafkaAcl(Base):
    """Append-only log of permission changes for /security/acls: a grant (operation 0) carries
    the merged access, a revoke (operation 2) only the bits removed."""

    __tablename__ = "kafka_acl"
    __table_args__ = (Index("ix_kafka_acl_cluster_time", "cluster_id", "create_time"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    app_id: Mapped[str] = mapped_column(String(64))
    cluster_id: Mapped[int] = mapped_column(Integer)
    topic_name: Mapped[str] = mapped_column(String(249))
    access: Mapped[int] = mapped_column(Integer)
    operation: Mapped[int] = mapped_column(Integer)
    create_time: Mapped[int] = mapped_column(BigInteger)


class ChangeLogClock(Base):
    """The newest timestamp given to a change-log row (one row, id 1). Writers raise it under the
    database's change-log lock, so stamps increase strictly across every manager process."""

    __tablename__ = "change_log_clock"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    last_stamp: Mapped[int] = mapped_column(BigInteger)


class KeyCheck(Base):
    """Proof of the keys the database was first served with (one row, id 1): an HMAC of a fixed
    text under ``secret_key`` and a Fernet token of it under ``encryption_key``. A process started
    with other keys refuses to run instead of writing passwords no other process can read."""

    __tablename__ = "key_check"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    secret_key_hmac: Mapped[str] = mapped_column(String(64))
    encryption_key_token: Mapped[str] = mapped_column(Text)


class PermissionRequest(Base):
    """An application's request for produce (write) and/or consume (read) on a topic."""

    __tablename__ = "permission_request"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    app_id: Mapped[str] = mapped_column(ForeignKey("app.app_id", ondelete="CASCADE"))
    cluster_id: Mapped[int] = mapped_column(ForeignKey("cluster.id", ondelete="CASCADE"))
    topic_name: Mapped[str] = mapped_column(String(249))
    access: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str] = mapped_column(String(1024), default="")
    status: Mapped[str] = mapped_column(String(16), default=RequestStatus.PENDING.value, index=True)
    requested_by: Mapped[str] = mapped_column(String(64))
    requested_ms: Mapped[int] = mapped_column(BigInteger)
    decided_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    decided_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    decision_reason: Mapped[str | None] = mapped_column(String(1024), nullable=True)


class Quota(Base):
    """An application's byte-rate quotas on a topic (None: unlimited), as last written to the
    cluster's client-id quota entity ``<appId>.<topic>``."""

    __tablename__ = "quota"
    __table_args__ = (UniqueConstraint("app_id", "cluster_id", "topic_name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    app_id: Mapped[str] = mapped_column(ForeignKey("app.app_id", ondelete="CASCADE"))
    cluster_id: Mapped[int] = mapped_column(ForeignKey("cluster.id", ondelete="CASCADE"))
    topic_name: Mapped[str] = mapped_column(String(249))
    producer_byte_rate: Mapped[float | None] = mapped_column(Float, nullable=True)
    consumer_byte_rate: Mapped[float | None] = mapped_column(Float, nullable=True)
    modified_ms: Mapped[int] = mapped_column(BigInteger)


class TopicConnection(Base):
    """A client connection a broker reported (heartbeat/survive-user); ``create_time`` is when
    it was last reported (rows are replaced on their unique key)."""

    __tablename__ = "topic_connections"
    __table_args__ = (UniqueConstraint("app_id", "cluster_id", "topic_name", "type", "ip", "client_version",
                                       name="uq_topic_connections"),
                      Index("ix_topic_connections_time", "cluster_id", "create_time"))
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    app_id: Mapped[str] = mapped_column(String(64))
    cluster_id: Mapped[int] = mapped_column(Integer)
    topic_name: Mapped[str] = mapped_column(String(249))
    type: Mapped[str] = mapped_column(String(16))
    ip: Mapped[str] = mapped_column(String(64))
    client_version: Mapped[str] = mapped_column(String(32))
    client_id: Mapped[str | None] = mapped_column(String(255), nullable=True)
    broker_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    create_time: Mapped[int] = mapped_column(BigInteger)


class TopicReport(Base):
    """A topic whose per-application metrics the brokers record between start and end time."""

    __tablename__ = "topic_report"
    __table_args__ = (UniqueConstraint("cluster_id", "topic_name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cluster_id: Mapped[int] = mapped_column(ForeignKey("cluster.id", ondelete="CASCADE"))
    topic_name: Mapped[str] = mapped_column(String(249))
    start_time: Mapped[int] = mapped_column(BigInteger)
    end_time: Mapped[int] = mapped_column(BigInteger)


class GatewayConfigType(enum.StrEnum):
    """Logi-KafkaManager's service-discovery config types."""

    SD_CLUSTER_ID = "SD_CLUSTER_ID"
    SD_QUEUE_SIZE = "SD_QUEUE_SIZE"
    SD_APP_RATE = "SD_APP_RATE"
    SD_IP_RATE = "SD_IP_RATE"
    SD_SP_RATE = "SD_SP_RATE"


class GatewayConfig(Base):
    """A discovery setting; ``version`` is its type's next version (`GatewayConfigVersion`) at
    its last insert or update."""

    __tablename__ = "gateway_config"
    __table_args__ = (UniqueConstraint("type", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    type: Mapped[str] = mapped_column(String(32))
    name: Mapped[str] = mapped_column(String(255))
    value: Mapped[str] = mapped_column(String(4096))
    version: Mapped[int] = mapped_column(BigInteger)
    description: Mapped[str] = mapped_column(String(1024), default="")
    modified_ms: Mapped[int] = mapped_column(BigInteger)


class GatewayConfigVersion(Base):
    """The highest version given to a discovery setting type, raised by every insert, update and
    delete: a deletion must be newer than what the gateways hold, or they never learn of it."""

    __tablename__ = "gateway_config_version"
    type: Mapped[str] = mapped_column(String(32), primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger)


class GatewayInstance(Base):
    """A gateway process that pulls discovery settings, by the address it calls from and the
    instance id it sends (empty when it sends none); written at most every few seconds."""

    __tablename__ = "gateway_instance"
    __table_args__ = (UniqueConstraint("address", "instance_id", name="uq_gateway_instance"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    address: Mapped[str] = mapped_column(String(64))
    instance_id: Mapped[str] = mapped_column(String(128))
    #: The pull interval the gateway says it uses (None: it did not say).
    sync_interval_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    #: The cluster-address version (discovery/update) it holds after its last pull (-1: none).
    version: Mapped[int] = mapped_column(BigInteger)
    first_pull_ms: Mapped[int] = mapped_column(BigInteger)
    last_pull_ms: Mapped[int] = mapped_column(BigInteger)


class AuditRecord(Base):
    """Who did what, when (never holds a password)."""

    __tablename__ = "audit_record"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at_ms: Mapped[int] = mapped_column(BigInteger, index=True)
    actor: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(512))
    detail: Mapped[str] = mapped_column(Text, default="")
