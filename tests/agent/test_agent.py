"""`hacfg agent` with real child processes: restart rules, hangs, signals, orphans, resume, state."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kit.agents import agent, agent_argv, read_events
from kit.paths import CHILDREN, REPO
from kit.processes import children_of
from kit.timing import at_most


def decisions(tmp_path: Path) -> list[str]:
    return [e["action"] for e in read_events(tmp_path / "state") if e["event"] == "decision"]


def attempts(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stdout.splitlines() if line.startswith("attempt")]


def test_crash_is_an_environment_fault_restarted_and_counted(tmp_path):
    result = agent(tmp_path, "--max-restarts", "2", child="crash.py")
    assert result.returncode == 138
    assert attempts(result) == ["attempt 1 restarts 0", "attempt 2 restarts 1", "attempt 3 restarts 2"]
    assert decisions(tmp_path) == ["proc_restart", "proc_restart", "job_reschedule"]
    assert "error,exiting" not in result.stderr  # the platform restarts the job: not a failure yet
    exits = [e for e in read_events(tmp_path / "state") if e["event"] == "attempt_exit"]
    assert {(e["signal"], e["cause"]) for e in exits} == {("SIGKILL", "environment")}


def test_user_error_without_unconditional_exits_with_the_commands_code(tmp_path):
    result = agent(tmp_path, "--max-restarts", "5", child="user_error.py")
    assert result.returncode == 1
    assert attempts(result) == ["attempt 1 restarts 0"]
    assert decisions(tmp_path) == ["give_up"]
    assert "error,exiting" not in result.stderr  # a failure, but of a job never restarted
    assert "ValueError: learning rate must be positive" in result.stderr  # relayed untouched


def test_user_error_with_unconditional_restarts_three_in_a_row_then_gives_up(tmp_path):
    result = agent(tmp_path, "--max-restarts", "10", "--unconditional", child="user_error.py")
    assert result.returncode == 1
    assert len(attempts(result)) == 4
    assert decisions(tmp_path) == ["proc_restart"] * 3 + ["give_up"]
    keyword = [line for line in result.stderr.splitlines() if "error,exiting" in line]  # the platform's keyword for this case
    assert keyword == [("[hacfg] error,exiting: the job failed after 3 restart(s); last cause: user, exit 1: Python exception in the command: "
                        "ValueError: learning rate must be positive (raised in user_error.py, line 5)")], result.stderr
    last = read_events(tmp_path / "state")[-2]
    assert (last["counted"], last["user_streak"], last["reason"]) == (3, 3, "3 unconditional restarts in a row")


@pytest.mark.slow
def test_progress_between_failures_resets_the_streak(tmp_path):
    ckpt = tmp_path / "ckpt"
    result = agent(tmp_path, "--max-restarts", "10", "--unconditional", "--checkpoint-path", str(ckpt), child="progress_then_fail.py", args=(ckpt, 60))
    assert result.returncode == 0
    assert attempts(result)[:2] == ["attempt 1 resumed - saved checkpoint-10", f"attempt 2 resumed {ckpt}/checkpoint-10 saved checkpoint-20"]
    assert len(attempts(result)) == 6  # five unconditional restarts, more than 3, because each made progress
    assert decisions(tmp_path) == ["proc_restart"] * 5 + ["success"]


@pytest.mark.slow
def test_hung_child_is_killed_restarted_not_counted_three_in_a_row(tmp_path):
    started, hang, grace = time.monotonic(), 1.0, 1.0
    result = agent(tmp_path, "--max-restarts", "1", "--hang-retry", "--hang-timeout", f"{hang:g}s", "--initial-hang-timeout", f"{hang:g}s", "--grace", f"{grace:g}", child="silent.py")
    assert result.returncode == 138
    assert attempts(result) == ["attempt 1 restarts 0", "attempt 2 restarts 1", "attempt 3 restarts 2", "attempt 4 restarts 3"]
    assert decisions(tmp_path) == ["proc_restart"] * 3 + ["job_reschedule"]
    hangs = [e for e in read_events(tmp_path / "state") if e["event"] == "hang"]
    assert len(hangs) == 4 and hangs[0]["last_output"] == ["attempt 1 restarts 0"]
    assert all(e["counted"] == 0 for e in read_events(tmp_path / "state") if e["event"] == "decision")  # hangs do not count
    assert time.monotonic() - started < at_most(*[hang, grace] * 4, starts=4)  # four attempts, each hung and stopped


@pytest.mark.slow
def test_heartbeat_keeps_a_silent_child_alive(tmp_path):
    result = agent(tmp_path, "--hang-timeout", "1s", "--initial-hang-timeout", "1s", child="heartbeat_then_exit.py", env={"PYTHONPATH": str(REPO)})
    assert (result.returncode, result.stdout) == (0, "done\n")
    assert not [e for e in read_events(tmp_path / "state") if e["event"] == "hang"]


@pytest.mark.slow
def test_child_ignoring_sigterm_is_sigkilled_after_the_grace(tmp_path):
    started, hang, grace = time.monotonic(), 1.0, 1.0
    result = agent(tmp_path, "--hang-timeout", f"{hang:g}s", "--initial-hang-timeout", f"{hang:g}s", "--grace", f"{grace:g}", child="ignore_term.py")
    elapsed = time.monotonic() - started
    assert result.returncode == 128 + signal.SIGKILL  # hung, hang restart off, auto restart off: give up
    exit_event = next(e for e in read_events(tmp_path / "state") if e["event"] == "attempt_exit")
    assert (exit_event["signal"], exit_event["cause"]) == ("SIGKILL", "hang")
    assert hang + grace <= elapsed < at_most(hang, grace)


@pytest.mark.slow
def test_no_grandchild_survives_an_attempt(tmp_path):
    pid_file = tmp_path / "pids"
    result = agent(tmp_path, child="forker.py", args=(pid_file,))
    assert result.returncode == 3
    for pid in map(int, pid_file.read_text().split()):
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3], f"pid {pid} survived"


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: signal.Signals(s).name)
def test_signals_to_the_agent_are_forwarded_to_the_group(tmp_path, signum):
    argv = [*agent_argv(tmp_path / "state"), sys.executable, str(CHILDREN / "wait_for_term.py")]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signum)
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # the child's state says whether it had the signal, pending or blocked
        states = children_states(proc.pid)
        proc.kill()
        proc.communicate()
        pytest.fail(f"{signal.Signals(signum).name} was not forwarded in 30 s; the agent's children: {states}")
    assert out == f"got {signal.Signals(signum).name}\n"
    assert proc.returncode == 128 + signum
    assert [e["event"] for e in read_events(tmp_path / "state") if e["event"] != "first_activity"][-4:] == ["signal", "attempt_exit", "decision", "agent_exit"]
    assert read_events(tmp_path / "state")[-2]["action"] == "stop"


def children_states(parent: int) -> dict[int, list[str]]:
    """Each child's command, state, signal masks and where it waits, from /proc."""
    states = {}
    for pid, _ in children_of(parent):
        entry = Path(f"/proc/{pid}")
        try:
            status = [line for line in (entry / "status").read_text().splitlines() if line.startswith(("State", "Sig", "ShdPnd"))]
            states[pid] = [(entry / "cmdline").read_text().replace("\0", " "), *status, (entry / "wchan").read_text()]
        except OSError:
            continue
    return states


