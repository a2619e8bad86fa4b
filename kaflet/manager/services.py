"""What the console and the JSON API do, independent of HTTP: accounts, clusters, applications,
permission requests, grants and revokes, quotas, gateway settings, each change audited.

Errors are :class:`ServiceError` subclasses carrying an HTTP status and a sentence for the user.
Rows of the brokers' change logs (kafka_user, kafka_acl) get their timestamp and are committed
under a database lock the gateway endpoints also take while they read: a broker's pull up to
``end`` never misses a row stamped at or before ``end``, whichever manager process served the
write or the pull (see kaflet.manager.changelog).
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Sequence
from typing import Any, TypeVar

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from kaflet.manager import changelog
from kaflet.manager.clusters import ClusterAccess
from kaflet.manager.db import begin_write, now_ms
from kaflet.manager.models import (
    ROLE_RANK,
    Account,
    App,
    AuditRecord,
    Authority,
    Base,
    Cluster,
    GatewayConfig,
    GatewayConfigType,
    GatewayConfigVersion,
    GatewayInstance,
    KafkaAcl,
    KafkaUser,
    KeyCheck,
    PermissionRequest,
    Quota,
    RequestStatus,
    Role,
    TopicConnection,
    TopicReport,
)
from kaflet.manager.quotas import ClusterConnection, QuotaWriteError, QuotaWriter
from kaflet.manager.security import (
    KEY_CHECK_TEXT,
    SecretBox,
    generate_password,
    hash_password,
    secret_key_hmac,
    verify_password,
)

ACCESS_READ, ACCESS_WRITE = 1, 2
ACCESS_NAMES = {1: "consume", 2: "produce", 3: "produce+consume"}
OP_CREATE, OP_UPDATE, OP_DELETE = 0, 1, 2
#: Connections reported within this window count as live (Logi-KafkaManager's 20 minutes).
LIVE_CONNECTION_MS = 20 * 60 * 1000

APP_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # no dots: <appId>.<topic> is split at the first
USERNAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
HOST_PORT = re.compile(r"^[A-Za-z0-9_.:\[\]-]+:\d{1,5}$")
MIN_ACCOUNT_PASSWORD = 10
MAX_TEXT = 1024


class ServiceError(Exception):
    """A request that cannot be done; ``status`` is the HTTP status to answer with."""

    status = 400


class InvalidInput(ServiceError):
    status = 400


class Forbidden(ServiceError):
    status = 403


class NotFound(ServiceError):
    status = 404


class Conflict(ServiceError):
    status = 409


class Unavailable(ServiceError):
    """A cluster the change must reach did not take it."""

    status = 502


# -- the brokers' change logs ------------------------------------------------------------------


def _commit_with_log(s: Session, rows: Sequence[KafkaUser | KafkaAcl]) -> None:
    """Commit the session's changes with change-log rows, stamped under the database's
    change-log lock (see kaflet.manager.changelog)."""
    if rows:
        changelog.stamp(s, rows)
    s.commit()


# -- checks ---------------------------------------------------------------------------------------


def has_role(account: Account, role: Role) -> bool:
    return ROLE_RANK[Role(account.role)] >= ROLE_RANK[role]


def require_role(account: Account, role: Role) -> None:
    if not has_role(account, role):
        raise Forbidden(f"this needs the {role.value} role")


def _text(value: str | None, what: str, limit: int = MAX_TEXT) -> str:
    value = (value or "").strip()
    if len(value) > limit:
        raise InvalidInput(f"{what} is longer than {limit} characters")
    return value


def check_topic(topic: str) -> str:
    topic = (topic or "").strip()
    if not TOPIC.match(topic) or topic in (".", ".."):
        raise InvalidInput("a topic name is 1-249 characters of letters, digits, '.', '_' and '-'")
    return topic


def check_access(access: int) -> int:
    if access not in (1, 2, 3):
        raise InvalidInput("access must be 1 (consume), 2 (produce) or 3 (both)")
    return access


def audit(s: Session, actor: str, action: str, target: str, **detail: Any) -> None:
    """Add an audit record to the session (committed with the change it describes)."""
    s.add(AuditRecord(at_ms=now_ms(), actor=actor, action=action, target=target,
                      detail=json.dumps(detail, sort_keys=True, default=str) if detail else ""))


# -- accounts -----------------------------------------------------------------------------------


def account_by_name(s: Session, username: str) -> Account | None:
    return s.scalar(select(Account).where(Account.username == username))


def create_account(s: Session, actor: Account | None, username: str, password: str, role: str) -> Account:
    """A new account (admins only; ``actor`` None: the initial admin at first start)."""
    if actor is not None:
        require_role(actor, Role.ADMIN)
    username = (username or "").strip()
    if not USERNAME.match(username):
        raise InvalidInput("a user name is 1-64 characters of letters, digits, '_', '.', '@' and '-'")
    if role not in {r.value for r in Role}:
        raise InvalidInput("role must be user, operator or admin")
    if len(password or "") < MIN_ACCOUNT_PASSWORD or len(password) > 1024:
        raise InvalidInput(f"a password has {MIN_ACCOUNT_PASSWORD} to 1024 characters")
    if account_by_name(s, username) is not None:
        raise Conflict(f"account {username} exists")
    account = Account(username=username, password_hash=hash_password(password), role=role, active=True,
                      created_ms=now_ms())
    s.add(account)
    audit(s, actor.username if actor else "system", "account.create", username, role=role)
    s.commit()
    return account


def update_account(s: Session, actor: Account, username: str, *, role: str | None = None,
                   active: bool | None = None, password: str | None = None) -> Account:
    """Change an account's role, state or password (admins; anyone their own password)."""
    account = account_by_name(s, username)
    if account is None:
        raise NotFound(f"no account {username}")
    if account.id != actor.id or role is not None or active is not None:
        require_role(actor, Role.ADMIN)
    changes: dict[str, Any] = {}
    if role is not None:
        if role not in {r.value for r in Role}:
            raise InvalidInput("role must be user, operator or admin")
        if account.id == actor.id and role != Role.ADMIN.value:
            raise InvalidInput("an admin cannot take away their own admin role")
        account.role = changes["role"] = role
    if active is not None:
        if account.id == actor.id and not active:
            raise InvalidInput("an admin cannot disable their own account")
        account.active = changes["active"] = active
    if password is not None:
        if len(password) < MIN_ACCOUNT_PASSWORD or len(password) > 1024:
            raise InvalidInput(f"a password has {MIN_ACCOUNT_PASSWORD} to 1024 characters")
        account.password_hash = hash_password(password)
        changes["password"] = "changed"
    audit(s, actor.username, "account.update", username, **changes)
    s.commit()
    return account


