"""The training runs as the agent's user and can write the agent's state folder: it may write any
state file, as a buggy script, a copied checkpoint folder or an attacker would. Each file below
made the agent exit 3, count restarts it never had, or never declare a hang. Now each is read as
no state at all, with one line and a ``state_recovered`` (or ``state_left``) event: a fresh
budget, the timeouts without learning, never an internal error.

Each attack is written twice: as a plain document, the way the agent used to write its state, and
sealed with the job's own key, as a training script that read the key could seal it, so that what
is inside is validated too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from kit.agents import agent_argv, read_events
from kit.processes import end

from hacfg.agent.records.sealed import file_key, seal
from hacfg.agent.records.state import NodeState

pytestmark = pytest.mark.slow

SECRET, JOB = "the job's secret, as the platform passes it", "train-a"
ENV = {"HACFG_GROUP_SECRET": SECRET, "HACFG_JOB_ID": JOB}
KEY = file_key(SECRET.encode(), JOB)
FRESH = {"attempt": 0, "restarts": 0, "counted": 0, "user_streak": 0, "hang_streak": 0, "round": 0, "running": False,
         "learned": {}}
BEAT_THEN_HANG = "import time; from hacfg.heartbeat import beat\nfor step in (1, 2, 3): beat(step=step); time.sleep(0.3)\ntime.sleep(40)"


def plant(state: Path, document: str, how: str, job: str = JOB) -> None:
    """``state.json`` as the training writes it: a plain document (with the job and its end, as the
    agent kept them), or sealed with the job's key."""
    state.mkdir(parents=True, exist_ok=True)
    data = document.encode() if how == "plain" else seal(KEY, "state", document, job=job)
    (state / "state.json").write_bytes(data)


def document(**changes: object) -> str:
    return json.dumps({**FRESH, "job": JOB, "ended": None, **changes})


def run(state: Path, *options: str, command: tuple[str, ...], under: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    argv = [*under, *agent_argv(state, *options), *command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=90, env={**os.environ, **ENV})


def assert_started_from_zero(state: Path, result: subprocess.CompletedProcess, said: str) -> None:
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if "starting from zero" in line]
    assert len(lines) == 1 and re.search(said, lines[0]), result.stderr
    first = read_events(state)[0]
    assert first["event"] in ("state_recovered", "state_left") and re.search(said, first["detail"])
    start = next(e for e in read_events(state) if e["event"] == "agent_start")
    assert (start["attempt"], start["counted"]) == (0, 0)


HOW = pytest.mark.parametrize("how", ["plain", "sealed"])


@HOW
def test_a_learned_sample_of_400_digits_is_no_exit_3(tmp_path, how):
    """An OverflowError on every start while the file stayed."""
    state = tmp_path / "state"
    plant(state, document(learned={"train": [10**400, 1.0, 1.0]}), how)
    result = run(state, command=("true",))
    assert result.returncode == 0
    assert_started_from_zero(state, result, "not sealed" if how == "plain" else "an integer of 401 digits")


@HOW
def test_a_negative_count_is_no_larger_budget(tmp_path, how):
    """``"counted": -50`` with ``restart.max: 1`` gave 52 attempts."""
    state = tmp_path / "state"
    plant(state, document(counted=-50), how)
    result = run(state, "--max-restarts", "1", command=("sh", "-c", "kill -9 $$"))
    assert result.returncode == 138
    assert [e["attempt"] for e in read_events(state) if e["event"] == "attempt_start"] == [1, 2]
    assert_started_from_zero(state, result, "not sealed" if how == "plain" else r"counted: -50 is not a count")


@HOW
def test_samples_of_1e308_learn_no_endless_timeout(tmp_path, how):
    """With ``--learn-beyond-hang-timeout``, 5 x 1e308 is infinite: no hang was ever declared."""
    state = tmp_path / "state"
    plant(state, document(learned={"train": [1e308, 1e308, 1e308]}), how)
    learning = ("--hang-timeout", "3s", "--learn-hang-timeouts", "--learn-floor", "1s", "--learn-beyond-hang-timeout")
    result = run(state, *learning, "--grace", "1", command=(sys.executable, "-c", BEAT_THEN_HANG))
    [hang] = [e for e in read_events(state) if e["event"] == "hang"]
    assert (hang["timeout"], hang["learned"]) == (3, False)  # hang.timeout: too little is learned in this attempt
    assert_started_from_zero(state, result, "not sealed" if how == "plain" else r"learned: train: a sample that is not")


