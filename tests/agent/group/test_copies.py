"""A group's memory tiers: the copy points every tier keeps, and the leader's choice of the step
every node resumes (its own, or its copy on the next node) from what each node's join said."""

from __future__ import annotations

import time

import pytest
import torch
from kit.processes import free_port
from kit.timing import at_most

from hacfg import memory
from hacfg.agent.group import peer
from hacfg.agent.group.channel import Channel
from hacfg.agent.group.copies import PeerCopies
from hacfg.agent.group.decisions import Held, joined, memory_plan
from hacfg.agent.group.discovery import GroupSpec
from hacfg.agent.group.liveness import POLL, Liveness, keeping_alive
from hacfg.agent.group.signing import Signer
from hacfg.agent.rounds import MemoryPlan, Plan
from hacfg.restart.policy import Budgets

ADDRESSES = (("10.0.0.1", 29500), ("10.0.0.2", 29501), ("10.0.0.3", 29502))


def test_a_group_tier_keeps_its_two_newest_copy_points_and_the_step_before_its_newest(shm):
    for step in range(1, 10):
        memory.save(shm, step, {"w": torch.full((4,), float(step))}, rank=0, ranks=1, copy_every=3)
    assert memory.held(shm) == [9, 8, 6]  # the newest is a copy point itself
    memory.save(shm, 10, {"w": torch.zeros(4)}, rank=0, ranks=1, copy_every=3)
    memory.save(shm, 11, {"w": torch.zeros(4)}, rank=0, ranks=1, copy_every=3)
    assert memory.held(shm) == [11, 10, 9, 6]
    assert memory.newest_complete(shm, 3) == (9, shm / "step_9")
    assert memory.tidy(shm, 3) == [] and memory.held(shm) == [11, 10, 9, 6]
    memory.save(shm, 12, {"w": torch.zeros(4)}, rank=0, ranks=1, copy_every=3)
    assert memory.held(shm) == [12, 11, 9]
    memory.save(shm, 13, {"w": torch.zeros(4)}, rank=0, ranks=1)  # one node on its own: no copy points
    assert memory.held(shm) == [13]


def test_a_node_killed_inside_its_save_resumes_with_the_others_from_the_step_before(tmp_path):
    """Both nodes completed step 11; node 1 completed 12 too, node 0 was killed inside its save of
    it (a hidden file in step_12): every node resumes 11, not the older copy point (10) or disk."""
    tiers = [tmp_path / "node0", tmp_path / "node1"]
    for tier in tiers:
        tier.mkdir()
        for step in range(1, 12):
            memory.save(tier, step, {"w": torch.full((4,), float(step))}, rank=0, ranks=1, copy_every=5)
    memory.save(tiers[1], 12, {"w": torch.zeros(4)}, rank=0, ranks=1, copy_every=5)
    (tiers[0] / "step_12").mkdir()
    (tiers[0] / "step_12" / ".rank_0.4242.tmp").write_bytes(b"torn")
    memory.tidy(tiers[0], 5)
    plan, doubt = memory_plan([held(set(memory.held(tier)), node=node) for node, tier in enumerate(tiers)], None, 5)
    assert (plan.step, plan.fetch, doubt) == (11, (), None)


def held(steps: set[int], copies: dict[int, int] | None = None, node: int = 0) -> Held:
    return Held(frozenset(steps), copies or {}, ADDRESSES[node])


def test_every_node_resumes_the_newest_step_they_all_hold():
    plan, doubt = memory_plan([held({12, 10, 5}, node=0), held({11, 10, 5}, node=1)], (8,), 5)
    assert plan == MemoryPlan(ADDRESSES[:2], 5, 10, ()) and doubt is None


def test_a_node_that_lost_its_tier_fetches_its_copy_from_the_next_node():
    # node 1 lost everything; node 2 keeps node 1's copy of step 10, which nodes 0 and 2 hold too
    tiers = [held({13, 10, 5}, {2: 10}, 0), held(set(), {}, 1), held({13, 10, 5}, {1: 10}, 2)]
    plan, doubt = memory_plan(tiers, None, 5)
    assert (plan.step, plan.fetch, doubt) == (10, (1,), None)