def change_own_password(s: Session, actor: Account, current: str, new: str) -> None:
    """Anyone's own password, given the current one (so a left-open session cannot take the account)."""
    account = s.get(Account, actor.id)
    if account is None or not verify_password(account.password_hash, current):
        raise Forbidden("the current password is wrong")
    update_account(s, account, account.username, password=new)


class KeysDiffer(ServiceError):
    """This process's secret_key or encryption_key is not the one the database is served with."""


def ensure_key_check(s: Session, secret_key: str, box: SecretBox) -> str | None:
    """Record the keys' check on the database's first start, and compare later starts with it.
    Another ``encryption_key`` is refused (:class:`KeysDiffer`): passwords stored by one process
    must be served by every other. Another ``secret_key`` is recorded, as changing it is how all
    sessions are ended, and reported (the sentence to warn with): a process still on the old key
    rejects the new sessions."""
    mac = secret_key_hmac(secret_key)
    check = s.get(KeyCheck, 1)
    if check is None:
        # An upgraded database: its stored passwords say which encryption_key it has.
        stored = s.scalar(select(App.password_enc).limit(1))
        if stored is not None:
            try:
                box.decrypt(stored)
            except ValueError:
                raise KeysDiffer("the stored application passwords cannot be decrypted with this "
                                 "encryption_key; start with the key they were stored under") from None
        s.add(KeyCheck(id=1, secret_key_hmac=mac, encryption_key_token=box.encrypt(KEY_CHECK_TEXT)))
        s.commit()
        return None
    try:
        box.decrypt(check.encryption_key_token)
    except ValueError:
        raise KeysDiffer("this database is served with another encryption_key: every manager process on one "
                         "database needs the same one (copy it from the first process's manager.toml or "
                         "<data_dir>/secrets.toml)") from None
    if hmac.compare_digest(check.secret_key_hmac, mac):
        return None
    check.secret_key_hmac = mac
    s.commit()
    return ("secret_key differs from the one this database was served with before: sessions signed with the "
            "old one end, and every manager process on the database needs this same secret_key")


