"""Which rank hung: a pure function over what every node reported about its ranks.

The evidence, strongest first; the first that singles out ranks of one node names the culprit,
and ``how`` says which one did:

1. **Stopped.** A rank whose process is stopped (SIGSTOP, a debugger) cannot be waiting for anyone.
2. **Collective count.** torch's flight recorder numbers the collectives each process group
   enqueues and completes. A rank that completed a collective the others still wait in (their
   main threads inside it) went through it alone (an empty or mismatched tensor) and on: it is
   ahead, and the culprit. Otherwise a rank that never reached the collective the others wait in has a lower number
   (the wavefront's missing ranks, as NVIDIA's trace analyzer calls them). This holds for a rank
   stuck before a collective, busy in Python, or one that skipped a collective. Where every rank
   has the same number but they wait in different collectives, the few in the odd one are named;
   with no majority (two ranks), the one whose call breaks the collectives' repeating pattern.
3. **Outlier stack.** Ranks grouped by their main thread's stack: when all but a few share one,
   the few are elsewhere (ByteRobust's aggregation). Needs three ranks or more.
4. **Oldest step.** The node whose heartbeat reported the oldest step, when every node reported one.
5. **The only one.** A job of one node names that node, and its rank when it has one.

When the evidence is missing for some rank, rules 2-4 say nothing (the missing rank might be
the one behind), and the verdict is no culprit, with a note that says why: never a guess shown
as a fact.

Whom to believe. A rank's state is observed by the agent (``/proc``); its collective counts, its
stack (unless py-spy read it) and its step are what the rank's own process wrote, which a hung or
hostile process may get wrong. So the count names ranks behind only while their own records allow
it: ranks that wait inside collective #N (their main thread in the call, #N not seen complete)
cannot be behind a rank that says it is past #N, since #N completes only with every member (a
rank that went through alone says it completed #N, and rule 2 names it). Such a claim is not
believed, the count names no one, and the later rules decide, or nothing does, with a note that
says whose record was set aside.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

_LINE = re.compile(r":\d+\)$")
STOPPED = "stopped"
GONE = "gone"
ZOMBIE = "zombie"  # exited, not yet reaped: gone all the same


@dataclass(frozen=True)
class RankEvidence:
    """What one rank's process showed when the hang was declared."""

    rank: int | None  # the global rank, when the process said (or its environment did)
    pid: int
    state: str  # running, sleeping, disk, stopped, zombie, gone
    stack: tuple[str, ...] = ()  # its main thread's frames, innermost first: "func (file:line)"
    collectives: Mapping[str, int] | None = None  # process group -> newest collective enqueued; None: unknown
    last_op: str | None = None  # the newest collective's name (gloo:all_reduce)
    history: Mapping[str, tuple[str, ...]] | None = None  # process group -> its newest collectives, oldest first
    recorders: tuple[str, ...] | None = None  # the flight recorders read (gloo, nccl, ...); None: none answered
    completed: Mapping[str, int] | None = None  # process group -> newest collective completed; None: unknown
    doubt: str | None = None  # why its answer was not believed (written over by another process), if it was not
    stack_by: str | None = None  # who read the stack: "py-spy" from outside, "the rank" (faulthandler) from inside

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "pid": self.pid,
            "state": self.state,
            "stack": list(self.stack),
            "collectives": dict(self.collectives) if self.collectives is not None else None,
            "last_op": self.last_op,
            "history": {group: list(names) for group, names in self.history.items()}
            if self.history is not None
            else None,
            "recorders": list(self.recorders) if self.recorders is not None else None,
            "completed": dict(self.completed) if self.completed is not None else None,
            "doubt": self.doubt,
            "stack_by": self.stack_by,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RankEvidence:
        found, history, recorders = data.get("collectives"), data.get("history"), data.get("recorders")
        completed = data.get("completed")
        return cls(
            None if data.get("rank") is None else int(data["rank"]),
            int(data["pid"]),
            str(data["state"]),
            tuple(str(frame) for frame in data.get("stack") or ()),
            {str(group): int(seq) for group, seq in found.items()} if found is not None else None,
            None if data.get("last_op") is None else str(data["last_op"]),
            {str(group): tuple(map(str, names)) for group, names in history.items()} if history is not None else None,
            tuple(map(str, recorders)) if recorders is not None else None,
            {str(group): int(seq) for group, seq in completed.items()} if completed is not None else None,
            None if data.get("doubt") is None else str(data["doubt"]),
            None if data.get("stack_by") is None else str(data["stack_by"]),
        )


