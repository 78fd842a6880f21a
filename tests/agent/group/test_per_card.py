"""Per-card launch, as ModelArts' Ascend-Powered-Engine runs the boot command: once per card of each
node, each with RANK_TABLE_FILE, ASCEND_DEVICE_ID, RANK_ID and RANK_SIZE (develop-modelarts-1415),
and the node's MA_NUM_HOSTS and VC_TASK_INDEX. Every agent is a real `hacfg agent` process around
a real card process (tests/children/ascend_card.py); faults are real signals.

What must hold: one agent speaks for each node and writes its state; a fault on one card restarts
the whole job once, counted once; every card resumes from the same step; no process is left.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kit.agents import rank_table
from kit.cli import run_hacfg
from kit.paths import REPO
from kit.processes import ending, free_port, kill_agents, left_running, start_logged, wait_agents

from hacfg.agent.group.cards import CardEnd, node_outcome
from hacfg.agent.rounds import Outcome
from hacfg.restart.vocabulary import Ending

CARD = REPO / "tests" / "children" / "ascend_card.py"


@dataclass
class Engine:
    """The Ascend-Powered-Engine on this machine: the same boot command once per card of each emulated node."""

    root: Path
    nodes: int
    cards: int
    steps: int = 40
    fail: str = ""
    options: tuple[str, ...] = ()
    agents: dict[int, subprocess.Popen] = field(default_factory=dict)  # by rank
    logs: dict[int, list[Path]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.ckpt, self.records = self.root / "ckpt", self.root / "records"
        self.records.mkdir(parents=True)
        self.table = rank_table(self.root / "jobstart_hccl.json", self.nodes, self.cards)
        self.port = free_port()

    def boot(self) -> list[str]:
        return [sys.executable, "-m", "hacfg", "agent", "--rdzv-endpoint", f"127.0.0.1:{self.port}", "--rdzv-timeout", "60",
                "--checkpoint-path", str(self.ckpt), "--no-precheck", "--max-restarts", "3", "--grace", "5", "--no-warm",
                *self.options, "--", sys.executable, str(CARD), str(self.records), str(self.ckpt), str(self.steps), self.fail]

    def env(self, rank: int) -> dict[str, str]:
        node, card = divmod(rank, self.cards)
        return {**os.environ, "RANK_TABLE_FILE": str(self.table), "ASCEND_DEVICE_ID": str(card), "RANK_ID": str(rank),
                "RANK_SIZE": str(self.nodes * self.cards), "MA_NUM_HOSTS": str(self.nodes), "VC_TASK_INDEX": str(node)}

    def start(self, rank: int) -> None:
        log = self.root / f"rank{rank}-{len(self.logs.get(rank, []))}.log"
        self.logs.setdefault(rank, []).append(log)
        self.agents[rank] = start_logged(self.boot(), log, env=self.env(rank), start_new_session=True)

    def run(self) -> None:
        for rank in range(self.nodes * self.cards):
            self.start(rank)

    def wait(self, timeout: float = 180) -> dict[int, int]:
        return wait_agents(self.agents, timeout, self.output)

    def wait_for(self, what: str, done, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                kill_agents(self.agents)
                pytest.fail(f"never saw {what}:\n{self.output(0)[-3000:]}")
            time.sleep(0.05)

    def card_pid(self, rank: int, attempt: int) -> int | None:
        path = self.records / f"pid-{rank}-{attempt}"
        return int(path.read_text()) if path.exists() and path.read_text() else None

    def started(self, attempt: int) -> bool:
        return all(self.card_pid(rank, attempt) for rank in range(self.nodes * self.cards))

    def record(self, rank: int, attempt: int) -> dict:
        return json.loads((self.records / f"rank-{rank}-attempt-{attempt}.json").read_text())

    def events(self, node: int) -> list[dict]:
        path = self.ckpt / ".hacfg" / f"node-{node}" / "events.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]

    def decisions(self, node: int) -> list[dict]:
        return [e for e in self.events(node) if e["event"] == "decision"]

    def output(self, rank: int) -> str:
        return "".join(log.read_text(errors="replace") for log in self.logs.get(rank, []))

COUNTERS = ("round", "cause", "cause_node", "action", "attempt", "restarts", "counted")


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="per-card agents meet on a Linux abstract socket")
def test_a_killed_card_restarts_the_whole_job_once_from_one_step(tmp_path, cli):
    """Two nodes of eight cards; rank 11's process (node 1, a card that does not speak for it) is killed."""
    pytest.importorskip("torch")  # the two nodes' speakers group through torch's store
    job = Engine(tmp_path, nodes=2, cards=8)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    job.run()
    job.wait_for("every card's first attempt and checkpoint-4", lambda: job.started(1) and (job.ckpt / "checkpoint-4").exists())
    os.kill(job.card_pid(11, 1), signal.SIGKILL)
    codes = job.wait()
    wall, after = time.monotonic() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    print(f"per-card job, 16 agents and 32 card processes: {wall:.1f}s wall, {cpu:.1f}s CPU")
    assert codes == dict.fromkeys(range(16), 0), {rank: job.output(rank)[-2000:] for rank, code in codes.items() if code}

    # one decision per round, the same on both nodes: the restart, counted once, then success
    decisions = [[{key: d.get(key) for key in COUNTERS} for d in job.decisions(node)] for node in (0, 1)]
    assert decisions[0] == decisions[1]
    restart, done = decisions[0]
    assert restart == {"round": 1, "cause": "environment", "cause_node": 1, "action": "proc_restart", "attempt": 1, "restarts": 1, "counted": 1}
    assert done["action"] == "success" and (done["restarts"], done["counted"]) == (1, 1)
    assert job.decisions(1)[0]["cause_reason"].startswith("card 3 (rank 11): ")
    cards = [(e["round"], e["card"], e["rank"], e["exit_code"], e["cause"]) for node in (0, 1) for e in job.events(node) if e["event"] == "card_exit"]
    assert cards == [(1, 3, 11, 137, "environment")]  # the cards stopped for it, or that finished, follow from the rounds' ends
    shown = cli("events", *(job.ckpt / ".hacfg").glob("node-*/events.jsonl")).out
    assert "card_exit       node 1: card 3 (rank 11): exit 137 [environment] killed by SIGKILL" in shown

    # every card ran twice, and resumed from one and the same checkpoint with the same counters
    second = [job.record(rank, 2) for rank in range(16)]
    assert {(r["HACFG_RESUME_FROM"], r["HACFG_RESTART_COUNT"], r["step"]) for r in second} == {
        (second[0]["HACFG_RESUME_FROM"], "1", second[0]["step"])}
    assert second[0]["step"] >= 4 and not (job.records / "rank-0-attempt-3.json").exists()

    # one state per node, written by its speaker; the other cards' folders hold none
    states = sorted(str(path.relative_to(job.ckpt)) for path in job.ckpt.rglob("state.json"))
    assert states == [".hacfg/node-0/state.json", ".hacfg/node-1/state.json"]
    assert sorted(p.name for p in (job.ckpt / ".hacfg" / "node-1").iterdir() if p.name.startswith("card-")) == [f"card-{n}" for n in range(1, 8)]
    assert left_running(job.records) == []
    assert cpu < 40, f"{cpu:.1f}s of CPU for the per-card job"


