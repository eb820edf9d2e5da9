"""Deterministic simulator of N per-tablet Raft cores under a seeded random scheduler.

One `Simulation(seed)` plays `steps` events chosen by `random.Random(seed)`: message
delivery in random order (reordering), loss, duplication, delay, partitions, ticks,
persistence of Readies (the driver contract: hard state and entries durable before the
Ready's messages leave), crashes that lose everything not persisted, restarts from the
durable hard state + log, client writes, read-index reads, config changes (CAS, promote,
remove, self-removal through leadership transfer), leadership transfers, log compaction,
tablet copies (with failures that leave a tombstone) and tombstoning of removed replicas.

Invariants are checked after every step; a violation raises SimulationFailure naming the
seed and the command that replays it exactly:
    SIM_SEED=<seed> SIM_STEPS=<steps> .venv/bin/pytest tests/consensus/test_sim.py -q -s
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import random
from dataclasses import dataclass

from tests.support.linearizability import Operation, OpKind, Outcome, check_history
from tservers.consensus import (
    AppendRequest,
    ConfigChange,
    ConfigChangeType,
    CopyReason,
    Entry,
    EntryType,
    HardState,
    MemberType,
    Message,
    OpId,
    ProposalStatus,
    RaftConfig,
    RaftCore,
    RaftOptions,
    Ready,
    ReplicaStatus,
    Role,
    TabletCopyRequest,
    missing_replica_response,
)

TABLET = "tablet-1"


class SimulationFailure(AssertionError):
    pass


class DataState(enum.Enum):
    READY = "READY"
    DELETED = "DELETED"  # tombstoned: hard state and last op id only
    DOES_NOT_EXIST = "DOES_NOT_EXIST"


@dataclass(frozen=True, slots=True)
class SimOptions:
    universe: int = 5  # servers n1..nK; the first `initial_voters` host the tablet
    initial_voters: int = 3
    steps: int = 300
    liveness_rounds_max: int = 300  # after the faulty phase: heal and require a commit
    delay_steps_max: int = 4
    clients: int = 4
    long_delay_steps_max: int = 80  # 3% of messages: stale messages arriving terms later
    vary: bool = True  # let each seed pick pre-vote, check-quorum, batch sizes, group size
    raft: RaftOptions = RaftOptions(
        election_timeout_ticks=6, heartbeat_interval_ticks=2, append_entries_max=8
    )


class _Node:
    """One server: durable state (what survives a crash) plus the running core."""

    def __init__(self, uuid: str) -> None:
        self.uuid = uuid
        self.data_state = DataState.DOES_NOT_EXIST
        self.alive = True
        self.core: RaftCore | None = None
        self.pending: collections.deque[Ready] = collections.deque()
        self.applied = 0
        self.restarts = 0
        self.sm: dict[str, str] = {}  # the replicated key-value state machine (volatile)
        # durable
        self.hs = HardState(0, None)
        self.snap = OpId(0, 0)
        self.base_config: RaftConfig | None = None
        self.base_config_index = 0
        self.log: list[Entry] = []
        self.last_op_at_tombstone = OpId(0, 0)

    def durable_last(self) -> OpId:
        if self.data_state is DataState.DELETED:
            return self.last_op_at_tombstone
        return self.log[-1].op_id if self.log else self.snap


class Simulation:
    def __init__(self, seed: int, options: SimOptions | None = None) -> None:
        self.seed = seed
        self.opts = options or SimOptions()
        self.rng = random.Random(seed)
        self.step_no = 0
        self.trace: collections.deque[str] = collections.deque(maxlen=40)
        self.nodes: dict[str, _Node] = {}
        self.uuids = [f"n{i}" for i in range(1, self.opts.universe + 1)]
        self.raft_options = self.opts.raft
        self.pipelined_appends = False
        voters = self.opts.initial_voters
        if self.opts.vary:
            # Each seed also picks the core's options and the initial group size.
            base = self.opts.raft
            self.raft_options = RaftOptions(
                election_timeout_ticks=base.election_timeout_ticks,
                heartbeat_interval_ticks=base.heartbeat_interval_ticks,
                pre_vote=self.rng.random() < 0.75,
                check_quorum=self.rng.random() < 0.75,
                append_entries_max=self.rng.choice((1, 3, base.append_entries_max)),
                append_bytes_max=self.rng.choice((8, 30, base.append_bytes_max)),
                inflight_entries_max=self.rng.choice((2, base.inflight_entries_max)),
                inflight_bytes_max=self.rng.choice((20, base.inflight_bytes_max)),
                uncommitted_entries_max=self.rng.choice((5, base.uncommitted_entries_max)),
                # From a generator of its own, so that every seed's other choices and run
                # stay what they were before the backoff existed (regression seeds).
                election_backoff_doublings_max=random.Random(seed * 7919 + 1).choice((0, 3)),
            )
            voters = self.rng.choice((1, 2, 3, 3, 3, 5))
            self.pipelined_appends = self.rng.random() < 0.5
        initial = RaftConfig.of_voters(*self.uuids[:voters])
        for u in self.uuids:
            n = _Node(u)
            self.nodes[u] = n
            if u in initial.uuids:
                n.data_state = DataState.READY
                n.base_config = initial
        self.network: list[tuple[int, Message]] = []
        self.blocked: set[tuple[str, str]] = set()
        self.copy_jobs: list[TabletCopyRequest] = []
        # checker state
        self.leaders: dict[int, str] = {}
        self.seen: dict[tuple[int, int], tuple[Entry, int | None]] = {}
        self.committed: dict[int, Entry] = {}
        self.committed_observed_term: dict[int, int] = {}
        self.max_committed = 0
        self.reads: dict[int, tuple[str, int]] = {}
        self.next_read_id = 1
        self.next_write = 1
        self.stats = collections.Counter()
        # Client history (key-value register per key), checked for linearizability at the end.
        self.clock = 0
        self.client_ops: list[Operation] = []
        # (server, index) -> (term, key, value, invoke time, client)
        self.pending_writes: dict[tuple[str, int], tuple[int, str, str, int, int]] = {}
        # read id -> (server, key, invoke time, client)
        self.pending_client_reads: dict[int, tuple[str, str, int, int]] = {}
        # Each client has at most one operation outstanding, as real clients do.
        self.idle_clients = list(range(self.opts.clients))
        for u in self.uuids:
            self._start(self.nodes[u])

    # ------------------------------------------------------------------ helpers

    def fail(self, what: str) -> None:
        trace = "\n  ".join(self.trace)
        raise SimulationFailure(
            f"seed {self.seed} step {self.step_no}: {what}\n"
            f"rerun: SIM_SEED={self.seed} SIM_STEPS={self.opts.steps} "
            ".venv/bin/pytest tests/consensus/test_sim.py -q -s\n"
            f"nodes:\n  {self.dump()}\nlast events:\n  {trace}"
        )

    def dump(self) -> str:
        lines = []
        for u in self.uuids:
            n = self.nodes[u]
            c = n.core
            desc = f"{u} {n.data_state.name} alive={n.alive} hs={n.hs} last={n.durable_last()}"
            if c is not None:
                st = c.status()
                members = [(m.uuid, m.member_type.name, m.promote) for m in st.config.members]
                peers = [(p.uuid, p.match_index, p.next_index, p.needs_copy) for p in st.peers]
                desc += (
                    f" {st.role.name} t{st.term} leader={st.leader_uuid} commit={st.commit_index}"
                    f" cfg@{st.config_index}={members}"
                    f" committed_cfg@{st.committed_config_index} first={st.first_index}"
                    f" peers={peers}"
                )
            lines.append(desc)
        return "\n  ".join(lines)

    def check(self, cond: bool, what: str) -> None:
        if not cond:
            self.fail(what)

    def _core_rng(self, node: _Node) -> random.Random:
        return random.Random(
            self.seed * 1_000_003 + self.uuids.index(node.uuid) * 7919 + node.restarts
        )

    def _now(self) -> int:
        self.clock += 1
        return self.clock

    def _forget_client_ops(self, node: _Node) -> None:
        """The server lost its core: its clients never hear back (UNKNOWN writes)."""
        for (u, _), (_, key, value, t0, client) in list(self.pending_writes.items()):
            if u == node.uuid:
                self.client_ops.append(
                    Operation(OpKind.WRITE, key, value, t0, None, Outcome.UNKNOWN, f"c{client}")
                )
                self.idle_clients.append(client)
        self.pending_writes = {k: v for k, v in self.pending_writes.items() if k[0] != node.uuid}
        for rid, (u, _, _, client) in list(self.pending_client_reads.items()):
            if u == node.uuid:
                del self.pending_client_reads[rid]
                self.idle_clients.append(client)

    def _start(self, node: _Node) -> None:
        self._forget_client_ops(node)
        node.pending.clear()
        node.alive = True
        node.restarts += 1
        if node.data_state is DataState.DOES_NOT_EXIST:
            node.core = None
            return
        assert node.base_config is not None
        if node.data_state is DataState.DELETED:
            node.core = RaftCore.tombstoned(
                node.uuid,
                TABLET,
                options=self.raft_options,
                rng=self._core_rng(node),
                hard_state=node.hs,
                last_op_id=node.last_op_at_tombstone,
                config=node.base_config,
                config_index=node.base_config_index,
            )
            node.applied = 0
            return
        node.core = RaftCore(
            node.uuid,
            TABLET,
            options=self.raft_options,
            rng=self._core_rng(node),
            base_config=node.base_config,
            base_config_index=node.base_config_index,
            hard_state=node.hs,
            snapshot=node.snap,
            entries=node.log,
        )
        node.applied = node.snap.index
        node.sm = {}
        for idx in range(1, node.snap.index + 1):
            e = self.committed.get(idx)
            self.check(e is not None, f"{node.uuid} snapshot holds {idx}, never seen committed")
            assert e is not None
            self._apply_to_sm(node, e)
        self._collect(node)

    def _leader(self) -> _Node | None:
        best = None
        for u in self.uuids:
            n = self.nodes[u]
            if n.alive and n.core is not None and n.core.role is Role.LEADER:
                if best is None or n.core.term > best.core.term:  # type: ignore[union-attr]
                    best = n
        return best

    def _collect(self, node: _Node) -> None:
        core = node.core
        if core is None or not core.has_ready():
            return
        rd = core.ready()
        self._check_ready(node, rd)
        if (
            self.pipelined_appends
            and core.role is Role.LEADER
            and rd.hard_state is None
            and not any(p.hard_state is not None for p in node.pending)
        ):
            # Allowed optimisation: once every hard state so far is durable, a leader's
            # AppendRequests leave at once, before its own entries are durable (it counts
            # itself only through persisted()); everything else waits for the Ready to be
            # persisted. (Seed 1158 of 3000 steps showed why the hard states must be
            # durable first: a lone voter re-elected itself in the same term after a crash
            # and wrote a different entry at an index it had already sent.)
            early = [m for m in rd.messages if isinstance(m, AppendRequest)]
            if early:
                for m in early:
                    self._send(m)
                rest = tuple(m for m in rd.messages if not isinstance(m, AppendRequest))
                rd = dataclasses.replace(rd, messages=rest)
        node.pending.append(rd)

    # ------------------------------------------------------------------ invariants

    def _check_ready(self, node: _Node, rd: Ready) -> None:
        core = node.core
        assert core is not None
        # The running byte count behind the byte budgets survives appends, truncation and
        # compaction.
        self.check(
            core.log_bytes == sum(len(e.payload) for e in core.entries()),
            f"{node.uuid}: log_bytes {core.log_bytes} is not the sum of its entries' payloads",
        )
        if rd.soft_state is not None and rd.soft_state.role is Role.LEADER:
            term = rd.soft_state.term
            other = self.leaders.setdefault(term, node.uuid)
            self.check(other == node.uuid, f"two leaders in term {term}: {other} and {node.uuid}")
            # Leader completeness: every entry known committed before this term is here.
            for idx, e in self.committed.items():
                if self.committed_observed_term[idx] < term and idx > core.first_index - 1:
                    self.check(
                        core.term_at(idx) == e.term,
                        f"leader {node.uuid} of term {term} lacks committed entry {idx}",
                    )

    @staticmethod
    def _apply_to_sm(node: _Node, e: Entry) -> None:
        if e.entry_type is EntryType.WRITE and b"=" in e.payload:
            key, value = e.payload.decode().split("=", 1)
            node.sm[key] = value

    def _record_commit(self, node: _Node, e: Entry) -> None:
        core = node.core
        assert core is not None
        self.check(
            e.index == node.applied + 1,
            f"{node.uuid} applied {e.index} after {node.applied}",
        )
        node.applied = e.index
        known = self.committed.get(e.index)
        if known is None:
            self.committed[e.index] = e
            self.committed_observed_term[e.index] = core.term
            self.max_committed = max(self.max_committed, e.index)
            for u in self.uuids:
                other = self.nodes[u]
                oc = other.core
                if (
                    other.alive
                    and oc is not None
                    and oc.role is Role.LEADER
                    and oc.term > core.term
                ):
                    if e.index >= oc.first_index:
                        self.check(
                            oc.term_at(e.index) == e.term,
                            f"leader {u} of term {oc.term} lacks committed {e.index}",
                        )
        else:
            self.check(
                known == e, f"{node.uuid} committed {e} but {known} was committed at {e.index}"
            )
            self.committed_observed_term[e.index] = min(
                self.committed_observed_term[e.index], core.term
            )

    # ------------------------------------------------------------------ driver actions

    def _flush(self, node: _Node, crash_after: int = 0) -> None:
        """Handle the oldest Ready of node as the driver contract says. crash_after=1 crashes
        after the hard state is durable, 2 after the entries too (before any send)."""
        rd = node.pending.popleft()
        core = node.core
        assert core is not None
        if rd.hard_state is not None:
            node.hs = rd.hard_state
        messages = rd.messages
        if crash_after == 1:
            self._crash(node)
            return
        if rd.entries:
            first = rd.entries[0].index
            self.check(first > node.snap.index, f"{node.uuid} rewrites compacted {first}")
            del node.log[first - node.snap.index - 1 :]
            self.check(
                len(node.log) == first - node.snap.index - 1, f"{node.uuid} log gap at {first}"
            )
            # Log matching, checked on what becomes durable (an entry that never left a
            # crashed node's memory never existed): same (index, term) means the same
            # entry after the same history.
            prev_term = node.log[-1].term if node.log else node.snap.term
            for e in rd.entries:
                key = (e.index, e.term)
                known = self.seen.get(key)
                if known is None:
                    self.seen[key] = (e, prev_term)
                else:
                    self.check(known[0] == e, f"two different entries at {key}")
                    self.check(known[1] == prev_term, f"log matching broken before {key}")
                prev_term = e.term
            node.log.extend(rd.entries)
        if crash_after == 2:
            self._crash(node)
            return
        for m in messages:
            self._send(m)
        if rd.entries:
            last = rd.entries[-1]
            core.persisted(last.index, last.term)
        for e in rd.committed_entries:
            self._record_commit(node, e)
            self._apply_to_sm(node, e)
            pw = self.pending_writes.pop((node.uuid, e.index), None)
            if pw is not None:
                term, key, value, t0, client = pw
                self.idle_clients.append(client)
                if term == e.term:
                    # The driver acknowledges a write when its (index, term) is applied.
                    self.client_ops.append(
                        Operation(
                            OpKind.WRITE, key, value, t0, self._now(), Outcome.OK, f"c{client}"
                        )
                    )
                # else another term won that index: the write certainly failed (FAIL).
        for r in rd.reads:
            issued = self.reads.pop(r.request_id, None)
            self.check(issued is not None, f"unknown read {r.request_id}")
            assert issued is not None
            if r.status is ProposalStatus.OK:
                self.stats["reads_ok"] += 1
                self.check(
                    r.read_index >= issued[1],
                    f"stale read {r.request_id}: read index {r.read_index} < {issued[1]} "
                    "committed before it was issued",
                )
                self.check(node.applied >= r.read_index, "read released before apply")
            cr = self.pending_client_reads.pop(r.request_id, None)
            if cr is not None:
                _, key, t0, client = cr
                self.idle_clients.append(client)
                if r.status is ProposalStatus.OK:
                    value = node.sm.get(key)
                    self.client_ops.append(
                        Operation(
                            OpKind.READ, key, value, t0, self._now(), Outcome.OK, f"c{client}"
                        )
                    )
        for c in rd.copy_requests:
            if len(self.copy_jobs) < 8 and c not in self.copy_jobs:
                self.copy_jobs.append(c)
        self._collect(node)

    def _send(self, m: Message) -> None:
        delay = self.rng.randint(0, self.opts.delay_steps_max)
        if self.rng.random() < 0.03:
            delay = self.rng.randint(self.opts.delay_steps_max, self.opts.long_delay_steps_max)
        self.network.append((self.step_no + delay, m))

    def _crash(self, node: _Node) -> None:
        self._forget_client_ops(node)
        node.alive = False
        node.core = None
        node.pending.clear()
        self.stats["crashes"] += 1

    def _deliver(self, i: int) -> None:
        _, m = self.network.pop(i)
        if (m.sender, m.recipient) in self.blocked:
            return
        node = self.nodes[m.recipient]
        if not node.alive:
            return
        if node.core is None:
            resp = missing_replica_response(m, ReplicaStatus.TABLET_NOT_FOUND)
            if resp is not None:
                self.network.append((self.step_no, resp))
            return
        node.core.step(m)
        self._collect(node)

    def _run_copy(self, job: TabletCopyRequest, fail: bool) -> None:
        src = self.nodes[self._source_for(job)]
        dst = self.nodes[job.peer_uuid]
        if not dst.alive or not src.alive or src.data_state is not DataState.READY:
            return
        # The seed's follower checks: caller term, then whether a copy is needed at all.
        if dst.hs.term > job.leader_term:
            return
        if dst.data_state is DataState.READY:
            if (
                job.reason is not CopyReason.LOG_COMPACTED
                or dst.durable_last().index > src.snap.index
            ):
                return
        self.stats["copies"] += 1
        # Consensus metadata merge, written before anything is downloaded.
        if src.hs.term > dst.hs.term:
            dst.hs = HardState(src.hs.term, None)
        old_last = dst.durable_last()
        dst.base_config, dst.base_config_index = src.base_config, src.base_config_index
        dst.core = None
        if fail:
            dst.data_state = DataState.DELETED
            dst.last_op_at_tombstone = old_last
            dst.log = []
            self.stats["copy_failures"] += 1
            self._start(dst)
            return
        dst.data_state = DataState.READY
        dst.snap = src.snap
        dst.log = list(src.log)
        self._start(dst)

    def _source_for(self, job: TabletCopyRequest) -> str:
        # The leader that asked is the source if still up, else any READY replica.
        leader = self._leader()
        return leader.uuid if leader is not None else job.peer_uuid

    # ------------------------------------------------------------------ events

    def _ev_deliver(self) -> None:
        ready = [i for i, (t, _) in enumerate(self.network) if t <= self.step_no]
        if not ready:
            return
        i = self.rng.choice(ready)
        r = self.rng.random()
        if r < 0.05:
            self.network.pop(i)
            self.trace.append("drop")
            return
        if r < 0.10:
            self.network.append((self.step_no + 1, self.network[i][1]))
            self.trace.append("duplicate")
        m = self.network[i][1]
        self.trace.append(f"deliver {type(m).__name__} {m.sender}->{m.recipient} t{m.term}")
        self._deliver(i)

    def _ev_flush(self) -> None:
        nodes = [n for n in self.nodes.values() if n.alive and n.pending]
        if not nodes:
            return
        n = self.rng.choice(nodes)
        crash_after = 0
        if self.rng.random() < 0.004:
            crash_after = self.rng.choice((1, 2))
        self.trace.append(f"flush {n.uuid} crash_after={crash_after}")
        self._flush(n, crash_after)

    def _ev_tick(self) -> None:
        self.trace.append("tick")
        for u in self.uuids:
            n = self.nodes[u]
            if n.alive and n.core is not None:
                n.core.tick()
                self._collect(n)

    def _ev_propose(self) -> None:
        if not self.idle_clients:
            return  # every client waits for an answer: all committed writes are in the history
        nodes = [n for n in self.nodes.values() if n.alive and n.core is not None]
        if not nodes:
            return
        leaders = [n for n in nodes if n.core is not None and n.core.role is Role.LEADER]
        if leaders and self.rng.random() < 0.9:
            n = self.rng.choice(leaders)  # possibly a deposed leader that does not know it yet
        else:
            n = self.rng.choice(nodes)
        assert n.core is not None
        key = f"k{self.rng.randrange(3)}"
        value = f"w{self.next_write}"
        self.next_write += 1
        invoke = self._now()
        res = n.core.propose(f"{key}={value}".encode())
        if res.status is ProposalStatus.OK:
            client = self.idle_clients.pop(self.rng.randrange(len(self.idle_clients)))
            self.pending_writes[(n.uuid, res.index)] = (res.term, key, value, invoke, client)
        self.trace.append(f"propose at {n.uuid}: {res.status.name} {res.index}")
        if res.status is ProposalStatus.OK:
            self.stats["proposals_ok"] += 1
        self._collect(n)

    def _ev_read(self) -> None:
        # A client with a stale cache may ask any server that believes it leads.
        leaders = [
            n
            for n in self.nodes.values()
            if n.alive and n.core is not None and n.core.role is Role.LEADER
        ]
        if not leaders:
            return
        leader = self.rng.choice(leaders)
        assert leader.core is not None
        rid = self.next_read_id
        self.next_read_id += 1
        self.reads[rid] = (leader.uuid, self.max_committed)
        if self.idle_clients:
            client = self.idle_clients.pop(self.rng.randrange(len(self.idle_clients)))
            key = f"k{self.rng.randrange(3)}"
            self.pending_client_reads[rid] = (leader.uuid, key, self._now(), client)
        leader.core.read_index(rid)
        self.trace.append(f"read {rid} at {leader.uuid}")
        self._collect(leader)

    def _ev_config_change(self) -> None:
        leader = self._leader()
        if leader is None or leader.core is None:
            return
        core = leader.core
        cfg = core.config
        cas = core.committed_config_index()
        stale = self.rng.random() < 0.1
        if stale:
            cas = cas + self.rng.choice((-1, 1, 2))
        outside = [u for u in self.uuids if cfg.member(u) is None]
        r = self.rng.random()
        if outside and (r < 0.5 or len(cfg.voters) <= 1):
            u = self.rng.choice(outside)
            kind = self.rng.random()
            if kind < 0.6:
                change = ConfigChange(ConfigChangeType.ADD_MEMBER, u, MemberType.NON_VOTER, True)
            elif kind < 0.8:
                change = ConfigChange(ConfigChangeType.ADD_MEMBER, u, MemberType.VOTER)
            else:
                change = ConfigChange(ConfigChangeType.ADD_MEMBER, u, MemberType.NON_VOTER)
        elif r < 0.8 and len(cfg.voters) > 1:
            change = ConfigChange(ConfigChangeType.REMOVE_MEMBER, self.rng.choice(cfg.uuids))
        else:
            u = self.rng.choice(cfg.uuids)
            m = cfg.member(u)
            assert m is not None
            if m.member_type is MemberType.VOTER:
                if len(cfg.voters) <= 1:
                    return
                change = ConfigChange(ConfigChangeType.CHANGE_MEMBER_TYPE, u, MemberType.NON_VOTER)
            else:
                change = ConfigChange(ConfigChangeType.CHANGE_MEMBER_TYPE, u, MemberType.VOTER)
        before_committed = core.committed_config_index()
        res = core.change_config(change, cas)
        self.trace.append(f"config {change} cas={cas} at {leader.uuid}: {res.status.name}")
        if cas != before_committed:
            self.check(res.status is ProposalStatus.CAS_FAILED, f"stale CAS accepted: {res}")
        else:
            self.check(res.status is not ProposalStatus.CAS_FAILED, f"fresh CAS refused: {res}")
        if res.status is ProposalStatus.OK:
            self.stats["config_changes"] += 1
        self._collect(leader)

    def _ev_transfer(self) -> None:
        leader = self._leader()
        if leader is None or leader.core is None:
            return
        others = [v for v in leader.core.config.voters if v != leader.uuid]
        if not others:
            return
        t = self.rng.choice(others)
        leader.core.transfer_leadership(t)
        self.trace.append(f"transfer {leader.uuid}->{t}")
        self._collect(leader)

    def _ev_crash(self) -> None:
        alive = [n for n in self.nodes.values() if n.alive]
        if alive:
            n = self.rng.choice(alive)
            self.trace.append(f"crash {n.uuid}")
            self._crash(n)

    def _ev_restart(self) -> None:
        dead = [n for n in self.nodes.values() if not n.alive]
        if dead:
            n = self.rng.choice(dead)
            self.trace.append(f"restart {n.uuid}")
            self._start(n)

    def _ev_partition(self) -> None:
        if self.blocked and self.rng.random() < 0.7:
            self.blocked = set()
            self.trace.append("heal")
            return
        leader = self._leader()
        if leader is not None and self.rng.random() < 0.5:
            side = [leader.uuid]  # isolate the leader: the classic stale-leader window
        else:
            side = [u for u in self.uuids if self.rng.random() < 0.4]
        self.blocked = {
            (a, b) for a in self.uuids for b in self.uuids if (a in side) != (b in side)
        }
        self.trace.append(f"partition {side}")

    def _ev_compact(self) -> None:
        nodes = [
            n
            for n in self.nodes.values()
            if n.alive and n.core is not None and n.data_state is DataState.READY
        ]
        if not nodes:
            return
        n = self.rng.choice(nodes)
        upto = min(n.applied, n.durable_last().index)
        if upto <= n.snap.index:
            return
        upto = self.rng.randint(n.snap.index + 1, upto)
        assert n.core is not None
        n.core.compact(upto)
        # Durable side: base config = newest config at or below the new snapshot point.
        for e in n.log[: upto - n.snap.index]:
            if e.entry_type is EntryType.CONFIG:
                n.base_config, n.base_config_index = e.config, e.index
        old = n.snap.index
        n.snap = n.log[upto - old - 1].op_id
        n.log = n.log[upto - old :]
        self.check(not n.log or n.log[0].index == upto + 1, "compaction bookkeeping")
        self.trace.append(f"compact {n.uuid} to {upto}")
        self.stats["compactions"] += 1

    def _ev_tombstone(self) -> None:
        leader = self._leader()
        if leader is None or leader.core is None:
            return
        keep = set(leader.core.config.uuids) | set(leader.core.committed_config().uuids)
        cands = [
            n
            for n in self.nodes.values()
            if n.alive and n.data_state is DataState.READY and n.uuid not in keep
        ]
        if not cands:
            return
        n = self.rng.choice(cands)
        # Deletion: last op id into the superblock, then the log goes (seed 000 steps 4-6).
        n.last_op_at_tombstone = n.durable_last()
        n.data_state = DataState.DELETED
        n.log = []
        n.snap = OpId(0, 0)
        self.trace.append(f"tombstone {n.uuid}")
        self.stats["tombstones"] += 1
        self._start(n)

    def _ev_copy(self) -> None:
        if not self.copy_jobs:
            return
        job = self.copy_jobs.pop(self.rng.randrange(len(self.copy_jobs)))
        fail = self.rng.random() < 0.2
        self.trace.append(f"copy {job.peer_uuid} ({job.reason.name}) fail={fail}")
        self._run_copy(job, fail)

    # ------------------------------------------------------------------ runs

    _EVENTS = (
        ("deliver", 40.0),
        ("flush", 22.0),
        ("tick", 6.0),
        ("propose", 8.0),
        ("read", 2.0),
        ("config_change", 2.5),
        ("transfer", 0.7),
        ("crash", 0.3),
        ("restart", 1.5),
        ("partition", 0.8),
        ("compact", 1.0),
        ("tombstone", 0.5),
        ("copy", 2.0),
    )

    _CONDITIONAL = frozenset(("deliver", "flush", "restart", "copy"))

    def _enabled(self, name: str) -> bool:
        if name == "deliver":
            return any(t <= self.step_no for t, _ in self.network)
        if name == "flush":
            return any(n.alive and n.pending for n in self.nodes.values())
        if name == "restart":
            return any(not n.alive for n in self.nodes.values())
        if name == "copy":
            return bool(self.copy_jobs)
        return True

    def _guarded(self, fn) -> None:  # type: ignore[no-untyped-def]
        """Run an event; an assertion inside a core also reports the seed."""
        try:
            fn()
        except SimulationFailure:
            raise
        except AssertionError as e:
            self.fail(f"assertion in the core: {e!r}")

    def run(self) -> collections.Counter:
        handlers = {n: getattr(self, f"_ev_{n}") for n, _ in self._EVENTS}
        for _ in range(self.opts.steps):
            self.step_no += 1
            names, weights = [], []
            for n, w in self._EVENTS:
                if n not in self._CONDITIONAL or self._enabled(n):
                    names.append(n)
                    weights.append(w)
            ev = self.rng.choices(names, weights)[0]
            self._guarded(handlers[ev])
        self._guarded(self._liveness)
        self._check_linearizable()
        self.stats["committed"] = self.max_committed
        return self.stats

    def _check_linearizable(self) -> None:
        ops = list(self.client_ops)
        for _, key, value, t0, client in self.pending_writes.values():
            ops.append(Operation(OpKind.WRITE, key, value, t0, None, Outcome.UNKNOWN, f"c{client}"))
        result = check_history(ops, step_limit=200_000, time_limit_s=5.0)
        self.stats["client_ops"] += len(ops)
        if result.linearizable is None:
            self.stats["linearizability_undecided"] += 1
        elif not result.linearizable:
            self.fail("client history not linearizable:\n" + result.describe())

    def _liveness(self) -> None:
        """Heal everything, restart everyone, stop injecting faults: a write must commit."""
        self.blocked = set()
        for u in self.uuids:
            if not self.nodes[u].alive:
                self._start(self.nodes[u])
        probe: tuple[str, int, int] | None = None
        for _ in range(self.opts.liveness_rounds_max):
            self.step_no += 1
            for _ in range(200):
                busy = False
                while self.network:
                    self._deliver(0)
                    busy = True
                for u in self.uuids:
                    n = self.nodes[u]
                    while n.alive and n.pending:
                        self._flush(n)
                        busy = True
                if not busy:
                    break
            while self.copy_jobs:
                self._run_copy(self.copy_jobs.pop(0), fail=False)
            leader = self._leader()
            if leader is not None and leader.core is not None:
                if probe is None or probe[0] != leader.uuid:
                    res = leader.core.propose(b"probe")
                    if res.status is ProposalStatus.OK:
                        probe = (leader.uuid, res.index, res.term)
                        self._collect(leader)
                elif self.committed.get(probe[1]) is not None:
                    e = self.committed[probe[1]]
                    if e.term == probe[2]:
                        return
                    probe = None
            self._ev_tick()
        self.fail("liveness: no write committed after healing the cluster")


def run_seed(seed: int, steps: int | None = None) -> collections.Counter:
    opts = SimOptions() if steps is None else SimOptions(steps=steps)
    return Simulation(seed, opts).run()