def test_a_copy_on_any_other_node_than_the_next_is_not_where_the_node_looks():
    tiers = [held({10}, {1: 10}, 0), held(set(), {}, 1), held({10}, {}, 2)]
    assert memory_plan(tiers, None, 5)[0].step is None


def test_disk_wins_when_it_is_newer_and_memory_on_a_tie():
    tiers = [held({10, 5}, node=0), held({10, 5}, node=1)]
    assert memory_plan(tiers, (12,), 5)[0].step is None
    assert memory_plan(tiers, (10,), 5)[0].step == 10


def test_tiers_newer_than_disk_with_no_step_in_common_are_said():
    plan, doubt = memory_plan([held({12}, node=0), held({11}, node=1)], (4,), 5)
    assert plan.step is None
    assert doubt == "the nodes' memory tiers hold no step in common (node 0: [12]; node 1: [11]): the round resumes from disk"


def test_a_node_without_a_tier_leaves_the_group_on_disk():
    assert memory_plan([held({10}, node=0), None], None, 5) == (None, None)


@pytest.mark.parametrize("join", [
    [],
    {"precheck": 3},
    {"precheck": None, "memory": {"steps": "10", "copies": {}, "address": ["h", 1]}},
    {"precheck": None, "memory": {"steps": [-1], "copies": {}, "address": ["h", 1]}},
    {"precheck": None, "memory": {"steps": [True], "copies": {}, "address": ["h", 1]}},
    {"precheck": None, "memory": {"steps": [1], "copies": {"x": 1}, "address": ["h", 1]}},
    {"precheck": None, "memory": {"steps": [1], "copies": {"1": 2.5}, "address": ["h", 1]}},
    {"precheck": None, "memory": {"steps": [1], "copies": {}, "address": ["h", 70000]}},
    {"precheck": None, "memory": {"steps": [1], "copies": {}}},
])
def test_a_join_that_no_agent_sends_is_refused(join):
    with pytest.raises(ValueError):
        joined(join)


def test_a_join_reads_back_as_the_node_sent_it():
    sent = {"precheck": None, "memory": {"steps": [10, 5], "copies": {"2": 5}, "address": ["10.0.0.1", 29500]}}
    assert joined(sent) == (None, Held(frozenset({10, 5}), {2: 5}, ("10.0.0.1", 29500)))
    assert joined({"precheck": "no GPU", "memory": None}) == ("no GPU", None)


def test_a_plan_carries_its_memory_step_and_refuses_a_malformed_one():
    plan = Plan(round=2, budgets=Budgets(), memory=MemoryPlan(ADDRESSES, 5, 10, (1,)))
    assert Plan.from_json(plan.to_json()) == plan
    for broken in ({"peers": [["h", 0]], "copy_every": 5}, {"peers": [], "copy_every": 5, "fetch": [0]},
                   {"peers": [None], "copy_every": "5"}, {"peers": [None], "copy_every": 5, "step": -2}):
        with pytest.raises(ValueError):
            MemoryPlan.from_json(broken)


def test_a_copy_that_could_not_be_fetched_is_not_planned_again():
    lost = Held(frozenset(), {}, ADDRESSES[1], unfetched=frozenset({10}))
    plan, _ = memory_plan([held({10, 5}, {1: 10}, 0), lost], None, 5)
    assert plan.step is None


def test_a_node_whose_keeper_is_gone_says_why_and_does_not_ask_again(shm):
    """Node 1 lost its tier and node 0, which keeps its copy, no longer listens: the round cannot
    resume memory on node 1 (one line, the round fails like an unseen checkpoint), and its next join
    says so, so the leader plans that copy no more."""
    spec = GroupSpec(nnodes=2, rank=1, host="127.0.0.1", port=free_port())
    key = peer.peer_key(b"s" * 32, "job")
    gone = ("127.0.0.1", free_port())
    copies = PeerCopies(shm, key, spec, "job", 5, 1.0, echo=lambda line: None)
    try:
        plan = MemoryPlan((gone, copies.receiver.address), 5, step=10, fetch=(1,))
        resume = copies.resume(plan)
        assert resume.path is None and resume.tier == "peer"
        assert resume.missing.startswith("cannot resume memory step 10 of the job: its copy could not be fetched from node 0")
        assert copies.holdings()["unfetched"] == [10]
        assert joined({"precheck": None, "memory": copies.holdings()})[1].unfetched == {10}
    finally:
        copies.close()