def test_output_is_relayed_byte_for_byte(tmp_path):
    argv = [*agent_argv(tmp_path / "state"), sys.executable, str(CHILDREN / "echo_bytes.py")]
    result = subprocess.run(argv, capture_output=True, timeout=60)
    data = bytes(range(256)) * 64
    assert result.returncode == 0
    assert result.stdout == data
    assert result.stderr == data[::-1]


@pytest.mark.slow
def test_killed_agent_continues_its_counters(tmp_path):
    argv = [*agent_argv(tmp_path / "state", "--max-restarts", "4"), sys.executable, str(CHILDREN / "silent.py")]
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert first.stdout.readline() == "attempt 1 restarts 0\n"
    agent_pid = int(next(e for e in read_events(tmp_path / "state") if e["event"] == "agent_start")["pid"])
    first.kill()
    first.communicate(timeout=30)
    assert agent_pid == first.pid
    second = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert second.stdout.readline() == "attempt 2 restarts 1\n"  # the interrupted attempt counted as a restart
    second.terminate()
    second.communicate(timeout=30)
    recovered = [e for e in read_events(tmp_path / "state") if e["event"] == "decision"]
    assert recovered[0]["action"] == "proc_restart" and "previous agent stopped during an attempt" in recovered[0]["cause_reason"]