@pytest.mark.slow
def test_a_user_error_on_the_speakers_card_gives_up_on_every_card_with_its_code(tmp_path):
    """One node of four cards, no group and no torch: rank 0's script raises; the job is not unconditional."""
    job = Engine(tmp_path, nodes=1, cards=4, fail="user")
    job.run()
    codes = job.wait()
    assert codes == dict.fromkeys(range(4), 1), {rank: job.output(rank)[-2000:] for rank in range(4)}
    (decision,) = job.decisions(0)
    assert (decision["cause"], decision["action"], decision["counted"]) == ("user", "give_up", 0)
    assert decision["cause_reason"].startswith("exit 1: Python exception in the command: ValueError: a bug in the training script")
    assert [e for e in job.events(0) if e["event"] == "card_exit"] == []  # the other cards were stopped for it
    assert "Traceback" in job.output(0) and "ValueError: a bug in the training script" in job.output(0)
    assert left_running(job.records) == []


@pytest.mark.slow
def test_a_card_whose_agent_dies_is_an_environment_fault_and_its_new_agent_rejoins(tmp_path):
    """The agent of card 2 is killed with SIGKILL mid-attempt (its card's process goes with it), then started
    again, as the platform restarts a boot command: the job goes on, one restart counted."""
    job = Engine(tmp_path, nodes=1, cards=3, steps=30)
    job.run()
    job.wait_for("every card's first attempt", lambda: job.started(1))
    card = job.card_pid(2, 1)
    os.killpg(job.agents[2].pid, signal.SIGKILL)
    job.agents[2].wait()
    job.wait_for("the killed agent's card process to be gone", lambda: not Path(f"/proc/{card}").exists() or b"Z" in Path(f"/proc/{card}/stat").read_bytes().split(b") ")[1][:1])
    job.start(2)
    codes = job.wait()
    assert codes == dict.fromkeys(range(3), 0), {rank: job.output(rank)[-2000:] for rank in range(3)}
    restart, done = job.decisions(0)
    assert (restart["cause"], restart["action"], restart["counted"]) == ("environment", "proc_restart", 1)
    assert restart["cause_reason"] == "card 2 (rank 2): the agent of card 2 (rank 2) is gone"
    assert [(e["card"], e["cause"]) for e in job.events(0) if e["event"] == "card_exit"] == [(2, "environment")]
    assert done["action"] == "success"
    assert {job.record(rank, 2)["HACFG_RESUME_FROM"] for rank in range(3)} == {job.record(0, 2)["HACFG_RESUME_FROM"]}
    assert left_running(job.records) == []


