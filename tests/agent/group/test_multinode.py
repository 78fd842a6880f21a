"""Multi-node recovery with real processes: N emulated nodes on 127.0.0.1, each `hacfg agent` around
real torch DDP (gloo on CPU), the agents grouped through torch's TCPStore.

Every fault must end with one verdict on every node, every rank resuming from the same step, the
same counters everywhere, final weights bit-identical to a fault-free run, and no process left.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from importlib.util import find_spec
from pathlib import Path
from xml.etree import ElementTree

import pytest
from kit.multinode import EVERY, STEPS, STORE_ROUNDS, TRAIN, Job
from kit.paths import REPO
from kit.processes import free_port, left_running

# groups of agents around real torch DDP; torch is imported where it is used, so collecting this
# module (every xdist worker does) costs no torch import
pytestmark = [pytest.mark.slow, pytest.mark.skipif(find_spec("torch") is None, reason="torch is not installed")]

def same_verdict_everywhere(job: Job) -> list[dict]:
    """Every node recorded the same rounds, causes, decisions and counters; returns node 0's."""
    keys = ("round", "cause", "cause_node", "action", "reason", "attempt", "restarts", "counted", "user_streak", "hang_streak")
    reference = [{k: d.get(k) for k in keys} for d in job.decisions(0)]
    for rank in range(1, job.nnodes):
        assert [{k: d.get(k) for k in keys} for d in job.decisions(rank)] == reference, f"node {rank} disagrees with node 0"
    starts = {rank: [(e["round"], resumed_step(e)) for e in job.events(rank) if e["event"] == "attempt_start"] for rank in range(job.nnodes)}
    assert all(s == starts[0] for s in starts.values()), starts
    return job.decisions(0)


def resumed_step(start: dict) -> str | None:
    """What an attempt resumed: the checkpoint on the shared disk, or the step in the node's own memory tier."""
    return Path(start["resume_from"]).name if start["resume_tier"] in ("memory", "peer") else start["resume_from"]


def assert_no_process_left(job: Job) -> None:
    assert not (left := left_running(job.ckpt)), f"processes left: {left}"


