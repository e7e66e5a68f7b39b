"""This broker as a member of a cluster on one shared storage root (issue 18, docs/CLUSTER.md).

It registers in the coordination service (ZooKeeper), watches the live brokers, the controller
and every partition's state, and answers the request paths' leadership questions from what it
saw (`leadership.Leadership`). It makes the partitions it is told to lead its own and lets go of
the others:

- the state names this broker leader of epoch E: `PartitionManager.take_over(E)` (claim E in
  storage, recover the log, continue in an own segment), then, for an internal topic, the
  coordinator runtime loads that partition (groups, transactions, share state follow leadership);
- the state names another broker, or an append found the fence moved (a newer leader claimed
  the partition): the runtime unloads it, `PartitionManager.resign` lets the log go.

Transitions of one partition run one after another (a chain of tasks per partition), so a
takeover and a resignation never interleave. Every callback of the coordination client arrives on
its own thread and is handed to the event loop; its blocking calls run on a small thread pool.

While it is the elected controller it also keeps every partition led (`controller.elect`): a
partition whose leader is gone gets the first live broker of its preferred order with the epoch
raised, and one whose preferred broker is back moves home after `preferred_delay_ms`. Each such
change is a compare-and-set on the state's version, fenced by the controller epoch.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable, Mapping

from topiclake.segments.errors import UnknownTopicError
from topiclake.segments.leader_fence import FencedLeaderError

from .clock import system_ms
from .cluster.config import ClusterConfig
from .cluster.controller import LeaderChange, elect, elect_preferred, initial_states, reassign
from .cluster.coordination import (BrokerInfo, Change, Coordination, CoordinationError, ControllerToken,
                                   NodeExistsError, NotControllerError, PartitionState, SessionState,
                                   StaleVersionError, Versioned)
from .cluster.leadership_log import LeadershipLog
from .leadership import (DEFAULT_REPLICATION, NO_CONTROLLER, NO_LEADER, BrokerNode, ClusterHealth, Controller,
                         Election, PartitionLeader, Reassignment, Replication)
from .security.config import parse_listeners

log = logging.getLogger(__name__)

RECONCILE_INTERVAL_S = 1.0  # how often the controller looks for partitions to move home
# A leadership event ends once no change was in flight for this long (its partitions' state
# notifications arrive over a few milliseconds); then its one summary line is logged.
SUMMARY_QUIET_S = 0.25
CONVERGE_RETRY_S = 2.0  # a failed takeover or resignation of a partition is looked at again after this
CONFIGS_AREA = "configs"  # change notifications: a topic's configs or the cluster-wide defaults
COORDINATION_THREADS = 16
Key = tuple[str, int]


class ClusterNode:
    clustered = True

    def __init__(self, config: ClusterConfig, coordination: Coordination, partitions: Any, *,
                 broker_id: int, registration: Callable[[], BrokerInfo],
                 runtimes: Mapping[str, Any] | None = None):
        """`registration()`: this broker's BrokerInfo, asked once its listeners are bound;
        `runtimes`: the coordinator runtime of each internal topic (they follow leadership)."""
        self.config = config
        self.coordination = coordination
        self.partitions = partitions
        self.broker_id = broker_id
        self._registration = registration
        self.runtimes = dict(runtimes or {})
        # Coordination calls block on a round trip; a failover's leader changes (one compare-and-set
        # per partition) go out together, so enough threads to keep them all in flight.
        self._pool = ThreadPoolExecutor(max_workers=COORDINATION_THREADS, thread_name_prefix="topiclake-zk")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._brokers: dict[int, BrokerInfo] = {}
        self._joined_ms: dict[int, int] = {}  # broker id -> when this node first saw it live
        self._token: ControllerToken | None = None
        self._controller: Controller | None = None  # who holds the controller role (ZooKeeper's /controller)
        self._states: dict[Key, Versioned[PartitionState]] = {}
        self._watched: set[Key] = set()
        self._partitions_watched: set[str] = set()  # topics whose partition list is watched
        self._topics: set[str] = set()
        # Partitions this broker serves: (leader epoch, the state's incarnation: a topic deleted and
        # created again under the same name is another partition, even at the same epoch).
        self._led: dict[Key, tuple[int, int]] = {}
        self._chains: dict[Key, asyncio.Future] = {}
        self._converging: set[Key] = set()  # a convergence step is queued, not started yet
        self._retries: dict[Key, asyncio.TimerHandle] = {}  # failed changes looked at again
        self._tasks: list[asyncio.Task] = []
        self._stopping = False
        self._session_lost = False
        self._session_counts = {SessionState.SUSPENDED: 0, SessionState.LOST: 0}  # since start
        self._elections = 0  # leader changes this broker wrote
        # One INFO line per leadership event: the changes in flight, and the summary's timer.
        self._changes = LeadershipLog()
        self._in_flight = 0
        self._summary_timer: asyncio.TimerHandle | None = None

    # ======================================================================= life cycle
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._blocking(self.coordination.start)
        self.coordination.add_session_listener(lambda state: self._soon(self._on_session, state))
        await self._blocking(self.coordination.register_broker, self._registration())
        self.coordination.watch_brokers(lambda brokers: self._soon(self._on_brokers, brokers))
        self.coordination.watch_topics(lambda topics: self._soon(self._on_topics, topics))
        self.coordination.campaign(lambda token: self._soon(self._on_elected, token),
                                   lambda: self._soon(self._on_resigned))
        self.coordination.watch_controller(lambda seat: self._soon(self._on_controller, seat))
        await self._blocking(self.coordination.watch_changes, CONFIGS_AREA,
                             lambda change: self._soon(self._on_config_change, change))
        # The cluster as it is now, before the server answers anyone: the watches above deliver
        # the same again (and every change after).
        await self._reload()
        self._tasks.append(asyncio.create_task(self._reconcile_every(RECONCILE_INTERVAL_S)))
        log.info("broker %d joined the cluster at %s%s", self.broker_id, self.config.zookeeper, self.config.chroot)

    async def stop(self) -> None:
        """Leave: stop serving every partition (nothing is written: the next leader recovers),
        then close the session, so the controller moves the partitions at once."""
        self._stopping = True
        for timer in self._retries.values():
            timer.cancel()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # Each resignation after its partition's takeover in flight (not in `_led` yet), side by side.
        for key in set(self._led) | set(self._chains):
            self._chain(key, lambda key=key: self._resign(key))
        await asyncio.gather(*self._chains.values(), return_exceptions=True)
        self._log_summary()
        await self._blocking(self.coordination.close)
        self._pool.shutdown(wait=False)

    # ========================================================= leadership (request paths)
    def leader(self, topic: str, partition: int) -> PartitionLeader | None:
        current = self._states.get((topic, partition))
        if current is None:
            return None
        state = current.value
        leader = state.leader if state.leader in self._brokers else NO_LEADER
        replicas = state.replicas
        if leader != NO_LEADER and leader not in replicas:
            replicas += (leader,)  # every replica is down: another broker leads (the storage is shared)
        return PartitionLeader(leader, state.leader_epoch, replicas,
                               tuple(b for b in replicas if b in self._brokers),
                               tuple(b for b in replicas if b not in self._brokers))

    def leads(self, topic: str, partition: int) -> bool:
        key = (topic, partition)
        current = self._states.get(key)
        return current is not None and current.value.leader == self.broker_id and \
            self._led.get(key) == _lead_of(current)

    def brokers(self, listener: str) -> list[BrokerNode]:
        out = []
        for broker_id, info in sorted(self._brokers.items()):
            endpoint = _endpoint(info, listener)
            if endpoint is not None:
                out.append(BrokerNode(broker_id, endpoint[0], endpoint[1], info.rack))
        return out

    def controller_id(self) -> int:
        """The broker ZooKeeper's /controller names (the same answer from every broker), or
        NO_CONTROLLER while there is none. Every broker handles what clients send "to the
        controller" (CreateTopics, ElectLeaders...) itself, so a client that reaches another one
        is served too."""
        return self._controller.broker_id if self._controller is not None else NO_CONTROLLER

    def controller(self) -> Controller | None:
        return self._controller

    def topic_created(self, topic: str, partitions: int, replication: Replication = DEFAULT_REPLICATION) -> None:
        self._spawn(self._create_states(topic, range(partitions), replication),
                    f"creating the partition states of {topic}")

    def partitions_added(self, topic: str, old_count: int, new_count: int) -> None:
        first = self._states.get((topic, 0))  # new partitions get as many replicas as the first has
        factor = len(first.value.replicas) if first is not None and first.value.replicas else None
        self._spawn(self._create_states(topic, range(old_count, new_count), Replication(factor)),
                    f"creating the states of {topic}'s new partitions")

    def topic_deleted(self, topic: str) -> None:
        self._spawn(self._delete_states(topic), f"deleting the partition states of {topic}")

    def configs_changed(self, topic: str | None) -> None:
        payload = {"topic": topic} if topic is not None else {"defaults": True}
        self._spawn(self._blocking(self.coordination.publish_change, CONFIGS_AREA, payload),
                    "announcing a config change")

    def _on_config_change(self, change: Change) -> None:
        """Another broker changed a topic's configs or the defaults: the logs open here follow."""
        topic = change.payload.get("topic")

        async def apply() -> None:
            if topic is None:
                await self.partitions.apply_defaults()
            else:
                try:
                    await self.partitions.apply_config(self.partitions.topic(topic, fresh=True))
                except UnknownTopicError:
                    pass  # deleted since

        self._spawn(apply(), f"applying a config change of {topic or 'the defaults'}")

    async def elect_preferred(self, topic: str, partition: int) -> Election:
        """ElectLeaders (PREFERRED) for one partition: make its preferred broker the leader, if it
        is live and does not lead yet. Any broker may ask: the change is a compare-and-set on the
        state's version (fenced by the controller epoch when this broker is the controller), so
        it never overwrites a change it did not see."""
        current = self._states.get((topic, partition))
        if current is None:
            return "unknown"
        state = current.value
        if not state.replicas or (state.replicas[0] == state.leader and state.leader in self._brokers):
            return "not needed"
        change = elect_preferred(topic, partition, current, self._brokers, self._token.epoch if self._token else 0)
        if change is None or not await self._apply(change, self._token):
            return "not available"
        return "elected"

    async def reassign(self, topic: str, partition: int, replicas: tuple[int, ...]) -> Reassignment:
        """AlterPartitionReassignments: the live `replicas` become the partition's replicas and the
        first its preferred broker and leader, at once (the storage is shared: there is no replica
        to copy, so a reassignment completes as it is written). A compare-and-set on the state's
        version, as elect_preferred."""
        current = self._states.get((topic, partition))
        if current is None:
            return "unknown"
        change = reassign(topic, partition, current, tuple(replicas), self._token.epoch if self._token else 0)
        if change is None:
            return "not needed"
        return "moved" if await self._apply(change, self._token) else "conflict"

    def broker_ids(self) -> set[int]:
        return set(self._brokers)

    def health(self) -> ClusterHealth:
        """The cluster's health as this broker sees it (for /metrics; event loop)."""
        live, me = self._brokers, self.broker_id
        states = [current.value for current in self._states.values()]
        led = [self._states[key].value for key in self._led if key in self._states]
        mine = ClusterHealth(self._token is not None, self.coordination.session_state.value,
                             self._session_counts[SessionState.SUSPENDED], self._session_counts[SessionState.LOST],
                             self._elections, len(self._led), sum(me in s.replicas for s in states),
                             sum(any(r not in live for r in s.replicas) for s in led))
        if self._token is None:
            return mine
        return dataclasses.replace(
            mine, live_brokers=len(live), topics=len({topic for topic, _ in self._states}), partitions=len(states),
            offline=sum(s.leader not in live for s in states),
            preferred_imbalance=sum(bool(s.replicas) and s.replicas[0] != s.leader for s in states))

    def not_preferred(self) -> list[Key]:
        """The partitions whose preferred broker does not lead them (ElectLeaders for all)."""
        return sorted(key for key, current in self._states.items()
                      if current.value.replicas and current.value.replicas[0] != current.value.leader)

    # ======================================================== events (on the event loop)
    def _on_session(self, state: SessionState) -> None:
        log.info("broker %d: coordination session %s", self.broker_id, state.value)
        if state in self._session_counts:
            self._session_counts[state] += 1
        if state is SessionState.LOST:
            self._session_lost = True
        elif state is SessionState.CONNECTED and self._session_lost:
            # A new session after an expired one: every ephemeral node of ours was gone and the
            # controller may have moved our partitions: read the cluster again (reading it at LOST
            # failed: there is no session to read with). The fence keeps what we wrote meanwhile safe.
            self._session_lost = False
            self._spawn(self._reload(), "reloading the cluster after a lost session")

    def _on_brokers(self, brokers: dict[int, BrokerInfo]) -> None:
        now = system_ms()
        gone = set(self._brokers) - set(brokers)
        self._brokers = dict(brokers)
        for broker_id in brokers:
            self._joined_ms.setdefault(broker_id, now)
        for broker_id in gone:
            self._joined_ms.pop(broker_id, None)
        if self._token is not None:
            self._spawn(self._reconcile(), "electing leaders after a broker change")

    def _on_elected(self, token: ControllerToken) -> None:
        log.info("broker %d is the controller (controller epoch %d)", self.broker_id, token.epoch)
        self._token = token
        self._spawn(self._reload(), "the new controller reading the cluster")

    def _on_controller(self, seat: tuple[int, int] | None) -> None:
        self._controller = Controller(*seat) if seat is not None else None

    def _on_resigned(self) -> None:
        if self._token is not None:
            log.info("broker %d is no longer the controller", self.broker_id)
        self._token = None

    def _on_topics(self, topics: list[str]) -> None:
        new = set(topics) - self._topics
        self._topics = set(topics)
        for topic in sorted(new):
            self._spawn(self._watch_topic(topic), f"watching the partitions of {topic}")
        for key in [k for k in self._states if k[0] not in self._topics]:
            self._states.pop(key, None)
            self._watched.discard(key)
            self._converge(key)
        self._partitions_watched &= self._topics  # a topic created again gets a watch again

    def _on_partitions(self, topic: str, partitions: list[int]) -> None:
        """CreatePartitions on any broker: watch the states of the new partitions too."""
        if topic in self._topics and any((topic, p) not in self._watched for p in partitions):
            self._spawn(self._watch_topic(topic), f"watching the new partitions of {topic}")

    def _on_state(self, key: Key, current: Versioned[PartitionState] | None) -> None:
        if current is None:
            self._states.pop(key, None)
        else:
            known = self._states.get(key)
            if known is not None and current.is_older_than(known):
                return  # an older notification arriving late
            self._states[key] = current
        self._converge(key)
        if self._token is not None and current is not None:
            change = elect(key[0], key[1], current, self._joined_ms, system_ms(),
                           preferred_delay_ms=self.config.preferred_leader_delay_ms,
                           controller_epoch=self._token.epoch)
            if change is not None:
                self._spawn(self._apply(change, self._token), f"moving the leader of {key[0]}-{key[1]}")

    def fenced(self, topic: str, partition: int, lead: tuple[int, int]) -> None:
        """An append to the partition, led as `lead`, found a newer leader's claim: stop serving
        it now, then look at its state again. Usually it names the newer leader (or soon will:
        nothing to do), but one that still names this broker changes no more, so nothing else
        would ever look again: the partition would stay named to a broker that does not serve it.
        The look takes it over above the claim (the epoch raised by compare-and-set, which fails
        if the state moved)."""
        key = (topic, partition)
        self._soon(lambda: self._chain(key, lambda: self._resign_fenced(key, lead)))

    async def _resign_fenced(self, key: Key, lead: tuple[int, int]) -> None:
        """The fenced leadership alone: a takeover at a newer epoch that ran first stays."""
        if self._led.get(key) != lead:
            return
        await self._resign(key)
        self._converge(key)  # the partition is let go now: a step queued earlier ran before this

    # ============================================================ per-partition changes
    def _converge(self, key: Key) -> None:
        """Bring what this broker serves in line with the partition's state: one step queued at a
        time (a state change and its own watch notification, or a burst of them, ask once), which
        looks at the state when it runs."""
        if self._stopping or key in self._converging:
            return
        # A step in flight (a takeover out of `_led` until it ends) may be about to do what the
        # state no longer wants: one more step after it looks again.
        if self._wanted_step(key) is not None or key in self._chains:
            self._converging.add(key)
            self._chain(key, lambda: self._converge_now(key))

    async def _converge_now(self, key: Key) -> None:
        self._converging.discard(key)
        step = self._wanted_step(key)
        if step is not None:
            await step()

    def _wanted_step(self, key: Key) -> Callable[[], Awaitable[None]] | None:
        current = self._states.get(key)
        wanted = _lead_of(current) if current is not None and current.value.leader == self.broker_id else None
        if wanted is not None and self._led.get(key) != wanted:
            return lambda: self._take_over(key)
        if wanted is None and key in self._led:
            return lambda: self._resign(key)
        return None

    def _retry_later(self, key: Key) -> None:
        """Look at a partition whose change failed again in CONVERGE_RETRY_S: one timer per
        partition, however many of its steps failed (each its own would retry back to back)."""
        if self._loop is not None and not self._stopping and key not in self._retries:
            def retry() -> None:
                self._retries.pop(key, None)
                self._converge(key)
            self._retries[key] = self._loop.call_later(CONVERGE_RETRY_S, retry)

    def _chain(self, key: Key, step: Callable[[], Awaitable[None]]) -> asyncio.Future:
        """Run `step` after every earlier step of this partition (one transition at a time)."""
        previous = self._chains.get(key)

        async def run() -> None:
            if previous is not None:
                await asyncio.gather(previous, return_exceptions=True)
            self._change_began()
            try:
                await step()
            except Exception:
                # e.g. the store or ZooKeeper unavailable mid-takeover: nothing else would bring
                # this partition back in line (its state does not change), so look again later.
                log.exception("changing the leadership of %s-%d failed; retried in %.0f s", *key, CONVERGE_RETRY_S)
                self._changes.failed_on(key)
                self._retry_later(key)
            finally:
                self._change_ended()

        task = self._chains[key] = asyncio.ensure_future(run())
        task.add_done_callback(lambda t: self._chains.pop(key, None) if self._chains.get(key) is t else None)
        return task

    async def _take_over(self, key: Key) -> None:
        current = self._states.get(key)
        if self._stopping or current is None or current.value.leader != self.broker_id:
            return
        epoch = current.value.leader_epoch
        if self._led.get(key) == _lead_of(current):
            return
        topic, partition = key
        runtime = self.runtimes.get(topic)
        if runtime is not None and key in self._led:
            await runtime.unload(partition)
        self._led.pop(key, None)
        try:
            part = await self.partitions.take_over(topic, partition, epoch)
        except FencedLeaderError as exc:
            # The epoch was claimed in storage already: by a newer leader (its state will reach
            # us), or by this broker before it restarted, faster than any controller noticed. Then
            # it needs an epoch of its own: raise the state's past the claim (compare-and-set),
            # unless stopping: a leaving node must not name itself leader at a new epoch.
            latest = self._states.get(key)
            if not self._stopping and latest is current and exc.current is not None and exc.current >= epoch:
                log.info("%s-%d: epoch %d is claimed in storage already (up to %d): raising the leader epoch",
                         topic, partition, epoch, exc.current)
                await self._apply(LeaderChange(topic, partition, PartitionState(
                    self.broker_id, exc.current + 1, current.value.replicas, current.value.controller_epoch),
                    current.version, "a new epoch for a leader that restarted"), None)
            else:
                log.info("%s-%d: not taking over at epoch %d: %s", topic, partition, epoch, exc)
            return
        lead = _lead_of(current)
        part.on_fenced = lambda: self.fenced(topic, partition, lead)
        self._led[key] = lead
        if runtime is not None:
            await runtime.load(partition)
        self._changes.took_over(key)

    async def _resign(self, key: Key) -> None:
        if key not in self._led:
            return
        topic, partition = key
        runtime = self.runtimes.get(topic)
        if runtime is not None:
            await runtime.unload(partition)
        # A resignation sends nothing to the store or ZooKeeper (the next leader's claim fences this
        # one): the partition leaves the served set, then its files close. Its one step that may
        # raise, the unload, runs while the key is still in `_led`, so `_chain` retries it.
        del self._led[key]
        await self.partitions.resign(topic, partition)
        self._changes.resigned(key)

    # ======================================================================= controller
    async def _reconcile_every(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            if self._token is not None:
                try:
                    await self._reconcile()
                except Exception:
                    log.exception("the controller's leader check failed")

    async def _reconcile(self) -> None:
        token = self._token
        if token is None:
            return
        now = system_ms()
        changes = [elect(topic, partition, current, self._joined_ms, now,
                         preferred_delay_ms=self.config.preferred_leader_delay_ms, controller_epoch=token.epoch)
                   for (topic, partition), current in list(self._states.items())]
        # All at once: a dead broker's hundreds of partitions move in a few round trips, not one
        # after another (each change is its own compare-and-set, so they are independent).
        outcomes = await asyncio.gather(*(self._apply(c, token) for c in changes if c is not None),
                                        return_exceptions=True)
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        if failed:
            log.warning("%d of %d leader changes failed, retried at the next check: %s", len(failed),
                        len(outcomes), failed[0])

    async def _apply(self, change: LeaderChange, token: ControllerToken | None) -> bool:
        """Write one leader change; False if the state moved meanwhile (or the token is stale)."""
        self._change_began()
        try:
            written = await self._blocking(self.coordination.set_partition_state, change.topic, change.partition,
                                           change.state, change.expected_version, token)
        except (StaleVersionError, NotControllerError) as exc:
            log.debug("%s-%d: leader change not applied: %s", change.topic, change.partition, exc)
            return False
        finally:
            self._change_ended()
        log.debug("%s-%d: leader %d at epoch %d (%s)", change.topic, change.partition, change.state.leader,
                  change.state.leader_epoch, change.reason)
        self._elections += 1
        self._changes.elected(change.reason)
        self._on_state((change.topic, change.partition), written)
        return True

    # ==================================================== one log line per leadership event
    def _change_began(self) -> None:
        self._in_flight += 1
        self._changes.begin()
        if self._summary_timer is not None:
            self._summary_timer.cancel()
            self._summary_timer = None

    def _change_ended(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0 and self._loop is not None and not self._loop.is_closed():
            self._summary_timer = self._loop.call_later(SUMMARY_QUIET_S, self._log_summary)

    def _log_summary(self) -> None:
        self._summary_timer = None
        if self._in_flight == 0 and not self._changes.empty:
            log.info("%s", self._changes.summary(self.broker_id, len(self._led)))

    # ============================================================ topics and their states
    async def _create_states(self, topic: str, partitions: range, replication: Replication) -> None:
        live = self._brokers or [self.broker_id]
        # The default factor never exceeds the live brokers: internal and auto-created topics are
        # always created (CreateTopics checks a factor a client asked for against them).
        factor = replication.factor or min(self.config.default_replication_factor, len(live))
        states = initial_states(topic, partitions, live, self._token.epoch if self._token else 0,
                                factor=factor, assignments=replication.assignments)
        create = self.coordination.create_topic if partitions.start == 0 else self.coordination.add_partitions
        try:
            await self._blocking(create, topic, states)
        except NodeExistsError:
            pass  # created concurrently (another broker handled the same request)
        await self._watch_topic(topic)

    async def _delete_states(self, topic: str) -> None:
        await self._blocking(self.coordination.delete_topic, topic)

    async def _watch_topic(self, topic: str) -> None:
        if topic not in self._partitions_watched:
            self._partitions_watched.add(topic)
            self.coordination.watch_partitions(topic, lambda parts: self._soon(self._on_partitions, topic, parts))
        states = await self._blocking(self.coordination.partition_states, topic)
        for partition in sorted(states):
            key = (topic, partition)
            if key in self._watched:
                continue
            self._watched.add(key)
            self.coordination.watch_partition_state(
                topic, partition, lambda current, key=key: self._soon(self._on_state, key, current))

    async def _reload(self) -> None:
        """Read the whole cluster again (after a lost session, or as a new controller)."""
        self._on_brokers(await self._blocking(self.coordination.live_brokers))
        for topic in await self._blocking(self.coordination.topics):
            states = await self._blocking(self.coordination.partition_states, topic)
            for partition, current in states.items():
                self._on_state((topic, partition), current)
            await self._watch_topic(topic)

    # ========================================================================= plumbing
    async def _blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def _soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """From any thread: run `fn(*args)` on the event loop."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(fn, *args)

    def _spawn(self, coro: Awaitable[None], what: str) -> None:
        async def run() -> None:
            try:
                await coro
            except CoordinationError as exc:
                log.warning("%s failed: %s", what, exc)
            except Exception:
                log.exception("%s failed", what)

        task = asyncio.ensure_future(run())
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)


def _endpoint(info: BrokerInfo, listener: str) -> tuple[str, int] | None:
    """The broker's advertised (host, port) on `listener` (its registration's endpoints)."""
    for endpoint in info.endpoints:
        try:
            [parsed] = parse_listeners(endpoint, "endpoint")
        except Exception:  # noqa: BLE001,S112 - an endpoint that does not parse is not the listener's
            continue
        if parsed.name == listener:
            return parsed.host, parsed.port
    if not info.endpoints and listener == "PLAINTEXT":
        return info.host, info.port
    return None


def _lead_of(current: Versioned[PartitionState]) -> tuple[int, int]:
    """What leading this state means: its epoch, of this incarnation of the partition."""
    return current.value.leader_epoch, current.created
