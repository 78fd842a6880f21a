"""One trainer at a time: after a SIGKILL of the agent, its command's whole tree (``sh -c``
children, ``setsid`` sessions) is ended before the next agent on the same state folder starts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from kit.agents import agent_argv
from kit.processes import start_logged

from hacfg.agent.process.leftovers import RECORD, TREE_ENV, boot_id, end_leftovers, read_proc, tree_mark
from hacfg.agent.records.sealed import file_key, seal

KEY = file_key(b"the job's secret, forty characters long", "train-a")

TREE = """
echo $$ >> "$PIDS"
sleep 300 & echo $! >> "$PIDS"
setsid sh -c 'echo $$ >> "$PIDS"; exec sleep 300' &
setsid sh -c 'sleep 300 & echo $! >> "$PIDS"; wait' &
wait
"""


def start_agent(state: Path, script: str, log: Path, env: dict[str, str]) -> subprocess.Popen:
    return start_logged([*agent_argv(state), "sh", "-c", script], log, env={**os.environ, **env}, start_new_session=True)


def wait_until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def alive(procs: dict) -> list[int]:
    """The processes still running, each checked against its start time (a reused PID is another process)."""
    return [pid for pid, proc in procs.items() if read_proc(pid) is not None and read_proc(pid).start == proc.start]


@pytest.mark.slow
def test_the_next_agent_ends_the_tree_a_killed_agent_left(tmp_path):
    state, pids = tmp_path / "state", tmp_path / "pids"
    first = start_agent(state, TREE, tmp_path / "first.log", {"PIDS": str(pids)})
    wait_until(lambda: pids.exists() and len(pids.read_text().split()) == 4)
    old = {int(pid): read_proc(int(pid)) for pid in pids.read_text().split()}
    os.kill(first.pid, signal.SIGKILL)  # the agent alone, however it dies
    first.wait()
    wait_until(lambda: len(alive(old)) < len(old))  # the agent's own child goes with it (PR_SET_PDEATHSIG)
    survivors = alive(old)
    assert len(survivors) >= 3, "PR_SET_PDEATHSIG ends only the direct child: the rest outlive the agent"
    second = start_agent(state, 'echo "second attempt"; sleep 1', tmp_path / "second.log", {})
    try:
        wait_until(lambda: "second attempt" in (tmp_path / "second.log").read_text())
        assert alive(old) == []  # nothing of the first attempt runs beside the second
        assert second.wait(timeout=30) == 0
    finally:
        for pid in alive(old):
            os.kill(pid, signal.SIGKILL)
    events = [json.loads(line) for line in (state / "events.jsonl").read_text().splitlines()]
    [ended] = [e for e in events if e["event"] == "leftovers_ended"]
    assert set(survivors) <= set(ended["pids"])  # with the setsid shells that wrote no PID
    assert f"ended {len(ended['pids'])} processes left by an earlier agent" in (tmp_path / "second.log").read_text()


def sleeper(env: dict[str, str] | None = None) -> subprocess.Popen:
    """A ``sleep`` in a session of its own, once it runs: until its exec, ``/proc/PID/environ`` is
    still the test's, without the mark a leftover (found long after its start) carries."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True, env=env)
    while Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[0] != b"sleep":
        time.sleep(0.001)
    return proc


def test_a_recorded_session_is_ended_only_while_its_leader_is_the_same_process(tmp_path):
    reused, session = sleeper(), sleeper()
    try:
        record = {"session": reused.pid, "start": read_proc(reused.pid).start + 5, "boot": boot_id()}  # its PID now names another
        (tmp_path / RECORD).write_bytes(seal(KEY, "attempt", json.dumps(record)))
        assert end_leftovers(tmp_path, KEY) == []
        assert read_proc(reused.pid) is not None
        assert not (tmp_path / RECORD).exists()
        record = {"session": session.pid, "start": read_proc(session.pid).start, "boot": boot_id()}
        (tmp_path / RECORD).write_text(json.dumps(record))  # as the training could write it: not sealed
        assert end_leftovers(tmp_path, KEY) == []
        (tmp_path / RECORD).write_bytes(seal(b"another job's key", "attempt", json.dumps(record)))
        assert end_leftovers(tmp_path, KEY) == []
        assert session.poll() is None
        (tmp_path / RECORD).write_bytes(seal(KEY, "attempt", json.dumps(record)))
        assert end_leftovers(tmp_path, KEY) == [session.pid]
        assert session.wait(timeout=5) == -signal.SIGKILL
    finally:
        for proc in (reused, session):
            proc.kill()
            proc.wait()


def test_only_this_state_folders_mark_is_ended(tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    mine = sleeper({**os.environ, TREE_ENV: tree_mark(ours)})
    other = sleeper({**os.environ, TREE_ENV: tree_mark(theirs)})
    try:
        assert end_leftovers(ours, KEY) == [mine.pid]
        assert mine.wait(timeout=5) == -signal.SIGKILL
        assert other.poll() is None
    finally:
        for proc in (mine, other):
            proc.kill()
            proc.wait()
