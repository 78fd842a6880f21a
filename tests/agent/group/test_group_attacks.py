"""Someone who reaches node 0's store writes keys between two real agents: a plan pointing
elsewhere, a stop and a success that nobody signed, a plan that is not even JSON. No rank may
resume from anything the leader did not choose, no node may exit 0 before the job finished, and
none may end in an internal error: each such value is an event and the job leaves with 138.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from importlib.util import find_spec
from pathlib import Path

import pytest
from kit.paths import REPO
from kit.processes import free_port, start_logged

pytestmark = [pytest.mark.slow, pytest.mark.skipif(find_spec("torch") is None, reason="torch is not installed")]
SCRIPT = 'echo "rank $NODE_RANK resume=$HACFG_RESUME_FROM"; sleep "$RUN_FOR"; echo "rank $NODE_RANK finished"'


@dataclass
class TwoNodes:
    """Two `hacfg agent`s on 127.0.0.1 around a shell command, and an attacker's store client."""

    root: Path
    run_for: float = 20.0
    port: int = field(default_factory=free_port)
    env: dict[str, str] = field(default_factory=dict)  # what the platform gives every node, beyond the shell's
    agents: dict[int, subprocess.Popen] = field(default_factory=dict)

    @property
    def ckpt(self) -> Path:
        return self.root / "ckpt"

    def __post_init__(self) -> None:
        # the attacker's client library is loaded before the job starts: its import takes seconds, and a
        # short job (RUN_FOR) may be over by the time an attacker that imported it late connects
        import torch.distributed  # noqa: F401

    def start(self, rank: int) -> None:
        argv = [sys.executable, "-m", "hacfg", "agent", "--nnodes", "2", "--node-rank", str(rank),
                "--rdzv-endpoint", f"127.0.0.1:{self.port}", "--rdzv-timeout", "30", "--checkpoint-path", str(self.ckpt),
                "--no-precheck", "--max-restarts", "3", "--grace", "2", "--", "sh", "-c", SCRIPT]
        env = {**os.environ, "PYTHONPATH": str(REPO), "NODE_RANK": str(rank), "RUN_FOR": str(self.run_for), **self.env}
        self.agents[rank] = start_logged(argv, self.log(rank), env=env, start_new_session=True)

    def log(self, rank: int) -> Path:
        return self.root / f"node{rank}.log"

    def output(self, rank: int) -> str:
        return self.log(rank).read_text(errors="replace")

    def attacker(self, timeout: float = 30) -> object:
        """A plain TCPStore client, as anyone on the network can open one: no credential asked."""
        import torch.distributed

        return torch.distributed.TCPStore("127.0.0.1", self.port, None, False, timedelta(seconds=timeout), wait_for_workers=False)

    def record(self, store: object, keys: list[str]) -> dict[str, bytes]:
        """What an attacker reads of the group's values, to replay them later."""
        return {key: store.get(key) for key in keys if store.check([key])}

    def wait(self, timeout: float = 90) -> dict[int, int]:
        codes = {}
        try:
            for rank, agent in self.agents.items():
                codes[rank] = agent.wait(timeout=timeout)
        finally:
            for agent in self.agents.values():
                if agent.poll() is None:
                    os.killpg(agent.pid, signal.SIGKILL)
                    agent.wait()
        return codes

    def wait_for(self, rank: int, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output(rank):
            assert time.monotonic() < deadline, f"node {rank} never printed {text!r}:\n{self.output(rank)}"
            time.sleep(0.05)

    def events(self, rank: int) -> list[dict]:
        path = self.ckpt / ".hacfg" / f"node-{rank}" / "events.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]

    def rejected(self, rank: int) -> list[dict]:
        return [e for e in self.events(rank) if e["event"] == "group_rejected"]


def listening(port: int) -> set[str]:
    """The local addresses listening on ``port``, from the kernel's own tables (/proc/net/tcp, tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, port_hex = local.rsplit(":", 1)
            if state == "0A" and int(port_hex, 16) == port:
                found.add(address)
    return found


def saved_step(root: Path, step: int) -> Path:
    path = root / f"step_{step}"
    path.mkdir(parents=True)
    (path / ".complete").touch()
    return path


def assert_no_internal_error(job: TwoNodes) -> None:
    for rank in job.agents:
        assert "internal error" not in job.output(rank) and "Traceback" not in job.output(rank), job.output(rank)


def test_a_plan_published_before_the_leaders_is_never_followed(tmp_path):
    job = TwoNodes(tmp_path)
    chosen = saved_step(job.ckpt, 4)
    elsewhere = saved_step(tmp_path / "attacker", 99)
    job.start(0)
    store = job.attacker()  # node 0 waits for node 1: the plan key is still free
    forged = {"round": 1, "budgets": {"attempt": 1, "restarts": 0, "counted": 0, "user_streak": 0, "hang_streak": 0},
              "resume_position": [99], "resume_from": str(elsewhere)}
    store.set("r1/plan", json.dumps(forged))
    job.start(1)
    assert job.wait() == {0: 138, 1: 138}
    for rank in (0, 1):
        started = [line for line in job.output(rank).splitlines() if "resume=" in line]
        assert all(line.endswith(f"resume={chosen}") for line in started), started
    # each node that read it rejected it (node 0 on joining, node 1 waiting for the plan)
    rejected = {(e["key"], e["reason"]) for rank in (0, 1) for e in job.rejected(rank)}
    assert rejected == {("r1/plan", "not a signed value")}
    for rank in (0, 1):
        assert any("rejected the group store's 'r1/plan'" in e.get("reason", "") for e in job.events(rank) if e["event"] == "decision")
    assert_no_internal_error(job)


def test_a_forged_stop_and_success_end_no_node_with_0(tmp_path):
    run_for = 30
    job = TwoNodes(tmp_path, run_for=run_for)
    job.start(0)
    job.start(1)
    for rank in (0, 1):
        job.wait_for(rank, f"rank {rank} resume=")
    assert listening(job.port) == {"0100007F"}  # 127.0.0.1 only, not every interface as torch's store would
    store = job.attacker()
    verdict = {"round": 1, "cause": "success", "reason": "every worker finished", "rank": 0, "action": "success", "detail": "done",
               "budgets": {"attempt": 1, "restarts": 0, "counted": 0, "user_streak": 0, "hang_streak": 0}, "exit_code": 0,
               "progressed": False, "resume_from": None}
    attacked = time.monotonic()
    store.set("r1/decision", json.dumps(verdict))
    store.set("r1/stop", json.dumps({"rank": 0, "reason": "every worker finished"}))
    codes = job.wait()
    assert codes == {0: 138, 1: 138}, (job.output(0), job.output(1))
    assert time.monotonic() - attacked < run_for * 2 / 3  # the job ended on the forgery, long before its run
    assert all("finished" not in job.output(rank) for rank in (0, 1))
    keys = {e["key"] for rank in (0, 1) for e in job.rejected(rank)}
    assert "r1/stop" in keys
    for rank in (0, 1):
        exits = [e for e in job.events(rank) if e["event"] == "agent_exit"]
        assert [e["exit_code"] for e in exits] == [138]
    assert_no_internal_error(job)


def test_a_malformed_plan_is_an_event_and_138_never_an_internal_error(tmp_path):
    job = TwoNodes(tmp_path)
    job.start(0)
    job.attacker().set("r1/plan", "{not json")
    job.start(1)
    assert job.wait() == {0: 138, 1: 138}
    rejected = {(e["key"], e["reason"]) for rank in (0, 1) for e in job.rejected(rank)}
    assert rejected == {("r1/plan", "not a signed value")}
    assert all("rejected the group store's 'r1/plan'" in job.output(rank) for rank in (0, 1))
    assert "resume=" not in job.output(1)  # node 1 started no worker
    assert_no_internal_error(job)


SHARED = {"HACFG_GROUP_SECRET": "one Secret per job name, as Volcano makes it"}


def test_a_plan_signed_in_an_earlier_job_with_the_same_secret_is_rejected(tmp_path):
    earlier = TwoNodes(tmp_path / "a", run_for=3, env={**SHARED, "HACFG_JOB_ID": "train-a"})
    earlier.root.mkdir()
    earlier.start(0)
    earlier.start(1)
    earlier.wait_for(1, "resume=")
    recorded = earlier.record(earlier.attacker(), ["r1/plan"])
    assert earlier.wait() == {0: 0, 1: 0}
    job = TwoNodes(tmp_path / "b", env={**SHARED, "HACFG_JOB_ID": "train-b"})
    job.root.mkdir()
    job.start(0)
    job.attacker().set("r1/plan", recorded["r1/plan"])  # node 0 waits for node 1: nothing of its own is there yet
    job.start(1)
    assert job.wait() == {0: 138, 1: 138}
    reasons = {(e["key"], e["reason"]) for rank in (0, 1) for e in job.rejected(rank)}
    assert ("r1/plan", "its signature does not match the job's secret") in reasons
    for rank in (0, 1):  # never taken for a round this job was in: no restart charged, no worker started
        assert [e for e in job.events(rank) if e["event"] == "decision" and e["action"] == "proc_restart"] == []
        assert "resume=" not in job.output(rank)
    assert_no_internal_error(job)


KEPT = ["nonce", "ready", "current", "hello/0", "hello/1", "welcome/1", "r1/join/0", "r1/join/1", "r1/plan"]


def test_values_from_before_node_0_restarted_are_rejected(tmp_path):
    job = TwoNodes(tmp_path, run_for=30, env={"HACFG_JOB_ID": "train-a"})
    job.start(0)
    job.start(1)
    for rank in (0, 1):
        job.wait_for(rank, "resume=")
    recorded = job.record(job.attacker(), KEPT)
    os.killpg(job.agents[0].pid, signal.SIGKILL)  # node 0's agent and its worker; the store goes with them
    job.agents[0].wait()
    job.start(0)
    store = None
    while store is None and job.agents[0].poll() is None:  # replay them into node 0's new store, over and over
        try:
            store = job.attacker(timeout=1)
        except RuntimeError:
            continue
    try:
        while all(agent.poll() is None for agent in job.agents.values()):
            for key, value in recorded.items():
                store.set(key, value)
            time.sleep(0.01)
    except RuntimeError:
        pass  # node 0 is gone, and its store with it
    assert job.wait() == {0: 138, 1: 138}, (job.output(0), job.output(1))
    keys = {e["key"] for rank in (0, 1) for e in job.rejected(rank)}
    assert keys & set(recorded), keys  # and, on a node that took an old nonce, node 0's abort
    assert_no_internal_error(job)


def test_a_keep_alive_set_to_text_is_a_rejected_value_never_a_lost_store(tmp_path):
    run_for = 30
    job = TwoNodes(tmp_path, run_for=run_for)
    job.start(0)
    job.start(1)
    for rank in (0, 1):
        job.wait_for(rank, "resume=")
    store = job.attacker()
    try:  # node 1 writes its own keep-alive every second: keep the text there until node 0 reads it
        while all(agent.poll() is None for agent in job.agents.values()):
            store.set("r1/alive/1", "text")
            time.sleep(0.01)
    except RuntimeError:
        pass  # node 0 is gone, and its store with it
    assert job.wait() == {0: 138, 1: 138}, (job.output(0), job.output(1))
    assert ("r1/alive/1", "not a signed value") in {(e["key"], e["reason"]) for rank in (0, 1) for e in job.rejected(rank)}
    for rank in (0, 1):
        assert job.output(rank).count("resume=") == 1  # no store rebuilt, no round run again
        assert [e for e in job.events(rank) if e["event"] == "decision" and e["action"] == "proc_restart"] == []
        assert "reconnecting" not in job.output(rank)
    assert_no_internal_error(job)


@pytest.mark.parametrize("value", ["text", "99999999999999999999"])
def test_counters_seeded_before_the_first_round_leave_a_job_that_succeeded_at_0(tmp_path, value):
    """The store's own counters are unsigned: whoever reaches the store can seed them. Text made the
    round's report order a rejected value (a finished job rescheduled with 138); a number past 64 bits
    made every ``add`` drop its connection, and the agents reconnect until their restarts ran out."""
    job = TwoNodes(tmp_path, run_for=3)
    job.start(0)
    store = job.attacker()  # node 0 waits for node 1: no round has begun
    for key in ("r1/seq", "alive/0", "alive/1"):  # the report order and the keep-alives, as they were kept
        store.set(key, value)
    job.start(1)
    assert job.wait() == {0: 0, 1: 0}, (job.output(0), job.output(1))
    for rank in (0, 1):
        assert job.output(rank).count("resume=") == 1 and f"rank {rank} finished" in job.output(rank)
        assert job.rejected(rank) == []
        assert [e["action"] for e in job.events(rank) if e["event"] == "decision"] == ["success"]
    assert_no_internal_error(job)


def test_a_group_secret_another_user_owns_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    job = TwoNodes(tmp_path)
    planted = job.ckpt / ".hacfg" / "node-0" / "group.secret"
    planted.parent.mkdir(parents=True)
    planted.write_text("a secret someone else chose" * 3)
    planted.chmod(0o600)
    os.chown(planted, 65534, 65534)
    job.start(0)
    assert job.wait() == {0: 2}
    assert f"{planted}: the group secret belongs to user 65534, not to this agent's user 0" in job.output(0)
    assert_no_internal_error(job)