@dataclass(frozen=True)
class NodeEvidence:
    """One node's summary: its ranks, and the last step its heartbeat reported."""

    node: int
    ranks: tuple[RankEvidence, ...]
    step: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "step": self.step, "ranks": [rank.to_json() for rank in self.ranks]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NodeEvidence:
        step = data.get("step")
        ranks = tuple(RankEvidence.from_json(rank) for rank in data["ranks"])
        return cls(int(data["node"]), ranks, None if step is None else int(step))


@dataclass(frozen=True)
class Culprit:
    node: int
    ranks: tuple[int, ...]
    how: str
    stack: tuple[str, ...] = field(default=())  # the culprit's stack top, when it gave one

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "ranks": list(self.ranks), "how": self.how, "stack": list(self.stack)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Culprit:
        ranks = tuple(int(rank) for rank in data["ranks"])
        return cls(int(data["node"]), ranks, str(data["how"]), tuple(str(frame) for frame in data.get("stack") or ()))


@dataclass(frozen=True)
class Attribution:
    culprit: Culprit | None
    note: str  # why there is no culprit, or what else was seen
    doubted: bool = False  # no culprit because a rank's own record was not believed: the later rules may decide


def attribute(reports: Sequence[NodeEvidence], nodes: int) -> Attribution:
    """The culprit of a hang from the summaries of ``nodes`` nodes (missing ones are unknown)."""
    ranks = [(report.node, rank) for report in reports for rank in report.ranks]
    missing = sorted(set(range(nodes)) - {report.node for report in reports})
    stopped = [(node, rank) for node, rank in ranks if rank.state == STOPPED]
    if stopped:
        return _named(stopped, f"its process is stopped (state T: SIGSTOP or a debugger), pid {stopped[0][1].pid}")
    if missing:
        return Attribution(None, f"no evidence from node {', '.join(map(str, missing))} before the deadline")
    lag = _collective_lag(ranks)
    if lag is not None and not lag.doubted:
        return lag
    found = _outlier_stack(ranks) or _oldest_step(reports) or _only_node(reports, nodes)
    if found is not None:
        return Attribution(found.culprit, "; ".join(filter(None, [found.note, lag.note if lag else ""])))
    return lag or Attribution(None, _undecided(ranks))


def _collective_lag(ranks: list[tuple[int, RankEvidence]]) -> Attribution | None:
    known = [(node, rank) for node, rank in ranks if rank.rank is not None and rank.collectives is not None]
    if not known or len(known) != len(ranks):
        return None  # a rank without a count could be the one behind
    groups = set().union(*(rank.collectives or {} for _, rank in known))
    if (alone := _completed_alone(known, groups)) is not None:
        return alone
    for group in sorted(groups):
        # only the group's members: a rank outside a subgroup has no count for it, not count 0
        members = [(node, rank) for node, rank in known if group in (rank.collectives or {})]
        counts = {rank.rank: (rank.collectives or {})[group] for _, rank in members}
        low, high = min(counts.values()), max(counts.values())
        if low == high:
            continue
        behind = [(node, rank) for node, rank in members if counts[rank.rank] == low]
        if all(_waits_in(rank, group, low, high) for _, rank in behind):
            ahead = [(node, rank) for node, rank in members if counts[rank.rank] > low]
            return _disbelieved(ahead, behind, group, low, high)
        others = sorted({count for count in counts.values() if count != low})
        op = next((rank.last_op for _, rank in members if counts[rank.rank] == high and rank.last_op), None)
        how = (
            f"its newest collective on process group {group} is #{low}; the other ranks reached "
            f"#{'/#'.join(map(str, others))}" + (f" ({op})" if op else "") + " and wait for it"
        )
        return _named(behind, how)
    return _desync(known)


def _completed_alone(known: list[tuple[int, RankEvidence]], groups: set[str]) -> Attribution | None:
    """Ranks behind the others, each inside its newest collective (its main thread in a
    torch.distributed call, that collective not completed), while a rank ahead completed it: a
    collective completes only with every member in it, so that rank went through it alone (an
    empty or mismatched tensor, a call that returned early) and on. A rank behind outside any
    collective is the usual one behind, whatever it has not seen complete (DDP waits for its
    all-reduces late), and is left to the count."""
    for group in sorted(groups):
        members = [(node, rank) for node, rank in known if group in (rank.collectives or {})]
        if any(rank.completed is None or group not in rank.completed for _, rank in members):
            continue  # a recorder that keeps no completions (a hooked backend's) shows nothing here
        counts = {rank.rank: (rank.collectives or {})[group] for _, rank in members}
        low = min(counts.values())
        behind = [rank for _, rank in members if counts[rank.rank] == low]
        if len(behind) == len(members) or not all(
            _in_collective(rank) and (rank.completed or {})[group] < low for rank in behind
        ):
            continue
        through = [(node, rank) for node, rank in members if (rank.completed or {})[group] >= low]
        if through:
            how = (
                f"it completed collective #{low} on process group {group}, which the other ranks still wait "
                "in: it went through without them (an empty or mismatched tensor) and on"
            )
            return _named(through, how)
    return None


