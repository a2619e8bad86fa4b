"""Topic and broker configs at run time: describe, alter, store, and apply without a restart.

Storage is Kafka's: overrides live in ``/config/topics/<t>``, ``/config/brokers/<id>`` and
``/config/brokers/<default>`` as ``{"version":1,"config":{...}}``, and every change is announced
by a sequential ``/config/changes/config_change_<seq>`` node (``{"version":2,"entity_path":...}``).
Every broker watches ``/config/changes`` and re-reads the entity a notification names, so a
change made through any broker (or written by Kafka's own tools) reaches all of them. The
broker that made a change also applies it at once, so a client that alters and then produces
sees the new value on its very next request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kaflet.metadata import notifications, zkdata
from kaflet.metadata.errors import AdminError
from kaflet.metadata.topic_names import validate as validate_topic_name
from kaflet.metadata.tree import NodeExistsError, NoNodeError, WatchEvent
from kaflet.protocol.errors import ErrorCode
from kaflet.quota.replication import ALTER_LOG_DIRS_RATE, FOLLOWER_RATE, LEADER_RATE, ReplicationQuotas
from kaflet.server.config import BrokerConfig, ConfigError
from kaflet.server.dynamic_config import (
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    ConfigEntry,
    ConfigRequestError,
    DynamicBrokerConfig,
    apply_incremental,
    describe_broker,
    describe_broker_default,
    describe_topic,
    effective_cleaner_config,
    effective_topic_defaults,
    report_dynamic_key,
    validate_broker_update,
)
from kaflet.server.topic_config import InvalidConfigError, report_not_enforced, validate_topic_configs

if TYPE_CHECKING:
    from kaflet.controller.controller import KafkaController
    from kaflet.log.cleaner import CleanerConfig
    from kaflet.log.log_manager import LogManager
    from kaflet.metadata.metadata_cache import MetadataCache
    from kaflet.metadata.tree import MetadataTree
    from kaflet.quota.store import QuotaConfigStore

UNCLEAN = "unclean.leader.election.enable"


def _is_true(value: str | None) -> bool:
    return value is not None and value.strip().lower() == "true"


log = logging.getLogger("kaflet.configs")

_TOPICS = zkdata.ConfigType.TOPIC
# ResourceType names, as Kafka's messages print them.
_RESOURCE_NAMES = {2: "TOPIC", 4: "BROKER", 8: "BROKER_LOGGER", 16: "CLIENT_METRICS", 32: "GROUP"}
_BROKERS = zkdata.ConfigType.BROKER
# Entities whose changes go to the quota store (kaflet/quota/store.py).
_QUOTA_ENTITIES = (zkdata.ConfigType.USER, zkdata.ConfigType.CLIENT, zkdata.ConfigType.IP)


class ConfigAdmin:
    """The broker's config service (the parts of Kafka's AdminManager, DynamicBrokerConfig and
    ConfigChangeListener that concern topics and brokers)."""

    def __init__(self, config: BrokerConfig, broker_id: int, tree: MetadataTree, metadata: MetadataCache,
                 quota_configs: QuotaConfigStore) -> None:
        self.config = config
        self.broker_id = broker_id
        self.tree = tree
        self.metadata = metadata
        self.quota_configs = quota_configs
        #: The logs that topic configs and broker-level topic defaults reach. The log manager
        #: opens the logs with this service's configs, so the broker sets it once they are open.
        self.log_manager: LogManager | None = None
        #: The controller that unclean.leader.election.enable reaches; set once the broker made it.
        self.controller: KafkaController | None = None
        self.dynamic = DynamicBrokerConfig(broker_id, config.originals)
        #: Each topic's ``/config/topics/<t>`` overrides, for the logs of the topics hosted here.
        self.topic_overrides: dict[str, dict[str, str]] = {}
        self._last_seq = -1
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # The cleaner settings to restart the log cleaner with, and the task doing it.
        self._cleaner_target: CleanerConfig | None = None
        self._cleaner_task: asyncio.Task[None] | None = None
        #: The leader and follower replication quotas (KIP-73), fed by the dynamic rate configs
        #: and the topics' throttled-replicas configs.
        self.replication_quotas = ReplicationQuotas(broker_id, config["replication.quota.window.num"],
                                                    config["replication.quota.window.size.seconds"] * 1000)

    # ------------------------------------------------------------------ start-up and defaults

    async def load(self) -> None:
        """Read the dynamic broker configs (before the logs open, so they start with them)."""
        self.dynamic.update(default=await self._read(_BROKERS, zkdata.DEFAULT_ENTITY),
                            per_broker=await self._read(_BROKERS, str(self.broker_id)))
        if self.dynamic.default or self.dynamic.per_broker:
            log.info("dynamic broker configs: cluster default %s, broker %d %s",
                     self.dynamic.default, self.broker_id, self.dynamic.per_broker)
        self._report_dynamic()
        self._refresh_replication_quotas()

    def _report_dynamic(self) -> None:
        """Log, once per key, the dynamic broker configs kaflet stores but does not apply."""
        for key in sorted({*self.dynamic.default, *self.dynamic.per_broker}):
            report_dynamic_key(key)

    def topic_defaults(self) -> dict[str, str]:
        """Topic-config defaults: server.properties, then the dynamic broker configs."""
        return effective_topic_defaults(self.config.topic_defaults(), self.dynamic)

    def topic_config(self, topic: str) -> Mapping[str, str]:
        """A topic's overrides as last read (the log manager's ``topic_config``)."""
        return self.topic_overrides.get(topic, {})

    async def load_topic_configs(self, topics: Iterable[str]) -> None:
        """Read the overrides of topics whose logs are about to be opened or created, as Kafka's
        fetchLogConfig does before it creates a log (so a topic recreated under the same name
        gets its new configs); later changes come by /config/changes."""
        names = sorted(set(topics))
        found = await asyncio.gather(*(self._read(_TOPICS, name) for name in names))
        for name, overrides in zip(names, found, strict=True):
            self._set_topic_overrides(name, overrides)

    def forget_topic(self, topic: str) -> None:
        """The topic is gone: drop its overrides."""
        self.topic_overrides.pop(topic, None)
        self.replication_quotas.update_topic(topic, None)

    def _set_topic_overrides(self, topic: str, overrides: dict[str, str]) -> None:
        self.topic_overrides[topic] = overrides
        self.replication_quotas.update_topic(topic, overrides)
        report_not_enforced(overrides)

    def cleaner_config(self, dynamic: DynamicBrokerConfig | None = None) -> CleanerConfig:
        """The log cleaner's settings with the dynamic ``log.cleaner.*`` configs (ConfigError)."""
        return effective_cleaner_config(self.config, dynamic or self.dynamic)

    def topic_entries(self, overrides: Mapping[str, str]) -> list[ConfigEntry]:
        """Every config of a topic with these overrides, as DescribeConfigs reports it."""
        return describe_topic(self.dynamic, self.topic_defaults(), overrides)

    # ------------------------------------------------------------------ tree I/O

    async def _read(self, entity_type: str, name: str) -> dict[str, str]:
        got = await self.tree.get_or_none(zkdata.config_entity_path(entity_type, name))
        return zkdata.parse_entity_config(got[0]) if got else {}

    async def _write(self, entity_type: str, name: str, configs: Mapping[str, str]) -> None:
        """Set-or-create the entity's config node, then announce the change (as AdminZkClient)."""
        tree = self.tree
        path = zkdata.config_entity_path(entity_type, name)
        data = zkdata.entity_config_json(dict(configs))
        try:
            await tree.set(path, data)
        except NoNodeError:
            try:
                await tree.create(path, data, make_parents=True)
            except NodeExistsError:
                await tree.set(path, data)
        await tree.create(zkdata.config_change_prefix(), zkdata.config_change_json(f"{entity_type}/{name}"),
                          sequential=True, make_parents=True)

    # ------------------------------------------------------------------ resources

    def _broker_entity(self, name: str | None) -> str:
        """The /config/brokers child a BROKER resource name means ("" is the cluster default)."""
        if not name:
            return zkdata.DEFAULT_ENTITY
        try:
            broker_id = int(name)
        except ValueError:
            raise ConfigRequestError(ErrorCode.INVALID_REQUEST,
                                     f"Broker id must be an integer, but it is: {name}") from None
        if broker_id != self.broker_id:
            raise ConfigRequestError(
                ErrorCode.INVALID_REQUEST,
                f"Unexpected broker id, expected {self.broker_id} or empty string, but received {name}")
        return str(broker_id)

    def _check_topic(self, name: str, message: bool) -> None:
        try:
            validate_topic_name(name)
        except AdminError as exc:
            raise ConfigRequestError(exc.error_code, exc.message) from None
        if name not in self.metadata.topics:
            raise ConfigRequestError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                     f"The topic '{name}' does not exist." if message else None)

    @staticmethod
    def _unsupported(resource_type: int, api: str) -> ConfigRequestError:
        resource_type = _RESOURCE_NAMES.get(resource_type, "UNKNOWN")  # type: ignore[assignment]
        if api == "describe":
            return ConfigRequestError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {resource_type}")
        return ConfigRequestError(
            ErrorCode.INVALID_REQUEST,
            f"AlterConfigs is only supported for topics and brokers, but resource type is {resource_type}")

    async def describe(self, resource_type: int, name: str, keys: Sequence[str] | None) -> list[ConfigEntry]:
        """The configs of one resource; raises ConfigRequestError."""
        if resource_type == RESOURCE_TOPIC:
            self._check_topic(name, message=False)
            overrides = await self._read(_TOPICS, name)
            return describe_topic(self.dynamic, self.topic_defaults(), overrides, keys)
        if resource_type == RESOURCE_BROKER:
            entity = self._broker_entity(name)
            if entity == zkdata.DEFAULT_ENTITY:
                return describe_broker_default(self.dynamic, keys)
            return describe_broker(self.dynamic, keys)
        raise self._unsupported(resource_type, "describe")

    async def alter(self, resource_type: int, name: str, configs: Mapping[str, str | None],
                    validate_only: bool) -> None:
        """AlterConfigs: the given map replaces the resource's whole stored config."""
        nulls = [k for k, v in configs.items() if v is None]
        if nulls and resource_type in (RESOURCE_TOPIC, RESOURCE_BROKER):
            raise ConfigRequestError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {','.join(nulls)}")
        await self._store(resource_type, name, lambda _current: dict(configs), validate_only)  # type: ignore[arg-type]

    async def incremental_alter(self, resource_type: int, name: str, ops: Sequence[tuple[str, int, str | None]],
                                validate_only: bool) -> None:
        """IncrementalAlterConfigs: SET, DELETE, APPEND, SUBTRACT on the stored config."""
        broker = resource_type == RESOURCE_BROKER
        await self._store(resource_type, name, lambda current: apply_incremental(current, ops, broker=broker),
                          validate_only)

    async def _store(self, resource_type: int, name: str, change: Any, validate_only: bool) -> None:
        if resource_type == RESOURCE_TOPIC:
            self._check_topic(name, message=True)
            new = change(await self._read(_TOPICS, name))
            try:
                new = validate_topic_configs(new, self.topic_defaults())
            except InvalidConfigError as exc:
                raise ConfigRequestError(ErrorCode.INVALID_CONFIG, str(exc)) from None
            if validate_only:
                return
            log.info("updating topic %s with new configuration: %s", name, new)
            await self._write(_TOPICS, name, new)
            await self.apply_entity(f"{_TOPICS}/{name}")
        elif resource_type == RESOURCE_BROKER:
            entity = self._broker_entity(name)
            per_broker = entity != zkdata.DEFAULT_ENTITY
            new = validate_broker_update(change(await self._read(_BROKERS, entity)), name, per_broker,
                                         password_encoder="password.encoder.secret" in self.config.originals)
            self._check_cleaner_update(name, per_broker, new)
            if validate_only:
                return
            log.info("updating %s with new configuration: %s",
                     f"broker {entity}" if per_broker else "the cluster-wide broker defaults", new)
            await self._write(_BROKERS, entity, new)
            await self.apply_entity(f"{_BROKERS}/{entity}")
        else:
            raise self._unsupported(resource_type, "alter")

    def _check_cleaner_update(self, name: str, per_broker: bool, new: Mapping[str, str]) -> None:
        """Kafka's LogCleaner.validateReconfiguration of the settings this broker's cleaner
        would get (a refusal is INVALID_REQUEST, as Kafka's "Invalid dynamic configuration")."""
        cleaner = self.log_manager.cleaner if self.log_manager is not None else None
        if cleaner is None:
            return  # log.cleaner.enable=false: no cleaner to reconfigure, as in Kafka
        after = DynamicBrokerConfig(self.dynamic.broker_id, {})
        after.update(default=new if not per_broker else self.dynamic.default,
                     per_broker=new if per_broker else self.dynamic.per_broker)
        current = self._cleaner_target or cleaner.config
        try:
            wanted = self.cleaner_config(after)
        except ConfigError as exc:
            raise ConfigRequestError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        reason = current.check_reconfiguration(wanted) if wanted != current else None
        if reason is not None:
            raise ConfigRequestError(
                ErrorCode.INVALID_REQUEST,
                f"Invalid config value for resource ConfigResource(type=BROKER, name='{name}'): "
                f"Invalid dynamic configuration: {reason}")

    # ------------------------------------------------------------------ applying changes

    async def apply_entity(self, entity_path: str) -> None:
        """Re-read one changed entity and make its configs take effect."""
        entity_type, _, name = entity_path.partition("/")
        if entity_type == _TOPICS:
            if name not in self.metadata.topics:
                return
            overrides = await self._read(_TOPICS, name)
            self._set_topic_overrides(name, overrides)
            self._refresh_logs([name])
            if _is_true(overrides.get(UNCLEAN)) and self.controller is not None:
                # Kafka's TopicConfigHandler: the controller retries the topic's offline partitions.
                self.controller.enable_topic_unclean_leader_election(name)
        elif entity_type == _BROKERS:
            if name == zkdata.DEFAULT_ENTITY:
                self.dynamic.update(default=await self._read(_BROKERS, name))
            elif name == str(self.broker_id):
                self.dynamic.update(per_broker=await self._read(_BROKERS, name))
            else:
                return  # another broker's own configs
            self._report_dynamic()
            self._refresh_replication_quotas()
            self._refresh_defaults()
            self._refresh_controller()
            self._refresh_cleaner()
        elif entity_type in _QUOTA_ENTITIES:
            await self.quota_configs.apply_entity(entity_type, name)

    def _refresh_replication_quotas(self) -> None:
        """The throttled replication rates and the alter-log-dirs bound (per broker or the
        cluster default) take effect. They
        are dynamic-only configs, as in Kafka: one in server.properties is an unknown key there."""
        d = self.dynamic

        def rate(name: str) -> str | None:
            return d.per_broker.get(name, d.default.get(name))

        try:
            self.replication_quotas.update_rates(rate(LEADER_RATE), rate(FOLLOWER_RATE), rate(ALTER_LOG_DIRS_RATE))
        except ValueError as exc:  # a hand-written node; AlterConfigs validates the values
            log.error("replication throttle rates not applied: %s", exc)

    def _refresh_controller(self) -> None:
        """The broker default of unclean.leader.election.enable reaches the controller; turned
        on, it retries the offline partitions at once (Kafka's updateUncleanLeaderElection)."""
        controller = self.controller
        if controller is None:
            return
        enabled = _is_true(self.dynamic.value(UNCLEAN))
        was = controller.config.unclean_leader_election_enable
        controller.config.unclean_leader_election_enable = enabled
        if enabled and not was:
            controller.enable_unclean_leader_election()

    def _refresh_defaults(self) -> None:
        """New broker-level topic defaults: every log without an override follows them."""
        from kaflet.log.config import LogConfig

        lm = self.log_manager
        if lm is None:
            return
        try:
            lm.default_config = LogConfig.from_props(self.topic_defaults())
        except ValueError as exc:
            log.error("dynamic broker configs not applied to the logs: %s", exc)
            return
        self._refresh_logs(sorted({t for t, _ in lm.all_logs()}))

    def _refresh_cleaner(self) -> None:
        """New dynamic cleaner settings: restart the log cleaner with them (Kafka's
        LogCleaner.reconfigure), in the background; a restart in progress is followed by
        another when the settings changed again meanwhile."""
        lm = self.log_manager
        cleaner = lm.cleaner if lm is not None else None
        if lm is None or cleaner is None:
            return
        try:
            wanted = self.cleaner_config()
        except ConfigError as exc:
            log.error("dynamic log cleaner configs not applied: %s", exc)
            return
        current = self._cleaner_target or cleaner.config
        if wanted == current:
            return
        # Checked by the broker that took the AlterConfigs; one that only hears of the change
        # keeps its cleaner when it does not hold for it (Kafka logs and skips it too).
        reason = current.check_reconfiguration(wanted)
        if reason is not None:
            log.error("dynamic log cleaner configs not applied: %s", reason)
            return
        self._cleaner_target = wanted
        if self._cleaner_task is None:
            self._cleaner_task = asyncio.create_task(self._reconfigure_cleaner(lm), name="kaflet-cleaner-reconfigure")

    async def _reconfigure_cleaner(self, lm: LogManager) -> None:
        try:
            while (target := self._cleaner_target) is not None and lm.cleaner is not None:
                # Off the loop: stopping joins the cleaner threads, which may wait for the loop.
                await asyncio.get_running_loop().run_in_executor(None, lm.cleaner.reconfigure, target)
                lm.cleaner_config = target
                if self._cleaner_target == target:
                    self._cleaner_target = None
        except Exception:
            log.exception("reconfiguring the log cleaner failed")
        finally:
            self._cleaner_task = None

    def _refresh_logs(self, topics: list[str]) -> None:
        lm = self.log_manager
        if lm is None:
            return
        for topic in topics:
            try:
                lm.update_topic_config(topic)
            except ValueError as exc:
                log.error("config of topic %s not applied to its logs: %s", topic, exc)

    # ------------------------------------------------------------------ /config/changes listener

    async def start(self) -> None:
        """Start following /config/changes; what is there already is state we just read."""
        names = await self._watch_changes()
        self._last_seq = notifications.latest_sequence(names, zkdata.CONFIG_CHANGE_PREFIX)
        await notifications.purge_expired(self.tree, zkdata.CONFIG_CHANGES_PATH, names)
        self._task = asyncio.create_task(self._run(), name="kaflet-config-changes")

    async def resync(self) -> None:
        """After a new ZooKeeper session (the old one's watches are gone): re-read the
        notifications, which re-arms the watch; changes made meanwhile are among them."""
        self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._cleaner_task is not None:
            await self._cleaner_task  # a restart under way finishes (the cleaner stops after)

    def _on_change(self, _event: WatchEvent) -> None:
        self._wake.set()

    async def _watch_changes(self) -> list[str]:
        return await self.tree.children(zkdata.CONFIG_CHANGES_PATH, watch=self._on_change)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._process()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("processing config change notifications failed; retrying")
                await asyncio.sleep(0.5)
                self._wake.set()

    async def _process(self) -> None:
        names = await self._watch_changes()
        for seq, node in notifications.pending(names, zkdata.CONFIG_CHANGE_PREFIX, self._last_seq):
            got = await self.tree.get_or_none(f"{zkdata.CONFIG_CHANGES_PATH}/{node}")
            if got is not None:
                try:
                    entity_path = zkdata.parse_config_change(got[0])
                except (ValueError, KeyError) as exc:
                    log.warning("ignoring malformed config change notification %s: %s", node, exc)
                else:
                    await self.apply_entity(entity_path)
            self._last_seq = seq
        await notifications.purge_expired(self.tree, zkdata.CONFIG_CHANGES_PATH, names)


