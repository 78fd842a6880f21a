"""A group's memory tiers: the copy points every tier keeps, and the leader's choice of the step
every node resumes (its own, or its copy on the next node) from what each node's join said."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from hacfg import memory
from hacfg.agent.group.decisions import Held, joined, memory_plan
from hacfg.agent.rounds import MemoryPlan, Plan
from hacfg.restart.policy import Budgets

ADDRESSES = (("10.0.0.1", 29500), ("10.0.0.2", 29501), ("10.0.0.3", 29502))


@pytest.fixture
def shm() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(dir=memory.ROOT, prefix="hacfg-test-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


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