def _waits_in(rank: RankEvidence, group: str, number: int, claimed: int) -> bool:
    """Whether the rank's main thread stands in a collective call, its newest, #``number``, which it has
    not seen complete, so that no member can be past it, as a rank claiming #``claimed`` says it is.
    Where its recorder keeps no completions, only a claim two past it is impossible: one past may be
    the rank's own record lagging."""
    completed = (rank.completed or {}).get(group)
    unseen = claimed - number >= 2 if completed is None else completed < number
    return _in_collective(rank) and unseen


def _disbelieved(
    ahead: list[tuple[int, RankEvidence]], behind: list[tuple[int, RankEvidence]], group: str, low: int, high: int
) -> Attribution:
    """No culprit from counts that a rank's own record contradicts: it claims to be past a collective its
    peers still wait in."""

    def who(found: list[tuple[int, RankEvidence]]) -> str:
        return ", ".join(f"rank {rank.rank} (node {node})" for node, rank in found)

    note = (
        f"{who(ahead)} says it reached #{high} on process group {group}, past #{low}, which {who(behind)} "
        f"still waits in: a collective completes only with every member, so its own record is not believed "
        "and the counts name no one"
    )
    return Attribution(None, note, doubted=True)


def _in_collective(rank: RankEvidence) -> bool:
    """Whether the rank's main thread stands in a torch.distributed call (its innermost frame)."""
    return bool(rank.stack) and "/torch/distributed/" in rank.stack[0]


def _desync(known: list[tuple[int, RankEvidence]]) -> Attribution | None:
    """Every rank at the same collective number, but not the same collective: a rank skipped one
    earlier, and the group paired the wrong calls. The odd ones out are named when they are few,
    or when the job's own rhythm shows which call belongs there."""
    ops = Counter(rank.last_op for _, rank in known)
    if len(ops) < 2:
        return None
    (common, count), *_ = ops.most_common()
    if count > len(known) / 2:
        odd = [(node, rank) for node, rank in known if rank.last_op != common]
        return _named(
            odd,
            f"it waits in {odd[0][1].last_op} where the other {count} ranks wait in {common}: "
            "a skipped collective paired the wrong calls",
        )
    said = ", ".join(f"rank {rank.rank} in {rank.last_op}" for _, rank in sorted(known, key=lambda k: k[1].rank or 0))
    return _off_rhythm(known) or Attribution(
        None,
        f"the ranks wait in different collectives of the same number ({said}): "
        "a skipped collective, but neither a majority nor the job's repeating pattern shows whose",
    )


def _off_rhythm(known: list[tuple[int, RankEvidence]]) -> Attribution | None:
    """Ranks split evenly between different collectives of one number (two ranks, say): the
    collectives they all agreed on before it repeat with a period, seen at least twice, which
    says what comes next. The ranks whose call breaks that rhythm skipped or added one."""
    groups = set().union(*(rank.history or {} for _, rank in known))
    for group in sorted(groups):
        members = [(node, rank) for node, rank in known if group in (rank.collectives or {})]
        histories = [(rank.history or {}).get(group, ()) for _, rank in members]
        if not all(histories) or len({history[-1] for history in histories}) < 2:
            continue
        agreed = _agreed([history[:-1] for history in histories])
        period = _period(agreed)
        if period is None:
            continue
        expected = agreed[len(agreed) - period]
        off = [
            (node, rank) for (node, rank), history in zip(members, histories, strict=True) if history[-1] != expected
        ]
        if len(off) == len(members):
            continue
        rhythm = ", ".join(agreed[-period:])
        waits_in = next(history[-1] for history in histories if history[-1] != expected)
        return _named(
            off,
            f"it waits in {waits_in} where the job's collectives on process group {group}, "
            f"repeating every {period} ({rhythm}), call {expected}: it skipped or added a collective",
        )
    return None


def _agreed(histories: list[tuple[str, ...]]) -> tuple[str, ...]:
    """The newest run of collectives every history shows alike (histories end at the same number)."""
    run: list[str] = []
    for back in range(1, min(map(len, histories)) + 1):
        names = {history[-back] for history in histories}
        if len(names) != 1:
            break
        run.append(names.pop())
    return tuple(reversed(run))