@HOW
def test_a_40_megabyte_state_is_not_read(tmp_path, how):
    """Learned phases filling 40 MB took the agent to 718 MB."""
    state = tmp_path / "state"
    phases = ", ".join(f'"p{i}": [{", ".join(["1.5"] * 200)}]' for i in range((40 << 20) // 1000))
    plant(state, document().replace('"learned": {}', f'"learned": {{{phases}}}'), how)
    assert (state / "state.json").stat().st_size > 40 << 20
    result = run(state, command=("true",), under=("/usr/bin/time", "-f", "maxrss=%M"))
    assert result.returncode == 0
    maxrss_kb = int(result.stderr.rsplit("maxrss=", 1)[1].split()[0])
    assert maxrss_kb < 100_000, f"the agent held {maxrss_kb} KiB for a 40 MB state"
    assert_started_from_zero(state, result, "larger than 262,144 bytes")  # the size first: nothing else is read


@HOW
def test_another_jobs_state_is_not_parsed(tmp_path, how):
    """Another job's state was parsed before its job was looked at: 100,000 nested brackets in it
    were a RecursionError, exit 3."""
    state = tmp_path / "state"
    deep = "[" * 100_000 + "]" * 100_000
    plant(state, json.dumps({**FRESH, "job": "train-b", "ended": None})[:-1] + f', "x": {deep}}}', how, job="train-b")
    result = run(state, command=("true",))
    assert result.returncode == 0
    assert_started_from_zero(state, result, "not sealed" if how == "plain" else "is of job train-b, not of this one")


def test_no_file_in_the_state_folder_is_an_internal_error_or_more_than_a_fresh_start(tmp_path_factory, examples):
    """Any document, plain or sealed with the job's key or another's, in the state file, the record of
    the attempt's session and the heartbeat: read as nothing, or as what the agent could have written."""
    from hypothesis import HealthCheck, example, given, settings
    from hypothesis import strategies as st

    from hacfg import heartbeat
    from hacfg.agent.process.leftovers import RECORD, _recorded_session
    from hacfg.agent.records.state import MOST, NodeState, StateStore
    from hacfg.restart.learning import LONGEST, PHASES, SHORTEST, WINDOW

    folder = tmp_path_factory.mktemp("hostile-state")
    numbers = st.integers() | st.floats() | st.sampled_from([10**400, -50, 2**63, 1e308, MOST, MOST + 1, 0.0, True])
    values = st.recursive(st.none() | st.booleans() | numbers | st.text(max_size=8),
                          lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                          max_leaves=10)
    phases = st.dictionaries(st.sampled_from(["train", "checkpoint", "eval", "init", "", "x y", "\x1b"]) | st.text(max_size=4),
                             st.lists(numbers, max_size=4) | values, max_size=4)
    counts = {name: numbers | values for name in FRESH if name not in ("running", "learned")}
    states = st.fixed_dictionaries({}, optional={**counts, "running": st.booleans() | values, "learned": phases | values})
    texts = st.one_of(states.map(json.dumps), values.map(json.dumps), st.text(max_size=40),
                      st.integers(1, 100_000).map(lambda n: "[" * n + "]" * n))
    sealing = st.sampled_from(["plain", "sealed", "other job", "other key"])

    def sealed_as(text: str, how: str, kind: str) -> bytes:
        key = b"another job's key, forty bytes long....." if how == "other key" else KEY
        return text.encode() if how == "plain" else seal(key, kind, text, job="train-b" if how == "other job" else JOB)

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(texts, sealing, st.binary(max_size=200))
    @example(json.dumps({**FRESH, "attempt": 2, "restarts": 1, "counted": 1, "learned": {"train": [0.5] * 3}}), "sealed", b"7 eval")
    def property_(text, how, beat):
        (folder / "state.json").write_bytes(sealed_as(text, how, "state"))
        store = StateStore(folder, job=JOB)
        store.key = KEY
        state = store.load()
        if state != NodeState():
            budgets = state.budgets
            assert 0 <= budgets.counted <= budgets.restarts <= budgets.attempt <= MOST and 0 <= state.round <= MOST
            assert len(state.learned) <= PHASES
            assert all(len(kept) <= WINDOW and all(SHORTEST <= v <= LONGEST for v in kept) for kept in state.learned.values())
        else:
            assert store.recovered or store.left or how == "sealed"
        (folder / RECORD).write_bytes(sealed_as(text, how, "attempt"))
        session = _recorded_session(folder, KEY)
        assert session is None or 0 < session.pid < 1 << 63
        (folder / "heartbeat").write_bytes(beat)
        step, phase = heartbeat.read(folder / "heartbeat")
        assert (step is None or 0 <= step < 1 << 63) and heartbeat.is_phase(phase)

    property_()


def test_without_a_secret_from_the_platform_the_key_is_the_state_folders_own(tmp_path):
    """A job on its own with no secret given: the agent creates one in its state folder (mode 0600),
    keeps it while the job may run again, and removes it when the job is over. A state copied into
    another folder is not sealed with that folder's key."""
    env = {k: v for k, v in os.environ.items() if k not in ("HACFG_GROUP_SECRET", "HACFG_GROUP_SECRET_FILE")}
    first, copy = tmp_path / "first", tmp_path / "copy"

    def job(state: Path, script: str) -> subprocess.CompletedProcess:
        argv = [*agent_argv(state, "--max-restarts", "1"), "sh", "-c", script]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, env={**env, "HACFG_JOB_ID": JOB})

    assert job(first, "kill -9 $$").returncode == 138  # handed to the platform: the state and its key stay
    [secret] = first.glob("group.*.secret")
    assert secret.stat().st_mode & 0o777 == 0o600
    copy.mkdir()
    (copy / "state.json").write_bytes((first / "state.json").read_bytes())
    result = job(copy, "true")
    assert result.returncode == 0
    assert_started_from_zero(copy, result, "not sealed with this job's key")
    again = job(first, "true")  # the same job, started again where it left its state
    assert "taking over this job's counters" in again.stderr and again.returncode == 0
    assert list(first.glob("group.*.secret")) == []  # the job is over


def test_a_heartbeat_replaced_by_a_pipe_blocks_no_hang_detection(tmp_path):
    """The heartbeat file is the training's to write. A pipe in its place, with no writer, blocked the
    agent's reading of it: the silent attempt after it was never found hung."""
    script = ("import os, time; from hacfg.heartbeat import beat\nbeat(step=1)\npath = os.environ['HACFG_HEARTBEAT_FILE']\n"
              "os.remove(path); os.mkfifo(path); time.sleep(30)")
    state = tmp_path / "state"
    result = run(state, "--hang-timeout", "2s", "--grace", "1", command=(sys.executable, "-c", script))
    hangs = [e for e in read_events(state) if e["event"] == "hang"]
    assert len(hangs) == 1 and hangs[0]["idle"] < 10, result.stderr


def stop_once_it_says(state: Path, line: str, options: list[str], script: str, env: dict[str, str]) -> None:
    """Run ``sh -c SCRIPT`` under an agent until it prints ``line``, then stop the agent as the
    platform does (SIGTERM): the job is not over, and its state stays for the next agent."""
    import signal

    argv = [*agent_argv(state, *options, "--grace", "1"), "sh", "-c", script]
    agent = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert agent.stdout.readline() == line + "\n"
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        end(agent)


def test_a_stopped_job_keeps_its_key_and_the_next_agent_takes_its_counters_over(tmp_path):
    """A stop (the platform's SIGTERM) does not end the job: its state stays readable."""
    env = {k: v for k, v in os.environ.items() if k not in ("HACFG_GROUP_SECRET", "HACFG_GROUP_SECRET_FILE")}
    state = tmp_path / "state"
    script = 'test "$HACFG_ATTEMPT" -ge 2 || kill -9 $$; echo second; sleep 30'
    stop_once_it_says(state, "second", ["--max-restarts", "2"], script, {**env, "HACFG_JOB_ID": JOB})
    assert len(list(state.glob("group.*.secret"))) == 1
    again = subprocess.run([*agent_argv(state, "--max-restarts", "2"), "true"], capture_output=True, text=True, timeout=60,
                           env={**env, "HACFG_JOB_ID": JOB})
    assert again.returncode == 0
    assert "taking over this job's counters" in again.stderr and "unreadable" not in again.stderr, again.stderr


def test_the_time_budget_counts_from_the_job_s_start_in_the_sealed_state_not_from_the_events_log(tmp_path):
    """What a straggler costs is priced over the compute the run still needs: job.duration less the
    time since the job began. That start was read from the first line of the events log, which the
    training can rewrite: a line dated 2000 made every slowdown look free, one dated next year made
    moving always worth it. The next agent takes the start over from the sealed state instead."""
    state = tmp_path / "state"
    stop_once_it_says(state, "started", [], "echo started; sleep 30", {**os.environ, **ENV})
    began = next(e for e in read_events(state) if e["event"] == "agent_start")["began"]
    events = state / "events.jsonl"
    lines = events.read_text().splitlines(keepends=True)
    forged = json.loads(lines[0]) | {"time": "2000-01-01T00:00:00.000Z", "began": "2000-01-01T00:00:00.000Z"}
    events.write_text(json.dumps(forged) + "\n" + "".join(lines[1:]))
    again = subprocess.run([*agent_argv(state), "true"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, **ENV})
    assert again.returncode == 0 and "taking over this job's counters" in again.stderr, again.stderr
    starts = [e["began"] for e in read_events(state) if e["event"] == "agent_start"]
    assert starts == ["2000-01-01T00:00:00.000Z", began], starts


@pytest.mark.parametrize("began", ["2099-01-01", 4102444800.0, -1, True, 1e400])
def test_a_job_start_in_the_future_or_not_a_time_is_no_state(began):
    with pytest.raises(ValueError, match="began"):
        NodeState.from_json(FRESH | {"began": began})