def ensure_initial_admin(s: Session) -> str | None:
    """Create the ``admin`` account when there is no account at all; its password (else None)."""
    if s.scalar(select(func.count()).select_from(Account)):
        return None
    password = generate_password(20)
    create_account(s, None, "admin", password, Role.ADMIN.value)
    return password


# -- clusters -------------------------------------------------------------------------------------


def check_servers(value: str, what: str) -> str:
    servers = [x.strip() for x in (value or "").split(",") if x.strip()]
    if not servers or not all(HOST_PORT.match(x) for x in servers) or len(value) > 1024:
        raise InvalidInput(f"{what} is a comma-separated list of host:port")
    return ",".join(servers)


def register_cluster(s: Session, actor: Account, box: SecretBox, *, name: str, bootstrap_servers: str,
                     cluster_id: int | None = None, zookeeper_connect: str | None = None,
                     security_protocol: str = "PLAINTEXT", sasl_mechanism: str | None = None,
                     sasl_username: str | None = None, sasl_password: str | None = None) -> Cluster:
    """Register a cluster; ``cluster_id`` is the ``cluster.id`` its brokers use (default: next free)."""
    require_role(actor, Role.ADMIN)
    name = _text(name, "name", 128)
    if not name:
        raise InvalidInput("a cluster needs a name")
    bootstrap = check_servers(bootstrap_servers, "bootstrap servers")
    zk = _text(zookeeper_connect, "ZooKeeper connect") or None
    if zk is not None:
        hosts, _, chroot = zk.partition("/")
        check_servers(hosts, "ZooKeeper connect")
    protocol = (security_protocol or "PLAINTEXT").strip().upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise InvalidInput("security protocol is PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
    mechanism = (sasl_mechanism or "").strip().upper() or None
    if protocol.startswith("SASL_"):
        if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512") or not sasl_username:
            raise InvalidInput("a SASL cluster needs a mechanism (PLAIN, SCRAM-SHA-256/512), user name and password")
    else:
        mechanism = sasl_username = sasl_password = None
    if cluster_id is not None and (cluster_id < 0 or cluster_id > 2**31 - 1):
        raise InvalidInput("a cluster id is an integer from 0 to 2147483647")
    if s.scalar(select(Cluster).where(Cluster.name == name)) is not None:
        raise Conflict(f"a cluster named {name} exists")
    if cluster_id is not None and s.get(Cluster, cluster_id) is not None:
        raise Conflict(f"cluster id {cluster_id} is taken")
    cluster = Cluster(name=name, bootstrap_servers=bootstrap, zookeeper_connect=zk, security_protocol=protocol,
                      sasl_mechanism=mechanism, sasl_username=_text(sasl_username, "SASL user name", 255) or None,
                      sasl_password_enc=box.encrypt(sasl_password) if sasl_password else None, created_ms=now_ms())
    if cluster_id is not None:
        cluster.id = cluster_id
    s.add(cluster)
    try:
        s.flush()
    except IntegrityError:
        s.rollback()
        raise Conflict("that cluster id or name is taken") from None
    audit(s, actor.username, "cluster.register", f"cluster {cluster.id}", name=name, bootstrap=bootstrap,
          zookeeper=zk, security_protocol=protocol)
    s.commit()
    return cluster


def cluster_connection(cluster: Cluster, box: SecretBox) -> ClusterConnection:
    """The admin connection settings of a cluster (librdkafka-style keys)."""
    conf: dict[str, Any] = {"security.protocol": cluster.security_protocol}
    if cluster.sasl_mechanism:
        conf.update({"sasl.mechanism": cluster.sasl_mechanism, "sasl.username": cluster.sasl_username or "",
                     "sasl.password": box.decrypt(cluster.sasl_password_enc) if cluster.sasl_password_enc else ""})
    return ClusterConnection(cluster.bootstrap_servers, conf)


def cluster_access(cluster: Cluster, box: SecretBox) -> ClusterAccess:
    """How the console's observer reaches a cluster (the same admin connection as quotas)."""
    return ClusterAccess(cluster.bootstrap_servers, cluster.zookeeper_connect or None, cluster.security_protocol,
                         cluster.sasl_mechanism, cluster.sasl_username,
                         box.decrypt(cluster.sasl_password_enc) if cluster.sasl_password_enc else None)


def get_cluster(s: Session, cluster_id: int) -> Cluster:
    cluster = s.get(Cluster, cluster_id)
    if cluster is None:
        raise NotFound(f"no cluster {cluster_id}")
    return cluster


def delete_cluster(s: Session, actor: Account, cluster_id: int) -> None:
    """Forget a cluster with its permissions, requests and quotas (admins). Its brokers get a
    revoke row for every permission, so none outlives the registration; quotas already written
    to the cluster stay there (it may be gone), which the console says."""
    require_role(actor, Role.ADMIN)
    cluster = get_cluster(s, cluster_id)
    rows: list[KafkaUser | KafkaAcl] = [
        KafkaAcl(app_id=a.app_id, cluster_id=cluster_id, topic_name=a.topic_name, access=a.access,
                 operation=OP_DELETE)
        for a in s.scalars(select(Authority).where(Authority.cluster_id == cluster_id))]
    s.execute(delete(Authority).where(Authority.cluster_id == cluster_id))
    s.execute(delete(Quota).where(Quota.cluster_id == cluster_id))
    s.execute(delete(PermissionRequest).where(PermissionRequest.cluster_id == cluster_id))
    s.execute(delete(TopicReport).where(TopicReport.cluster_id == cluster_id))
    s.delete(cluster)
    audit(s, actor.username, "cluster.delete", f"cluster {cluster_id}", name=cluster.name,
          permissions_revoked=len(rows))
    _commit_with_log(s, rows)


def set_topic_report(s: Session, actor: Account, cluster_id: int, topic: str, start_ms: int, end_ms: int) -> TopicReport:
    """Have the cluster's brokers record per-application metrics of ``topic`` between the two
    times (the jmx topics list they poll); operators."""
    require_role(actor, Role.OPERATOR)
    get_cluster(s, cluster_id)
    topic = check_topic(topic)
    if start_ms < 0 or end_ms <= start_ms:
        raise InvalidInput("the report window needs a start before its end")
    row = s.scalar(select(TopicReport).where(TopicReport.cluster_id == cluster_id, TopicReport.topic_name == topic))
    if row is None:
        row = TopicReport(cluster_id=cluster_id, topic_name=topic)
        s.add(row)
    row.start_time, row.end_time = start_ms, end_ms
    audit(s, actor.username, "topic-report.set", f"{cluster_id}/{topic}", start_ms=start_ms, end_ms=end_ms)
    s.commit()
    return row


_R = TypeVar("_R", bound=Base)


def _row(s: Session, model: type[_R], key: int, what: str) -> _R:
    """The row of ``model`` with primary key ``key``; NotFound ("no <what> <key>") if none."""
    row = s.get(model, key)
    if row is None:
        raise NotFound(f"no {what} {key}")
    return row


def delete_topic_report(s: Session, actor: Account, report_id: int) -> None:
    require_role(actor, Role.OPERATOR)
    row = _row(s, TopicReport, report_id, "topic report")
    s.delete(row)
    audit(s, actor.username, "topic-report.delete", f"{row.cluster_id}/{row.topic_name}")
    s.commit()


# -- applications ---------------------------------------------------------------------------------


def get_app(s: Session, app_id: str) -> App:
    app = s.scalar(select(App).where(App.app_id == app_id))
    if app is None:
        raise NotFound(f"no application {app_id}")
    return app


def can_manage(account: Account, app: App) -> bool:
    """Owners and operators manage an application."""
    return has_role(account, Role.OPERATOR) or any(o.id == account.id for o in app.owners)


def get_managed_app(s: Session, actor: Account, app_id: str) -> App:
    app = get_app(s, app_id)
    if not can_manage(actor, app):
        raise Forbidden(f"you do not own application {app_id}")
    return app


def visible_apps(s: Session, actor: Account) -> list[App]:
    query = select(App).order_by(App.app_id)
    if not has_role(actor, Role.OPERATOR):
        query = query.join(App.owners).where(Account.id == actor.id)
    return list(s.scalars(query))


def _owners(s: Session, actor: Account, names: Sequence[str]) -> list[Account]:
    me = s.get(Account, actor.id)  # the session's own instance (``actor`` comes from another)
    if me is None:
        raise Forbidden("your account no longer exists")
    owners = {me.username: me}
    for name in names:
        name = name.strip()
        if not name or name in owners:
            continue
        account = account_by_name(s, name)
        if account is None:
            raise InvalidInput(f"no account {name} to make an owner")
        owners[name] = account
    return list(owners.values())


def create_app(s: Session, actor: Account, box: SecretBox, app_id: str, description: str = "",
               owners: Sequence[str] = ()) -> tuple[App, str]:
    """A new application and its generated password (shown once, then only stored encrypted)."""
    app_id = (app_id or "").strip()
    if not APP_ID.match(app_id):
        raise InvalidInput("an appId is 1-64 characters of letters, digits, '_' and '-'")
    if s.scalar(select(App).where(App.app_id == app_id)) is not None:
        raise Conflict(f"application {app_id} exists")
    # The change log outlives deleted applications: a new one of the same name starts anew.
    password = generate_password()
    encrypted = box.encrypt(password)
    app = App(app_id=app_id, password_enc=encrypted, description=_text(description, "description"),
              super_user=False, created_by=actor.username, created_ms=now_ms(), owners=_owners(s, actor, owners))
    s.add(app)
    audit(s, actor.username, "app.create", app_id, owners=[o.username for o in app.owners])
    try:
        _commit_with_log(s, [KafkaUser(app_id=app_id, password_enc=encrypted, user_type=0, operation=OP_CREATE)])
    except IntegrityError:
        s.rollback()
        raise Conflict(f"application {app_id} exists") from None
    return app, password


def update_app(s: Session, actor: Account, app_id: str, description: str, owners: Sequence[str]) -> App:
    app = get_managed_app(s, actor, app_id)
    app.description = _text(description, "description")
    app.owners = _owners(s, actor, owners)
    audit(s, actor.username, "app.update", app_id, owners=[o.username for o in app.owners])
    s.commit()
    return app


def reset_app_password(s: Session, actor: Account, box: SecretBox, app_id: str) -> str:
    """A new password for the application (the brokers pick it up as an update row)."""
    app = get_managed_app(s, actor, app_id)
    password = generate_password()
    app.password_enc = box.encrypt(password)
    audit(s, actor.username, "app.reset-password", app_id)
    _commit_with_log(s, [KafkaUser(app_id=app_id, password_enc=app.password_enc,
                                   user_type=1 if app.super_user else 0, operation=OP_UPDATE)])
    return password


def set_super_user(s: Session, actor: Account, app_id: str, super_user: bool) -> App:
    """Make an application a super user of every cluster, or a normal one again (admins). The
    brokers get an update row with the user type (Logi-Kafka's ``userType`` 1), and a super
    user may do everything there, as Logi-Kafka's ``dkm_admin`` app."""
    require_role(actor, Role.ADMIN)
    app = get_managed_app(s, actor, app_id)
    if app.super_user == super_user:
        return app
    app.super_user = super_user
    audit(s, actor.username, "app.super-user", app_id, super_user=super_user)
    _commit_with_log(s, [KafkaUser(app_id=app_id, password_enc=app.password_enc, user_type=1 if super_user else 0,
                                   operation=OP_UPDATE)])
    return app


def live_connections(s: Session, app_id: str | None = None, cluster_id: int | None = None,
                     topic: str | None = None) -> list[TopicConnection]:
    """Connections the brokers reported within the last 20 minutes."""
    query = select(TopicConnection).where(TopicConnection.create_time >= now_ms() - LIVE_CONNECTION_MS)
    if app_id is not None:
        query = query.where(TopicConnection.app_id == app_id)
    if cluster_id is not None:
        query = query.where(TopicConnection.cluster_id == cluster_id)
    if topic is not None:
        query = query.where(TopicConnection.topic_name == topic)
    return list(s.scalars(query.order_by(TopicConnection.create_time.desc())))


def delete_app(s: Session, actor: Account, writer: QuotaWriter, box: SecretBox, app_id: str) -> None:
    """Delete an application: its quotas leave the clusters, its permissions and user are
    revoked on the brokers. Refused while it has live connections (as Logi-KafkaManager does)."""
    app = get_managed_app(s, actor, app_id)
    live = live_connections(s, app_id)
    if live:
        raise Conflict(f"application {app_id} has {len(live)} connection(s) reported in the last 20 minutes; "
                       "stop its clients first")
    for quota in s.scalars(select(Quota).where(Quota.app_id == app_id)):
        cluster = get_cluster(s, quota.cluster_id)
        try:
            writer.write(cluster_connection(cluster, box), app_id, quota.topic_name, None, None)
        except QuotaWriteError as exc:
            raise Unavailable(f"the quota of {app_id} on {quota.topic_name} could not be removed from "
                              f"cluster {cluster.id}: {exc}") from None
    rows: list[KafkaUser | KafkaAcl] = [
        KafkaAcl(app_id=app_id, cluster_id=a.cluster_id, topic_name=a.topic_name, access=a.access,
                 operation=OP_DELETE)
        for a in s.scalars(select(Authority).where(Authority.app_id == app_id))]
    rows.append(KafkaUser(app_id=app_id, password_enc=app.password_enc, user_type=1 if app.super_user else 0,
                          operation=OP_DELETE))
    s.execute(delete(Authority).where(Authority.app_id == app_id))
    s.execute(delete(Quota).where(Quota.app_id == app_id))
    s.execute(delete(PermissionRequest).where(PermissionRequest.app_id == app_id))
    s.delete(app)
    audit(s, actor.username, "app.delete", app_id)
    _commit_with_log(s, rows)


# -- permissions ----------------------------------------------------------------------------------


def request_permission(s: Session, actor: Account, app_id: str, cluster_id: int, topic: str, access: int,
                       reason: str = "") -> PermissionRequest:
    """Ask for produce (2) and/or consume (1) on a topic; an operator decides."""
    get_managed_app(s, actor, app_id)
    get_cluster(s, cluster_id)
    topic, access = check_topic(topic), check_access(access)
    pending = s.scalar(select(PermissionRequest).where(
        PermissionRequest.app_id == app_id, PermissionRequest.cluster_id == cluster_id,
        PermissionRequest.topic_name == topic, PermissionRequest.access == access,
        PermissionRequest.status == RequestStatus.PENDING.value))
    if pending is not None:
        raise Conflict(f"request {pending.id} for the same permission is waiting")
    req = PermissionRequest(app_id=app_id, cluster_id=cluster_id, topic_name=topic, access=access,
                            reason=_text(reason, "reason"), status=RequestStatus.PENDING.value,
                            requested_by=actor.username, requested_ms=now_ms())
    s.add(req)
    s.flush()
    audit(s, actor.username, "permission.request", f"{app_id} on {cluster_id}/{topic}", request=req.id,
          access=ACCESS_NAMES[access])
    s.commit()
    return req


def _pending(s: Session, request_id: int) -> PermissionRequest:
    """The waiting request, locked until the commit (two operators deciding it at once, in two
    processes, must not both act on it)."""
    begin_write(s)
    req = s.get(PermissionRequest, request_id, with_for_update=True)
    if req is None:
        raise NotFound(f"no request {request_id}")
    if req.status != RequestStatus.PENDING.value:
        raise Conflict(f"request {request_id} is already {req.status}")
    return req


def _authority(s: Session, app_id: str, cluster_id: int, topic: str) -> Authority | None:
    """The application's permission on the topic, locked until the commit: the change decided on
    it (a merge, a revoke) must not be made on a value another request changes meanwhile."""
    begin_write(s)
    return s.scalar(select(Authority).where(Authority.app_id == app_id, Authority.cluster_id == cluster_id,
                                            Authority.topic_name == topic).with_for_update())


def grant(s: Session, actor: str, app_id: str, cluster_id: int, topic: str, access: int) -> Authority:
    """OR ``access`` into the application's permission (permissions only grow); a change adds a
    grant row carrying the merged access. Not committed."""
    current = _authority(s, app_id, cluster_id, topic)
    if current is None:
        current = Authority(app_id=app_id, cluster_id=cluster_id, topic_name=topic, access=0, modified_ms=now_ms())
        s.add(current)
    merged = current.access | access
    if merged != current.access:
        current.access = merged
        current.modified_ms = now_ms()
        audit(s, actor, "permission.grant", f"{app_id} on {cluster_id}/{topic}", access=ACCESS_NAMES[merged])
    return current


def approve_request(s: Session, actor: Account, request_id: int, reason: str = "") -> Authority:
    """Approve a waiting request (operators): the permission is granted to the application."""
    require_role(actor, Role.OPERATOR)
    req = _pending(s, request_id)
    req.status, req.decided_by, req.decided_ms = RequestStatus.APPROVED.value, actor.username, now_ms()
    req.decision_reason = _text(reason, "reason")
    held = _authority(s, req.app_id, req.cluster_id, req.topic_name)
    before = held.access if held is not None else 0
    authority = grant(s, actor.username, req.app_id, req.cluster_id, req.topic_name, req.access)
    audit(s, actor.username, "permission.approve", f"request {req.id}", app=req.app_id, reason=req.decision_reason)
    rows = [] if authority.access == before else [
        KafkaAcl(app_id=req.app_id, cluster_id=req.cluster_id, topic_name=req.topic_name,
                 access=authority.access, operation=OP_CREATE)]
    try:
        _commit_with_log(s, rows)
    except IntegrityError:
        # Another request (another process) created the same permission at the same moment.
        s.rollback()
        raise Conflict(f"the permission of {req.app_id} on {req.topic_name} was changed at the same moment; "
                       "approve again") from None
    return authority


def reject_request(s: Session, actor: Account, request_id: int, reason: str) -> PermissionRequest:
    """Reject a waiting request (operators); a reason is required."""
    require_role(actor, Role.OPERATOR)
    req = _pending(s, request_id)
    reason = _text(reason, "reason")
    if not reason:
        raise InvalidInput("a rejection needs a reason")
    req.status, req.decided_by, req.decided_ms = RequestStatus.REJECTED.value, actor.username, now_ms()
    req.decision_reason = reason
    audit(s, actor.username, "permission.reject", f"request {req.id}", app=req.app_id, reason=reason)
    s.commit()
    return req


def cancel_request(s: Session, actor: Account, request_id: int) -> PermissionRequest:
    """The applicant (or an operator) withdraws a waiting request."""
    req = _pending(s, request_id)
    get_managed_app(s, actor, req.app_id)
    req.status, req.decided_by, req.decided_ms = RequestStatus.CANCELLED.value, actor.username, now_ms()
    audit(s, actor.username, "permission.cancel", f"request {req.id}", app=req.app_id)
    s.commit()
    return req


def revoke(s: Session, actor: Account, app_id: str, cluster_id: int, topic: str, access: int,
           reason: str = "") -> int:
    """Take ``access`` bits away (owners or operators); the revoke row carries only those bits.
    The access left."""
    get_managed_app(s, actor, app_id)
    check_access(access)
    current = _authority(s, app_id, cluster_id, topic)
    if current is None or current.access & access != access:
        have = ACCESS_NAMES.get(current.access if current else 0, "nothing")
        raise InvalidInput(f"{app_id} has {have} on {topic}: cannot revoke {ACCESS_NAMES[access]}")
    left = current.access ^ access
    if left:
        current.access, current.modified_ms = left, now_ms()
    else:
        s.delete(current)
    audit(s, actor.username, "permission.revoke", f"{app_id} on {cluster_id}/{topic}",
          revoked=ACCESS_NAMES[access], left=ACCESS_NAMES.get(left, "nothing"), reason=_text(reason, "reason"))
    _commit_with_log(s, [KafkaAcl(app_id=app_id, cluster_id=cluster_id, topic_name=topic, access=access,
                                  operation=OP_DELETE)])
    return left


def authorities(s: Session, app_id: str | None = None) -> list[Authority]:
    query = select(Authority).order_by(Authority.app_id, Authority.cluster_id, Authority.topic_name)
    if app_id is not None:
        query = query.where(Authority.app_id == app_id)
    return list(s.scalars(query))


# -- quotas -------------------------------------------------------------------------------------


def check_rate(value: float | None, what: str) -> float | None:
    if value is None:
        return None
    if not (value > 0) or value > 1e15:
        raise InvalidInput(f"{what} is a positive number of bytes per second (empty: unlimited)")
    return float(value)


def set_quota(s: Session, actor: Account, writer: QuotaWriter, box: SecretBox, app_id: str, cluster_id: int,
              topic: str, producer_byte_rate: float | None, consumer_byte_rate: float | None) -> Quota | None:
    """Write the application's quota on the topic to the cluster, then record it (operators).
    Both rates None removes the quota."""
    require_role(actor, Role.OPERATOR)
    get_app(s, app_id)
    cluster = get_cluster(s, cluster_id)
    topic = check_topic(topic)
    produce = check_rate(producer_byte_rate, "the produce rate")
    consume = check_rate(consumer_byte_rate, "the consume rate")
    try:
        writer.write(cluster_connection(cluster, box), app_id, topic, produce, consume)
    except QuotaWriteError as exc:
        raise Unavailable(f"cluster {cluster_id} did not take the quota: {exc}") from None
    quota = s.scalar(select(Quota).where(Quota.app_id == app_id, Quota.cluster_id == cluster_id,
                                         Quota.topic_name == topic))
    if produce is None and consume is None:
        if quota is not None:
            s.delete(quota)
        quota = None
    else:
        if quota is None:
            quota = Quota(app_id=app_id, cluster_id=cluster_id, topic_name=topic, modified_ms=now_ms())
            s.add(quota)
        quota.producer_byte_rate, quota.consumer_byte_rate, quota.modified_ms = produce, consume, now_ms()
    audit(s, actor.username, "quota.set", f"{app_id} on {cluster_id}/{topic}", producer_byte_rate=produce,
          consumer_byte_rate=consume)
    s.commit()
    return quota


# -- gateway (discovery) settings ---------------------------------------------------------------


def set_gateway_config(s: Session, actor: Account, kind: str, name: str, value: str,
                       description: str = "") -> GatewayConfig:
    """Insert or update a discovery setting; its version becomes the type's highest + 1."""
    require_role(actor, Role.ADMIN)
    if kind not in {t.value for t in GatewayConfigType}:
        raise InvalidInput(f"type is one of {', '.join(t.value for t in GatewayConfigType)}")
    name, value = _text(name, "name", 255), _text(value, "value", 4096)
    if kind == GatewayConfigType.SD_CLUSTER_ID:
        if not name.isdigit():
            raise InvalidInput("an SD_CLUSTER_ID setting is named by the numeric cluster id")
        value = check_servers(value, "the value")
    elif kind in (GatewayConfigType.SD_QUEUE_SIZE, GatewayConfigType.SD_APP_RATE, GatewayConfigType.SD_IP_RATE):
        name = kind
        if not value.isdigit():
            raise InvalidInput("the value is a whole number")
    elif not name or not value.isdigit():
        raise InvalidInput("an SD_SP_RATE setting is named by an appId or address, its value a whole number")
    version = _next_gateway_version(s, kind)
    row = s.scalar(select(GatewayConfig).where(GatewayConfig.type == kind, GatewayConfig.name == name))
    if row is None:
        row = GatewayConfig(type=kind, name=name)
        s.add(row)
    row.value, row.version, row.modified_ms = value, version, now_ms()
    row.description = _text(description, "description")
    audit(s, actor.username, "gateway-config.set", f"{kind}/{name}", value=value, version=version)
    s.commit()
    return row


def delete_gateway_config(s: Session, actor: Account, config_id: int) -> None:
    """Remove a discovery setting and raise its type's version, so a gateway's next pull gets the
    type's rows without it (Logi-KafkaManager does not raise it: its gateways miss deletions)."""
    require_role(actor, Role.ADMIN)
    row = _row(s, GatewayConfig, config_id, "gateway setting")
    version = _next_gateway_version(s, row.type)
    s.delete(row)
    audit(s, actor.username, "gateway-config.delete", f"{row.type}/{row.name}", version=version)
    s.commit()


def forget_gateway_instance(s: Session, actor: Account, row_id: int) -> None:
    """Drop a gateway process from the console's list (one that pulls again comes back)."""
    require_role(actor, Role.OPERATOR)
    row = _row(s, GatewayInstance, row_id, "gateway process")
    s.delete(row)
    audit(s, actor.username, "gateway-instance.forget", f"{row.address} {row.instance_id}".strip(),
          last_pull_ms=row.last_pull_ms)
    s.commit()


def _next_gateway_version(s: Session, kind: str) -> int:
    """Raise ``kind``'s version (`GatewayConfigVersion`) and return it. Under the change-log lock,
    so versions follow commit order across processes: a gateway that saw version N of the type
    must not miss a change committed later under a version at or below N."""
    changelog.lock(s)
    held = s.get(GatewayConfigVersion, kind)
    newest = s.scalar(select(func.max(GatewayConfig.version)).where(GatewayConfig.type == kind)) or 0
    version = max(held.version if held is not None else 0, newest) + 1
    if held is None:
        s.add(GatewayConfigVersion(type=kind, version=version))
    else:
        held.version = version
    return version