def _period(names: tuple[str, ...]) -> int | None:
    """The shortest period the names repeat with, seen at least twice over; None if there is none."""
    for period in range(1, len(names) // 2 + 1):
        if all(names[i] == names[i - period] for i in range(period, len(names))):
            return period
    return None


def _outlier_stack(ranks: list[tuple[int, RankEvidence]]) -> Attribution | None:
    stacks = [(node, rank) for node, rank in ranks if rank.stack]
    if len(stacks) < 3 or len(stacks) != len(ranks):
        return None
    shapes = Counter(_shape(rank.stack) for _, rank in stacks)
    (common, count), *rest = shapes.most_common()
    if not rest or len(shapes) != 2 or count <= len(stacks) / 2:
        return None
    odd = [(node, rank) for node, rank in stacks if _shape(rank.stack) != common]
    return _named(odd, f"its stack differs from the {count} other ranks', which share one ({_top(common)})")


def _oldest_step(reports: Sequence[NodeEvidence]) -> Attribution | None:
    steps = {report.node: report.step for report in reports}
    if len(steps) < 2 or any(step is None for step in steps.values()):
        return None
    low = min(step for step in steps.values() if step is not None)
    behind = [node for node, step in steps.items() if step == low]
    if len(behind) != 1:
        return None
    others = sorted({step for step in steps.values() if step is not None and step != low})
    report = next(report for report in reports if report.node == behind[0])
    how = f"its last reported step is {low}; the other nodes reached {'/'.join(map(str, others))}"
    return _named([(report.node, rank) for rank in report.ranks], how)


def _only_node(reports: Sequence[NodeEvidence], nodes: int) -> Attribution | None:
    """A job of one node: the node is certain, and its rank too when it has only one."""
    if nodes != 1 or len(reports) != 1:
        return None
    (report,) = reports
    if len(report.ranks) == 1:
        return _named([(report.node, report.ranks[0])], "the job's only rank")
    return Attribution(Culprit(report.node, (), "the job's only node; its ranks do not show which of them"), "")


def _named(found: Sequence[tuple[int, RankEvidence]], how: str) -> Attribution:
    nodes = sorted({node for node, _ in found})
    if len(nodes) != 1:
        where = ", ".join(map(str, nodes))
        return Attribution(None, f"ranks on several nodes ({where}) show it: {how}")
    ranks = tuple(sorted(rank.rank for _, rank in found if rank.rank is not None))
    stack = next((rank.stack for _, rank in found if rank.stack), ())
    return Attribution(Culprit(nodes[0], ranks, how, stack[:3]), "")


def _shape(stack: tuple[str, ...]) -> tuple[str, ...]:
    """The frames without their line numbers: ranks in one loop stand at different lines of it."""
    return tuple(_LINE.sub(")", frame) for frame in stack)


def _top(shape: tuple[str, ...]) -> str:
    return shape[0] if shape else "no frames"


def _undecided(ranks: list[tuple[int, RankEvidence]]) -> str:
    if not ranks:
        return "no rank answered: none had started its process group, or none runs Python"
    gone = sorted({node for node, rank in ranks if rank.state in (GONE, ZOMBIE)})
    if gone:
        return f"a process on node {', '.join(map(str, gone))} exited before it could be asked"
    if not any(rank.collectives for _, rank in ranks):
        read = sorted({name for _, rank in ranks for name in rank.recorders or ()})
        where = f" in torch's flight recorders ({', '.join(read)})" if read else ""
        return f"no rank recorded its collectives{where}, and no stack or step stands out"
    doubted = [f"rank {rank.rank} on node {node}: {rank.doubt}" for node, rank in ranks if rank.doubt]
    if doubted:
        return f"{'; '.join(doubted)}; without its record no count can name anyone"
    silent = [f"rank {rank.rank} on node {node}" for node, rank in ranks if rank.collectives is None]
    if silent:
        return f"{', '.join(silent)} did not report its collectives before the deadline, and may be the one behind"
    return "every rank reached the same collective, and no stack or step stands out"


def describe_culprit(culprit: Culprit | Mapping[str, Any] | None, note: str | None) -> str:
    """The verdict in words, for the agent's log and ``hacfg events``."""
    if culprit is None:
        return f"the hang's culprit is unknown: {note or 'no evidence'}"
    if not isinstance(culprit, Culprit):
        culprit = Culprit.from_json(culprit)
    ranks = ", ".join(map(str, culprit.ranks))
    who = f"node {culprit.node}" + (f" rank {ranks}" if ranks else "")
    where = f"; stack top: {culprit.stack[0]}" if culprit.stack else ""
    return f"the hang's culprit is {who}: {culprit.how}{where}"