@pytest.mark.slow
def test_a_hung_card_is_a_hang_of_the_job_and_its_restart_is_not_counted(tmp_path):
    """Rank 1's process (a follower's card) goes silent at step 3, heartbeat and output; the other cards beat on."""
    job = Engine(tmp_path, nodes=1, cards=3, steps=50, fail="hang",
                 options=("--hang-timeout", "2s", "--initial-hang-timeout", "10s", "--hang-retry"))
    job.run()
    codes = job.wait()
    assert codes == dict.fromkeys(range(3), 0), {rank: job.output(rank)[-2000:] for rank in range(3)}
    restart, done = job.decisions(0)
    assert (restart["cause"], restart["action"], restart["counted"], restart["hang_streak"]) == ("hang", "proc_restart", 0, 1)
    assert restart["cause_reason"].startswith("card 1 (rank 1): hung")
    assert [(e["card"], e["cause"]) for e in job.events(0) if e["event"] == "card_exit"] == [(1, "hang")]
    assert done["action"] == "success" and done["counted"] == 0
    # the others were stopped while they ran: every card resumes from one step before the end
    assert len({job.record(rank, 2)["step"] for rank in range(3)}) == 1 and 2 <= job.record(0, 2)["step"] < 50
    assert "[hacfg] card 1 (rank 1): attempt 1 ended: hung, killed by SIGTERM" in job.output(1)
    assert left_running(job.records) == []


def boot(tmp_path: Path, table: Path, **env: str):
    """One card's boot command with a table and launch variables; what it printed and its exit code."""
    values = {"RANK_TABLE_FILE": str(table), "ASCEND_DEVICE_ID": "0", "RANK_ID": "0", "RANK_SIZE": "1", **env}
    return run_hacfg("agent", "--no-precheck", "--rdzv-timeout", "1", "--state-dir", tmp_path / "state", "--", "true",
                     env={**os.environ, **values})


@pytest.mark.parametrize(("table", "env", "says"), [
    ('{"status": "completed", "version": "1.0",\n "server_list": [}', {}, ":2:18: rank table is not JSON"),
    (None, {"ASCEND_DEVICE_ID": "9", "RANK_SIZE": "16"}, "ASCEND_DEVICE_ID 9 is out of range: server 'node_0' of"),
    (None, {"RANK_ID": "16", "RANK_SIZE": "16"}, "RANK_ID 16 is not in RANK_TABLE_FILE"),
    (None, {"RANK_SIZE": "8"}, "RANK_SIZE 8 but RANK_TABLE_FILE"),
    (None, {"RANK_ID": "one"}, "RANK_ID is 'one': a per-card launch"),
    ('{"status": "completed", "version": "1.0", "server_count": "3", "server_list": [{"server_id": "a", "device": [{"device_id": "0", "rank_id": "0"}]}]}',
     {}, ":1:59: rank table: server_count 3 but server_list has 1"),
])  # fmt: skip
def test_a_bad_launch_is_one_line_and_exit_2(tmp_path, table, env, says):
    path = tmp_path / "jobstart_hccl.json"
    if table is None:
        rank_table(path, nodes=2, cards=8)
    else:
        path.write_text(table)
    result = boot(tmp_path, path, **env)
    assert result.code == 2, result.err
    assert len(result.err.strip().splitlines()) == 1 and says in result.err, result.err
    assert "Traceback" not in result.err