@pytest.fixture(scope="session")
def reference(tmp_path_factory) -> dict[int, dict]:
    """Final weights of fault-free 2- and 4-node runs of the plain script, no agent around it:
    computed once per test run and shared by the xdist workers (the most expensive fixture here)."""
    import torch

    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    shared = tmp_path_factory.getbasetemp().parent / f"reference-{run}" if run else tmp_path_factory.getbasetemp() / "reference"
    shared.mkdir(exist_ok=True)
    with (shared / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the first worker computes, the others wait and read
        for nnodes in (2, 4):
            if not (shared / f"{nnodes}.pt").exists():
                torch.save(fault_free_weights(shared / f"job{nnodes}", nnodes), shared / f"{nnodes}.pt")
    return {nnodes: torch.load(shared / f"{nnodes}.pt", weights_only=True) for nnodes in (2, 4)}


def fault_free_weights(root: Path, nnodes: int) -> dict:
    """Every rank ends with the same weights; returns them."""
    import torch

    ckpt, out, port = root / "ckpt", root / "out", free_port()
    train = [sys.executable, str(TRAIN), "--ckpt", str(ckpt), "--out", str(out), "--steps", str(STEPS), "--every", str(EVERY)]
    ranks = [subprocess.Popen(train, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={
        **os.environ, "PYTHONPATH": str(REPO), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
        "WORLD_SIZE": str(nnodes), "NODE_RANK": str(rank)}) for rank in range(nnodes)]
    outputs = [rank.communicate(timeout=240)[0].decode(errors="replace") for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0] * nnodes, outputs
    weights = torch.load(out / "rank0.pt", weights_only=True)
    for rank in range(1, nnodes):
        assert_weights_equal(torch.load(out / f"rank{rank}.pt", weights_only=True), weights)
    return weights


def assert_weights_equal(got: dict, want: dict) -> None:
    import torch

    assert got.keys() == want.keys()
    for name in want:
        assert torch.equal(got[name], want[name]), f"{name} differs"


def assert_recovered(job: Job, codes: dict[int, int], reference: dict) -> list[dict]:
    assert codes == dict.fromkeys(range(job.nnodes), 0), "\n".join(job.output(r)[-3000:] for r in codes)
    decisions = same_verdict_everywhere(job)
    for rank in range(job.nnodes):
        assert job.resumed(rank) == job.resumed(0), f"rank {rank} resumed from {job.resumed(rank)}, rank 0 from {job.resumed(0)}"
        assert job.attempts(rank) == list(range(1, len(decisions) + 1))  # HACFG_ATTEMPT, the same on every rank
        assert_weights_equal(job.weights(rank), reference[job.nnodes])
    assert_no_process_left(job)
    if job.warm:
        assert_restarts_started_warm(job)
    return decisions


def assert_restarts_started_warm(job: Job) -> None:
    """Every attempt but an agent's first (a restarted agent has a first again) was forked from that
    node's warm interpreter."""
    warm = 0
    for rank in range(job.nnodes):
        events = job.events(rank)
        starts = [(e["start"], e["start_reason"]) for e in events if e["event"] == "attempt_start"]
        later = [how for how, why in starts if why != "no warm interpreter was prepared yet"]
        assert len(starts) - len(later) == sum(e["event"] == "agent_start" for e in events), f"node {rank}: {starts}"
        assert all(how == "warm" for how in later), f"node {rank}: {starts}"
        warm += len(later)
    assert warm, "no attempt started warm"


# Each case runs a fault where it differs from the other: a kill inside rank 0's checkpoint save on two
# cold nodes (the save it cuts short must not become the resume point), a kill between saves on four warm
# ones. torchrun's view of a killed worker is the hang test's and the failure corpus's.
@pytest.mark.parametrize(("nnodes", "warm", "fault"), [(2, False, "kill-in-save:1:8"), (4, True, "kill:3:6")], ids=["2-cold-in-save", "4-warm"])
def test_a_killed_worker_restarts_every_node_from_one_checkpoint(tmp_path, reference, nnodes, warm, fault, cli):
    job = Job(tmp_path, nnodes, faults=(fault,), warm=warm)
    decisions = assert_recovered(job, job.run(), reference)
    assert [(d["action"], d["cause"], d["cause_node"]) for d in decisions] == [("proc_restart", "environment", nnodes - 1), ("success", "success", 0)]
    assert "SIGKILL" in decisions[0]["cause_reason"]
    assert (decisions[0]["counted"], decisions[0]["restarts"]) == (1, 1)
    assert job.resumed(0) == [0, 4]  # with a kill in step_8's save: cut short on node 0 by the job's stop, nobody resumes from it
    peers = [e for r in range(nnodes - 1) for e in job.events(r) if e["event"] == "attempt_exit" and e["cause"] != "success"]
    assert peers and all(e["cause"] == "peer" or e.get("peer") for e in peers)  # recorded as consequences, not counted
    assert stop_latency(job) < 2.0  # every node's workers stopped within 2 s of the first failure seen
    assert_one_timeline(job, cli, tmp_path / "job.svg")


def stop_latency(job: Job) -> float:
    """Seconds from the first failed round's first attempt_exit (the failure seen) to its last (all stopped)."""
    first_round = job.decisions(0)[0]["round"]
    exits = [datetime.fromisoformat(e["time"].replace("Z", "+00:00")) for r in range(job.nnodes) for e in job.events(r)
             if e["event"] == "attempt_exit" and e["round"] == first_round]
    return (max(exits) - min(exits)).total_seconds()


def assert_one_timeline(job: Job, cli, svg: Path) -> None:
    """The nodes' logs read together: one job timeline in time order, one decision per node for the
    fault on the last node, the recovery's stages per node, and one plot lane per node."""
    culprit, nodes = job.nnodes - 1, [str(rank) for rank in range(job.nnodes)]
    logs = [job.ckpt / ".hacfg" / f"node-{rank}" / "events.jsonl" for rank in range(job.nnodes)]
    result = cli("events", *logs)
    assert result.code == 0, result.err
    rows = result.out.split("\n\n")[0].splitlines()[1:]
    assert {f"node {rank}:" for rank in nodes} <= {row.split("  ")[-1][:7] for row in rows if "node " in row}
    times = [row.split()[0] for row in rows]
    assert times == sorted(times)
    decisions = [row for row in rows if " decision " in f" {row} " and "proc_restart" in row]
    assert len(decisions) == job.nnodes and all(f"environment on node {culprit}" in row for row in decisions)
    stages = result.out.split(f"recovery after round 1 (environment on node {culprit}): ")[1].splitlines()[1:]
    # where the recovery went, per node: the trainer's start-up after its first line, up to the first step it beats
    assert stages[0].split() == ["node", "stop", "decision", "start", "rendezvous+load+first", "step", "total"]
    assert [row.split()[0] for row in stages[1:job.nnodes + 1]] == nodes
    assert cli("events", *logs, "--plot", svg).code == 0
    labels = "".join(ElementTree.parse(svg).getroot().itertext())
    assert all(f"node {rank}" in labels for rank in nodes) and labels.count("attempt 2") == job.nnodes  # one lane per node, one job axis


# A hung attempt is a cold one (the first) either way: what follows it is the killed worker's test
@pytest.mark.torch
@pytest.mark.parametrize("torchrun", [False, True], ids=["agent", "torchrun"])
def test_a_hung_worker_stops_every_node_and_does_not_count(tmp_path, reference, torchrun):
    # torchrun waits silently at its exit barrier for the other node's torchrun, and a restarted
    # rank waits in its first collective for a slower one: a hang timeout must outlast both, as
    # real ones (minutes) do, on a machine busy with other tests too
    timeout = "12s" if torchrun else "8s"
    job = Job(tmp_path, 2, options=("--hang-timeout", timeout, "--hang-retry"), faults=("hang:1:6",), torchrun=torchrun)
    decisions = assert_recovered(job, job.run(), reference)
    assert [d["cause"] for d in decisions] == ["hang", "success"]
    assert (decisions[0]["counted"], decisions[0]["hang_streak"], decisions[0]["restarts"]) == (0, 1, 1)
    # The victim, node 0, may go quiet first. The evidence names node 1, from its flight recorder,
    # torchrun's workers too (they sit in sessions of their own); it may say it cannot tell only
    # for a rank that exited or kept silent past the deadline: never a guess shown as a fact.
    culprit = decisions[0]["culprit"]
    assert decisions[0]["cause_node"] == (culprit["node"] if culprit else None)  # one answer to which node
    if culprit is None:
        assert re.search(r"exited before it could be asked|before the deadline", decisions[0]["culprit_note"])
        return
    assert (culprit["node"], culprit["ranks"]) == (1, [1]) and "newest collective" in culprit["how"]
    if culprit["stack"]:  # a stack dump that came too late is left out, not waited for
        assert culprit["stack"][0].startswith("fire (") and "train_ddp.py" in culprit["stack"][0]
    assert "the hang's culprit is node 1 rank 1" in job.output(0)


def test_a_user_error_gives_up_on_every_node_with_the_commands_code(tmp_path):
    job = Job(tmp_path, 2, faults=("raise:1:5",))
    codes = job.run()
    assert codes == {0: 1, 1: 1}
    decisions = same_verdict_everywhere(job)
    assert [(d["cause"], d["cause_node"], d["action"]) for d in decisions] == [("user", 1, "give_up")]
    assert_no_process_left(job)


def test_a_spent_budget_escalates_every_node_with_138(tmp_path):
    """A killed worker spends the one restart; a collective's error in the next attempt, an environment
    fault of the whole job, then sends it elsewhere."""
    job = Job(tmp_path, 2, options=("--max-restarts", "1"), faults=("kill:1:3:1", "collective:0:3:2"))
    codes = job.run()
    assert codes == {0: 138, 1: 138}
    decisions = same_verdict_everywhere(job)
    assert [(d["action"], d["cause"], d["cause_node"], d["counted"]) for d in decisions] == [
        ("proc_restart", "environment", 1, 1), ("job_reschedule", "environment", 0, 1)]
    assert "Connection closed by peer" in decisions[1]["cause_reason"]
    assert_no_process_left(job)


@pytest.mark.parametrize(("victim", "warm"), [(1, False), (0, True)], ids=["follower-cold", "leader-warm"])
def test_an_agent_killed_and_restarted_rejoins_with_the_jobs_counters(tmp_path, reference, victim, warm):
    job = Job(tmp_path, 2, options=("--grace", "2"), warm=warm)
    for rank in range(2):
        job.start(rank)
    job.wait_for(victim, f"rank {victim} step 6")
    os.killpg(job.agents[victim].pid, signal.SIGKILL)  # the agent and its workers, as a pod restart would
    job.agents[victim].wait()
    job.start(victim)
    decisions = assert_recovered(job, job.wait(), reference)
    assert [(d["action"], d["cause"]) for d in decisions] == [("proc_restart", "environment"), ("success", "success")]
    assert (decisions[0]["cause_node"] == victim and "restarted" in decisions[0]["cause_reason"]) or "stopped" in decisions[0]["cause_reason"]
    assert decisions[0]["counted"] == 1


def test_a_failed_precheck_on_one_node_sends_the_whole_job_elsewhere(tmp_path):
    small = {f"HACFG_PRECHECK_{name}_MIN": "1" for name in ("ROOT", "SHM", "CACHE")}
    job = Job(tmp_path, 2, precheck=True, node_env={0: small, 1: {**small, "HACFG_PRECHECK_SHM_MIN": "1000T"}})
    job.options = ("--config", str(write_config(tmp_path)))
    codes = job.run()
    assert codes == {0: 138, 1: 138}
    decisions = same_verdict_everywhere(job)
    assert [(d["action"], d["cause_node"]) for d in decisions] == [("job_reschedule", 1)]
    assert "shm" in decisions[0]["cause_reason"]
    assert job.resumed(0) == job.resumed(1) == []  # no worker started anywhere


def write_config(tmp_path: Path) -> Path:
    config = tmp_path / "ha.yaml"
    config.write_text("version: 1\nscenario: multi-node\njob: {nodes: 2, accelerator: cpu, network: ethernet}\n"
                      f"checkpoint: {{path: {tmp_path / 'ckpt'}, interval: 10m, resume: true}}\nrestart: {{max: 3}}\nprecheck: true\n")
    return config


def test_a_node_that_cannot_see_the_chosen_checkpoint_fails_the_round_instead_of_training_from_another(tmp_path):
    job = Job(tmp_path, 2, options=("--max-restarts", "1"), faults=("kill:1:6",))
    job.ckpt.mkdir()
    # node 1 gets a private, empty checkpoint folder: storage that is not shared; the platform
    # gives the group its secret (node 1 could not read one node 0 kept on that storage)
    job.node_env = {rank: {"HACFG_GROUP_SECRET": "the job's own secret, from the platform"} for rank in range(2)}
    job.state_dirs[1] = tmp_path / "node-1-state"
    job.wrap[1] = ["unshare", "--mount", "--propagation", "private", "sh", "-c", f'mount -t tmpfs none "{job.ckpt}" && exec "$@"', "sh"]
    codes = job.run()
    assert codes == {0: 138, 1: 138}
    decisions = same_verdict_everywhere(job)
    assert [(d["action"], d["cause_node"]) for d in decisions] == [("proc_restart", 1), ("job_reschedule", 1)]
    assert "cannot see the checkpoint" in decisions[1]["cause_reason"] and "step_4" in decisions[1]["cause_reason"]
    assert job.resumed(1) == [0]  # node 1 never trained from anything but the job's checkpoint
    assert_no_process_left(job)


@pytest.mark.parametrize("shared", [True, False], ids=["agent-store", "rank0-store"])
def test_workers_meet_in_node_0s_agent_store_a_fresh_one_each_attempt(tmp_path, shared):
    """torch's env:// rendezvous connects every rank to the store node 0's agent serves, a new one each
    attempt on a port of its own, so a worker of attempt 1 that connects again reaches nothing of attempt
    2's; TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 leaves it to rank 0's worker on MASTER_PORT again."""
    import torch.distributed

    off = {} if shared else {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    job = Job(tmp_path, 2, node_env=dict.fromkeys(range(2), off))
    records = job.ckpt / "records"
    records.mkdir(parents=True)
    job.script = (str(STORE_ROUNDS), str(records))
    for rank in range(2):
        job.start(rank)
    job.wait_for(1, "rank 1 attempt 1 recorded")
    # a worker of attempt 1, connected to its store: what it leaves there and its connection
    first = json.loads((records / "rank-1-attempt-1.json").read_text())["master_port"]
    stale = torch.distributed.PrefixStore("default_pg", torch.distributed.TCPStore("127.0.0.1", first, is_master=False, timeout=timedelta(seconds=30)))
    stale.set("left-by-attempt-1", "1")
    (records / "stale-set").write_text("left-by-attempt-1")
    for rank in range(2):
        job.wait_for(rank, f"rank {rank} attempt 2 recorded")
    with pytest.raises(torch.distributed.DistNetworkError):
        stale.check(["left-by-attempt-1"])  # its store went with attempt 1: it cannot join attempt 2
    if shared:  # and connecting again, as a stale worker's env:// rendezvous would, reaches no store at all
        with pytest.raises(torch.distributed.DistNetworkError):
            torch.distributed.TCPStore("127.0.0.1", first, is_master=False, timeout=timedelta(seconds=2))
    (records / "go").touch()
    assert job.wait() == {0: 0, 1: 0}, job.output(0)[-3000:]
    seen = {(rank, attempt): json.loads((records / f"rank-{rank}-attempt-{attempt}.json").read_text())
            for rank in range(2) for attempt in (1, 2)}
    for (rank, attempt), record in seen.items():
        if shared:  # every rank a client of a store already listening, told which attempt it is
            assert (record["use_agent_store"], record["restart_count"]) == ("True", str(attempt - 1))
            assert record["listening_before_start"]
            assert record["master_port"] == seen[0, attempt]["master_port"] != job.master_port
        else:  # today's env:// rendezvous: rank 0's worker hosts the store
            assert (record["use_agent_store"], record["restart_count"]) == (None, None)
            assert rank != 0 or not record["listening_before_start"]
            assert record["master_port"] == job.master_port
        assert record["attempt_sum"] == 2 * attempt  # only ranks of the same attempt paired
    assert not seen[0, 2]["stale_key_seen"] and not seen[1, 2]["stale_key_seen"]
    assert (seen[0, 1]["master_port"] != seen[0, 2]["master_port"]) is shared
    assert ("the workers' store is served here" in job.output(0)) is shared
    assert_no_process_left(job)


def test_a_killed_worker_resumes_every_node_from_its_memory_tier(tmp_path, reference):
    """Every node holds step 6 in memory (disk has step 4): the round resumes it on each node from
    its own tier, and the job ends bit-identical to one without the fault."""
    job = Job(tmp_path, 2, faults=("kill:1:6",), train=("--memory",), node_env=shm_env(tmp_path, 2))
    decisions = assert_recovered(job, job.run(), reference)
    assert [d["action"] for d in decisions] == ["proc_restart", "success"]
    for rank in range(2):
        assert job.resumed(rank) == [0, 6]
        assert [e["resume_tier"] for e in job.events(rank) if e["event"] == "attempt_start"] == ["none", "memory"]
    assert not list((tmp_path / "shm").iterdir())  # every tier removed when its agent ended


def test_a_lost_node_resumes_from_its_copy_on_the_next_node(tmp_path, reference):
    """Node 1's agent is killed with its workers, and its memory tier with them (the new agent
    removes what the dead one left): node 0 keeps node 1's copy at one of the last two copy points,
    which node 0 still holds too, so both resume that step, node 1 fetching its state back."""
    job = Job(tmp_path, 2, options=("--peer-copy-every", "2", "--peer-copy-share", "1", "--grace", "2"), node_env=shm_env(tmp_path, 2),
              train=("--memory", "--every", "100", "--step-time", "0.3"))
    for rank in range(2):
        job.start(rank)
    next_to(job, lambda: list((tmp_path / "shm").glob("hacfg-*-node0-*/peer-1/step_*/rank_0.state")))
    os.killpg(job.agents[1].pid, signal.SIGKILL)  # the agent and its workers, as a lost node
    job.agents[1].wait()
    job.start(1)
    decisions = assert_recovered(job, job.wait(), reference)
    assert [d["action"] for d in decisions][-1] == "success"
    tiers = {rank: [e["resume_tier"] for e in job.events(rank) if e["event"] == "attempt_start"] for rank in range(2)}
    assert tiers[0][-1] == "memory" and tiers[1][-1] == "peer", tiers
    resumed = job.resumed(1)[-1]
    assert resumed > 0 and resumed % 2 == 0 and job.resumed(0)[-1] == resumed


def test_a_node_lost_inside_its_peer_copy_resumes_from_the_copy_before(tmp_path, reference):
    """Node 1 is frozen while its sender is inside a copy to node 0 (100 MB of state), then lost:
    node 0 drops the torn copy and keeps the one before, a copy point every node still holds, and
    the job resumes it, node 1 fetching its state back, bit-identical."""
    shm = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="hacfg-test-"))  # the state's real home: tmpfs
    try:
        env = {rank: {"HACFG_MEMORY_ROOT": str(shm)} for rank in range(2)}
        job = Job(tmp_path, 2, options=("--peer-copy-every", "2", "--peer-copy-share", "1", "--grace", "2"), node_env=env,
                  train=("--memory", "--ballast", "100", "--every", "100", "--step-time", "0.2"))
        for rank in range(2):
            job.start(rank)
        copies = next_to(job, lambda: list(shm.glob("hacfg-*-node0-*/peer-1")))
        deadline = time.monotonic() + 120
        while True:  # freeze node 1 mid-copy: an older copy held, the next one on its way
            assert time.monotonic() < deadline and job.agents[0].poll() is None, job.output(0)[-3000:]
            os.killpg(job.agents[1].pid, signal.SIGSTOP)
            held = [int(p.name.removeprefix("step_")) for p in copies[0].glob("step_*") if (p / "rank_0.state").exists()]
            if held and list(copies[0].glob(".incoming-*")):
                break
            os.killpg(job.agents[1].pid, signal.SIGCONT)
            time.sleep(0.02)
        os.killpg(job.agents[1].pid, signal.SIGKILL)
        job.agents[1].wait()
        next_to(job, lambda: [] if list(copies[0].glob(".incoming-*")) else [True])  # the torn copy is dropped
        assert [p.name for p in copies[0].iterdir()] == [f"step_{held[0]}"]
        job.start(1)
        assert_recovered(job, job.wait(), reference)
        assert [e["resume_tier"] for e in job.events(1) if e["event"] == "attempt_start"][-1] == "peer"
        assert job.resumed(1)[-1] == job.resumed(0)[-1] == held[0]
    finally:
        shutil.rmtree(shm, ignore_errors=True)


def next_to(job: Job, found: Callable[[], list], timeout: float = 120) -> list:
    """What ``found`` returns once it is not empty, while node 0's agent runs."""
    deadline = time.monotonic() + timeout
    while not (result := found()):
        assert time.monotonic() < deadline and job.agents[0].poll() is None, job.output(0)[-3000:]
        time.sleep(0.01)
    return result


def shm_env(tmp_path: Path, nnodes: int) -> dict[int, dict[str, str]]:
    """Every node's memory tier under one folder of the test's own."""
    (tmp_path / "shm").mkdir(exist_ok=True)
    return {rank: {"HACFG_MEMORY_ROOT": str(tmp_path / "shm")} for rank in range(nnodes)}