def test_a_node_fetching_its_step_keeps_alive_so_node_0_does_not_take_it_for_lost():
    """A fetch of gigabytes takes longer than node 0 waits for a silent node: the fetching node's
    keep-alives go on through it, on a real store, signed, as node 0's liveness reads them."""
    import torch.distributed

    port, secret = free_port(), b"s" * 32
    leader = Channel(GroupSpec(nnodes=2, rank=0, host="127.0.0.1", port=port, timeout=10), torch.distributed.TCPStore, print)
    leader.connect()
    node = Channel(GroupSpec(nnodes=2, rank=1, host="127.0.0.1", port=port, timeout=10), torch.distributed.TCPStore, print)
    node.connect()
    leader.signer, node.signer = Signer(secret, 0), Signer(secret, 1)
    seen = Liveness(leader, 3)
    with keeping_alive(node, 3):
        first = seen._count(leader.store, 1)
        deadline = time.monotonic() + at_most(10)
        while seen._count(leader.store, 1) <= first:
            assert time.monotonic() < deadline, "no keep-alive while fetching"
            time.sleep(0.05)
    counted = seen._count(leader.store, 1)
    time.sleep(3 * POLL)
    assert seen._count(leader.store, 1) == counted  # and none once it is done


def test_a_join_says_no_more_than_a_tier_can_hold_whatever_its_trainer_made(shm):
    for step in range(1, 40):
        (shm / f"step_{step}").mkdir()
        memory.save_file(shm / f"step_{step}", step, {"w": torch.zeros(1)}, rank=0)
    for owner in (1, 7, 900):
        (shm / f"peer-{owner}" / "step_3").mkdir(parents=True)
        memory.save_file(shm / f"peer-{owner}" / "step_3", 3, {"w": torch.zeros(1)}, rank=0)
    copies = PeerCopies(shm, b"k" * 32, GroupSpec(nnodes=2, rank=0, host="127.0.0.1", port=free_port()), "job", 5, 1.0, print)
    try:
        memory.pin(shm, set(range(1, 40)))  # as the trainer can, and no prune removes them
        said = copies.holdings()
    finally:
        copies.close()
    assert said["steps"] == [39, 38, 37, 36, 35, 34, 33, 32] and said["copies"] == {"1": 3}


def test_a_plan_naming_another_number_of_receivers_than_the_group_has_is_rejected(tmp_path):
    """Each node aims its copies at the next node's receiver from the plan: one that names fewer
    (or more) receivers than the group has nodes is never acted on, and the group is told."""
    import torch.distributed

    from hacfg.agent.group.channel import GroupRejected
    from hacfg.agent.group.protocol import GroupRounds
    from hacfg.agent.group.signing import JobSecret
    from hacfg.restart.policy import Policy

    spec = GroupSpec(nnodes=2, rank=1, host="127.0.0.1", port=free_port(), timeout=10)
    leader = Channel(GroupSpec(nnodes=2, rank=0, host="127.0.0.1", port=spec.port, timeout=10), torch.distributed.TCPStore, print)
    leader.connect()
    rounds = GroupRounds(spec, Policy(), torch.distributed.TCPStore, echo=print, secret=JobSecret({}, tmp_path, None, create=True, timeout=0))
    rounds.channel.connect()
    rounds.channel.signer = Signer(b"s" * 32, 1)
    plan = Plan(round=2, budgets=Budgets(), memory=MemoryPlan(ADDRESSES[:1], 5, 10, ()))
    with pytest.raises(GroupRejected, match="names 1 nodes' receivers of peer copies, not 2"):
        rounds._plan(2, plan.to_json())
    assert rounds._plan(2, Plan(round=2, budgets=Budgets(), memory=MemoryPlan(ADDRESSES[:2], 5)).to_json()).memory.peers == ADDRESSES[:2]
