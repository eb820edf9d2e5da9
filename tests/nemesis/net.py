"""Network faults between the namespaces of a NemesisCluster: isolate a node, split a
majority from a minority, a bridge (two halves sharing one node), one-way loss, and heal.

A fault is a set of one-way drops (src -> dst). Each drop is an iptables rule in the
*receiver's* namespace (`INPUT -s src -j DROP`): packets are lost on the wire, as a real cut
loses them, instead of failing the sender's send() at once (a rule in OUTPUT would). A cut
between two nodes drops both directions. Every TCP link between namespaces is cut alike: the
ZeroMQ links (clients' of course not: they live in the root namespace and reach every node)
and the coordinator log's Raft links. Each namespace's rules are replaced in one
`iptables-restore`, so a fault comes into force, or heals, atomically per node.
"""

from __future__ import annotations

import itertools
import logging
import random
import subprocess
from collections.abc import Iterable, Sequence

from tests.nemesis.cluster import CMD_TIMEOUT_S, NemesisCluster
from tests.nemesis.faults import LEADER, Step

logger = logging.getLogger("nemesis.net")

MODES = ("isolate", "split", "bridge", "oneway")


def _ruleset(drop_from: Iterable[str]) -> str:
    lines = ["*filter", ":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]"]
    lines += [f"-A INPUT -s {ip}/32 -j DROP" for ip in sorted(drop_from)]
    lines.append("COMMIT")
    return "\n".join(lines) + "\n"


def drops_of(step: Step, nodes: Sequence[str]) -> set[tuple[str, str]]:
    """The one-way drops (src, dst) a step means. Groups: every pair of nodes that share no
    group is cut both ways (a node in no group is cut from everyone)."""
    if step.action == "oneway":
        src, dst = step.targets
        assert src != dst and src in nodes and dst in nodes, step
        return {(src, dst)}
    if step.action == "isolate":
        (alone,) = step.targets
        groups = [{alone}, set(nodes) - {alone}]
    else:
        assert step.action in ("split", "bridge"), step
        groups = [set(g.split(",")) for g in step.targets]
    assert all(g <= set(nodes) for g in groups), step
    drops: set[tuple[str, str]] = set()
    for a, b in itertools.permutations(nodes, 2):
        if not any(a in g and b in g for g in groups):
            drops.add((a, b))
    return drops


class NetFault:
    """Partitions of a NemesisCluster (the `partition` fault kind). `modes` narrows the
    actions `choose` draws from (a test of one partition kind)."""

    kind = "partition"

    def __init__(
        self,
        cluster: NemesisCluster,
        modes: Sequence[str] = MODES,
        isolate_from: Sequence[str] = (),
    ) -> None:
        """`isolate_from`: isolate draws its node from these only (default: the coordinator
        leader half of the time, else any node)."""
        assert modes and set(modes) <= set(MODES), modes
        self.isolate_from = tuple(isolate_from)
        self.cluster = cluster
        self.modes = tuple(modes)
        self.coordinators = [n.name for n in cluster.spec.coordinators]
        self.tservers = [n.name for n in cluster.spec.tservers]
        self._dirty: set[str] = set()  # namespaces holding rules

    def choose(self, rng: random.Random, nodes: Sequence[str]) -> tuple[str, tuple[str, ...]]:
        mode = self.modes[rng.randrange(len(self.modes))]
        coords = list(self.coordinators)
        rng.shuffle(coords)
        if mode == "isolate" and self.isolate_from:
            return mode, (rng.choice(self.isolate_from),)
        if mode == "isolate":  # the coordinator leader half of the time
            return mode, (LEADER if rng.random() < 0.5 else rng.choice(list(nodes)),)
        if mode == "oneway":
            src, dst = rng.sample(list(nodes), 2)
            return mode, (src, dst)
        half = len(coords) // 2  # the minority: 1 of 3 coordinators
        if mode == "split":
            groups = [coords[:half], coords[half:]]
        else:  # bridge: two halves sharing coords[half]
            groups = [coords[: half + 1], coords[half:]]
        for ts in self.tservers:
            groups[rng.randrange(2)].append(ts)
        return mode, tuple(",".join(sorted(g)) for g in groups)

    def inject(self, step: Step) -> Step:
        targets = tuple(self.cluster.resolve(t) for t in step.targets)
        applied = Step(step.offset_s, step.kind, step.action, targets, step.hold_s)
        self.apply(drops_of(applied, self.cluster.node_names))
        return applied

    def apply(self, drops: set[tuple[str, str]]) -> None:
        """Put exactly these drops in force (and no others)."""
        by_dst: dict[str, set[str]] = {}
        for src, dst in drops:
            by_dst.setdefault(dst, set()).add(self.cluster.ip_of[src])
        for name in self.cluster.node_names:
            ns = self.cluster.ns_of[name]
            sources = by_dst.get(name, set())
            if not sources and ns not in self._dirty:
                continue
            self._restore(ns, _ruleset(sources))
            if sources:
                self._dirty.add(ns)
            else:
                self._dirty.discard(ns)
        logger.info("drops in force: %s", sorted(drops) or "none")

    def heal(self) -> None:
        self.apply(set())

    @staticmethod
    def _restore(ns: str, rules: str) -> None:
        proc = subprocess.run(
            ["ip", "netns", "exec", ns, "iptables-restore", "-w"],
            input=rules,
            capture_output=True,
            text=True,
            timeout=CMD_TIMEOUT_S,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"iptables-restore in {ns}: {proc.stderr.strip()}")
