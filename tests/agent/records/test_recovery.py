"""A recovery split into stages per node, from a real two-node run's event logs (a worker killed at
step 6 of examples/resumable-training/train_ddp.py, both nodes restarted from step_4)."""

from __future__ import annotations

import json

from kit.agents import agent, read_events
from kit.paths import REPO

from hacfg.agent.records.goodput import when
from hacfg.agent.records.recovery import Marks, recoveries, report
from hacfg.agent.records.timeline import read_logs

LOGS = sorted((REPO / "tests" / "data" / "events" / "two-nodes-killed-worker").glob("node-*/events.jsonl"))


def _first(events, kind, node, round_):
    return next(e for e in events if (e["event"], e["node"], e.get("round")) == (kind, node, round_))


def test_from_the_events_alone_stop_decision_and_start_per_node():
    events = read_logs(LOGS)
    [recovery] = recoveries(events)
    assert (recovery.round, recovery.cause, recovery.cause_node) == (1, "environment", 1)
    assert sorted(recovery.stages) == [0, 1]
    for node, stages in recovery.stages.items():
        assert list(stages) == ["stop", "decision", "start"]  # the fault and the trainer's stages are not guessed
        restarted = _first(events, "attempt_start", node, 2)
        first_line = when(restarted).timestamp() + _first(events, "first_activity", node, 2)["after"]
        knew = min(
            when(e).timestamp() - (e["stopping"] or 0) for e in events if e["event"] == "attempt_exit" and e["round"] == 1
        )
        assert abs(recovery.total(node) - (first_line - knew)) < 0.002  # the stages add up, each rounded to 1 ms
    assert recovery.stages[1]["stop"] == 0.0  # node 1 saw its own worker die: it stopped nothing
    assert recovery.seconds == max(recovery.total(node) for node in recovery.stages)


def test_the_trainers_own_times_add_the_fault_and_its_stages():
    events = read_logs(LOGS)
    knew = min(when(e).timestamp() for e in events if e["event"] == "attempt_exit")
    first_line = {
        node: when(_first(events, "attempt_start", node, 2)).timestamp() + 3.0 for node in (0, 1)
    }
    marks = {(1, 1): Marks(fault=knew - 0.05)}
    marks |= {(node, 2): Marks(started=first_line[node], grouped=first_line[node] + 0.25, resumed=first_line[node] + 1.0,
                               stepped=first_line[node] + 1.5) for node in (0, 1)}
    [recovery] = recoveries(events, marks)
    for node, stages in recovery.stages.items():
        assert list(stages) == ["detection", "stop", "decision", "start", "rendezvous", "load", "first step"]
        assert (stages["detection"], stages["rendezvous"], stages["load"], stages["first step"]) == (0.05, 0.25, 0.75, 0.5)
        assert abs(recovery.total(node) - (first_line[node] + 1.5 - (knew - 0.05))) < 0.002


def test_a_job_without_a_failed_round_has_no_recovery():
    events = [e for e in read_logs(LOGS) if e.get("round", 2) == 2]
    assert recoveries(events) == []


def test_hacfg_events_prints_and_exports_the_breakdown(cli):
    result = cli("events", *LOGS)
    assert result.code == 0, result.err
    table = result.out.split("recovery after round 1 (environment on node 1): ")[1].splitlines()
    assert table[1].split() == ["node", "stop", "decision", "start", "total"]
    assert [row.split()[0] for row in table[2:4]] == ["0", "1"]
    document = json.loads(cli("events", *LOGS, "-f", "json").out)
    [exported] = document["recoveries"]
    assert set(exported["nodes"]) == {"0", "1"} and exported["nodes"]["1"]["stop"] == 0.0



def test_a_real_runs_heartbeat_adds_its_first_step_to_the_breakdown(tmp_path):
    """Without the trainer's lines, its start-up after the first line is one stage, up to the first
    step its heartbeat reports: never split by a guess."""
    proc = agent(tmp_path, "--no-warm", "--max-restarts", "1", child="started_stepped_killed.py", env={"PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    events = read_events(tmp_path / "state")
    for attempt in (1, 2):
        first_line, first_step = (next(e["after"] for e in events if e["event"] == kind and e["attempt"] == attempt)
                                  for kind in ("first_activity", "first_step"))
        assert first_step >= first_line + 0.45, (first_line, first_step)  # 0.5 s apart, timed by file times
    [recovery] = recoveries(events)
    assert list(recovery.stages[0]) == ["stop", "decision", "start", "rendezvous+load+first step"]
    assert recovery.stages[0]["rendezvous+load+first step"] >= 0.45
    assert report([recovery]).splitlines()[1].split() == ["node", "stop", "decision", "start", "rendezvous+load+first", "step", "total"]