def test_a_table_still_initializing_is_waited_for_then_the_job_runs(tmp_path):
    """As the platform writes it: initializing when the agent starts, completed (replaced whole) once it waits."""
    path = rank_table(tmp_path / "jobstart_hccl.json", nodes=1, cards=1, status="initializing")
    values = {"RANK_TABLE_FILE": str(path), "ASCEND_DEVICE_ID": "0", "RANK_ID": "0", "RANK_SIZE": "1"}
    log = tmp_path / "agent.log"
    argv = [sys.executable, "-m", "hacfg", "agent", "--no-precheck", "--rdzv-timeout", "60", "--state-dir", str(tmp_path / "state"), "--", "true"]
    with ending(start_logged(argv, log, env={**os.environ, **values})) as agent:
        deadline = time.monotonic() + 60
        while f"[hacfg] RANK_TABLE_FILE {path} is initializing: waiting up to 60s" not in log.read_text():
            assert agent.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        rank_table(tmp_path / "completed.json", nodes=1, cards=1).replace(path)
        assert agent.wait(timeout=60) == 0, log.read_text()


def test_a_table_that_stays_initializing_moves_the_job(tmp_path):
    path = rank_table(tmp_path / "jobstart_hccl.json", nodes=1, cards=1, status="initializing")
    result = boot(tmp_path, path)
    assert result.code == 138
    assert f"[hacfg] RANK_TABLE_FILE {path} is still initializing after 1s; exiting 138" in result.err


NAMES = {0: "card 0 (rank 8)", 1: "card 1 (rank 9)", 2: "card 2 (rank 10)"}


def end(place, cause, seq, *, peer=False, code=1):
    return CardEnd(place, Ending(cause), f"{cause} on {place}", code, peer, seq)


@pytest.mark.parametrize(("own", "own_seq", "ends", "expected"), [
    # every card finished
    (Outcome(1, Ending.SUCCESS, "finished"), 3, [end(1, "success", 1, code=0), end(2, "success", 2, code=0)], (Ending.SUCCESS, "finished")),
    # a follower failed first: the speaker's own card was stopped for it
    (Outcome(1, Ending.ENVIRONMENT, "round 1 ended by card 1", 143, peer=True), 3, [end(1, "environment", 1), end(2, "peer", 2, peer=True)],
     (Ending.ENVIRONMENT, "card 1 (rank 9): environment on 1")),
    # the speaker's card failed first: the followers were stopped for it
    (Outcome(1, Ending.USER, "ValueError"), 1, [end(1, "peer", 2, peer=True), end(2, "peer", 3, peer=True)], (Ending.USER, "ValueError")),
    # two failures: the first heard wins
    (Outcome(1, Ending.USER, "ValueError"), 2, [end(2, "hang", 1)], (Ending.HANG, "card 2 (rank 10): hang on 2")),
    (Outcome(1, Ending.USER, "ValueError"), 2, [end(2, "hang", 3)], (Ending.USER, "ValueError")),
    # the round ended elsewhere: every card is a consequence
    (Outcome(1, Ending.ENVIRONMENT, "round 1 ended by node 0", 143, peer=True), 3, [end(1, "peer", 1, peer=True)],
     (Ending.ENVIRONMENT, "round 1 ended by node 0")),
    # an agent told to stop stops the node, whoever failed
    (Outcome(1, Ending.SUCCESS, "finished"), 3, [end(1, "environment", 1), end(2, "stopped", 2)], (Ending.STOPPED, "card 2 (rank 10): stopped on 2")),
])  # fmt: skip
def test_a_nodes_cards_make_one_outcome(own, own_seq, ends, expected):
    outcome = node_outcome(own, own_seq, ends, NAMES)
    assert (outcome.cause, outcome.reason) == expected and outcome.rank == 1


def test_a_node_launch_with_a_rank_table_waits_for_it_and_holds_the_job_to_its_servers(tmp_path):
    """MindCluster's pods: RANK_TABLE_FILE without a per-card launch. A malformed table is one line, a table of
    other servers than the job's nodes too; neither starts the command."""
    path = tmp_path / "hccl.json"
    path.write_text('{"status": "completed", "version": "1.0",\n "server_list": [}')
    env = {**os.environ, "RANK_TABLE_FILE": str(path)}
    result = run_hacfg("agent", "--no-precheck", "--rdzv-timeout", "1", "--state-dir", tmp_path / "state", "--", "touch", tmp_path / "ran", env=env)
    assert (result.code, result.err.count("\n")) == (2, 1) and f"{path}:2:18: rank table is not JSON" in result.err, result.err
    rank_table(path, nodes=2, cards=8)
    result = run_hacfg("agent", "--no-precheck", "--nnodes", "3", "--node-rank", "0", "--rdzv-timeout", "1", "--state-dir", tmp_path / "state", "--", "touch", tmp_path / "ran", env=env)
    assert result.code == 2 and f"RANK_TABLE_FILE {path} lists 2 servers, but the job has 3 nodes" in result.err, result.err
    assert not (tmp_path / "ran").exists()