@pytest.mark.slow
def test_second_agent_on_one_state_dir_refuses(tmp_path):
    argv = [*agent_argv(tmp_path / "state"), sys.executable, str(CHILDREN / "silent.py")]
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().startswith("attempt 1")
        second = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert second.returncode == 2
        assert f"another hacfg agent (pid {first.pid}) is running on this state directory" in second.stderr
    finally:
        first.terminate()
        first.communicate(timeout=30)


@pytest.mark.slow
def test_resume_from_the_newest_complete_checkpoint_skipping_a_partial_one(tmp_path):
    ckpt = tmp_path / "ckpt"
    (ckpt / "checkpoint-100").mkdir(parents=True)
    (ckpt / "checkpoint-100" / "trainer_state.json").write_text("{}")
    (ckpt / "checkpoint-200").mkdir()  # being written when the job died: no trainer_state.json
    (ckpt / "checkpoint-200" / "model.safetensors").write_text("partial")
    argv = [*agent_argv(tmp_path / "state", "--checkpoint-path", str(ckpt)), sys.executable, "-c", "import os; print(os.environ['HACFG_RESUME_FROM'])"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.stdout == f"{ckpt}/checkpoint-100\n"


@pytest.mark.slow
def test_state_files_are_private(tmp_path):
    agent(tmp_path, child="user_error.py")
    for name in ("state.json", "events.jsonl", "agent.lock"):
        mode = (tmp_path / "state" / name).stat().st_mode & 0o777
        assert mode & 0o022 == 0, f"{name} is group/world writable: {oct(mode)}"


def test_the_command_is_never_run_through_a_shell(tmp_path):
    marker = tmp_path / "pwned"
    result = subprocess.run(
        [*agent_argv(tmp_path / "state"), "echo", f"$(touch {marker})"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.stdout == f"$(touch {marker})\n"
    assert not marker.exists()


def test_a_command_that_does_not_exist(tmp_path):
    result = subprocess.run([*agent_argv(tmp_path / "s"), "no-such-command-xyz"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 127
    assert "cannot run 'no-such-command-xyz'" in result.stderr


def test_config_file_sets_the_policy(tmp_path):
    config = tmp_path / "ha.yaml"
    config.write_text(f"version: 1\nscenario: single-node\njob: {{accelerator: cpu}}\ncheckpoint: {{path: {tmp_path / 'ckpt'}, resume: true}}\nrestart: {{max: 1}}\nprecheck: false\n")
    result = subprocess.run([sys.executable, "-m", "hacfg", "agent", "--config", str(config), "--", sys.executable, str(CHILDREN / "crash.py")],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 138
    assert attempts(result) == ["attempt 1 restarts 0", "attempt 2 restarts 1"]
    assert (tmp_path / "ckpt" / ".hacfg" / "node-0" / "events.jsonl").exists()  # the state lives with the checkpoints, per node


def test_events_table(tmp_path, cli):
    agent(tmp_path, "--max-restarts", "1", child="crash.py")
    output = cli("events", tmp_path / "state" / "events.jsonl").out
    table = output.split("\n\n")[0].splitlines()
    assert table[0].split() == ["time", "attempt", "restarts", "event", "detail"]
    assert output.split("\n\n")[1].startswith("goodput: ")
    rows = [line.split()[3] for line in table[1:] if line.split()[3] != "first_activity"]
    assert rows == ["agent_start", "attempt_start", "attempt_exit", "decision", "attempt_start", "attempt_exit", "decision", "agent_exit"]
    assert "proc_restart: environment fault: restart 1 of 1" in next(line for line in table if " decision " in line)


def test_input_piped_to_the_agent_reaches_the_command(tmp_path):
    argv = [*agent_argv(tmp_path / "state"), "cat"]
    result = subprocess.run(argv, input="piped input\n", capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout) == (0, "piped input\n")


def test_a_closed_stdin_does_not_leak_the_agents_own_pipes(tmp_path):
    argv = [*agent_argv(tmp_path / "state"), sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, preexec_fn=lambda: os.close(0))
    assert (result.returncode, result.stdout) == (0, "''\n")
