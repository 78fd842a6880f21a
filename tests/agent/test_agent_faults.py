"""The agent under faults: random kills, broken disks, corrupted state, odd children."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest
from kit.agents import agent_argv, read_events
from kit.paths import CHILDREN, REPO
from kit.processes import children_of, ending
from kit.timing import at_most

pytestmark = pytest.mark.slow  # a hundred kills, clock jumps, broken disks


def open_fds(pid: int) -> int:
    """The agent's descriptors, least of a few looks: one opened for a moment (an event being
    written, /proc being listed) is not a leak, one held from attempt to attempt is."""
    counts = []
    for _ in range(5):
        counts.append(len(os.listdir(f"/proc/{pid}/fd")))
        time.sleep(0.002)
    return min(counts)


def test_a_hundred_random_kills_exact_counters_no_zombie_no_leaked_fd(tmp_path):
    rng = random.Random(7)
    argv = [*agent_argv(tmp_path / "state", "--max-restarts", "100"), sys.executable, str(CHILDREN / "pid_then_wait.py"), "101"]
    with ending(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)) as agent:
        fds, previous = [], None
        for attempt in range(1, 102):
            line = agent.stdout.readline()
            assert line.split()[2:] == ["attempt", str(attempt)], line
            pid = int(line.split()[1])
            # the last one was reaped; besides this one (the 101st exits as soon as it has printed, and
            # may be a zombie here), the agent's children are its warm interpreters (the next may be
            # between fork and exec, still named as the agent)
            others = {child: state for child, state in children_of(agent.pid) if child != pid}
            assert previous not in others and "Z" not in others.values(), others
            previous = pid
            if attempt <= 100:  # the last one ends by itself, closing its pipes as it goes
                fds.append(open_fds(agent.pid))
                subprocess.run(["sleep", f"{rng.uniform(0, 0.03):.3f}"])
                os.kill(pid, signal.SIGKILL)
        assert agent.wait(timeout=60) == 0
    assert max(fds) == min(fds), f"file descriptors leaked: {fds[0]} -> {fds[-1]}"
    events = read_events(tmp_path / "state")
    decisions = [e for e in events if e["event"] == "decision"]
    assert len(decisions) == 101 and {d["action"] for d in decisions[:-1]} == {"proc_restart"} and decisions[-1]["action"] == "success"
    assert (decisions[-1]["counted"], decisions[-1]["restarts"], decisions[-1]["attempt"]) == (100, 100, 101)


def test_a_full_disk_for_events_is_reported_once_and_supervision_goes_on(tmp_path):
    argv = [*agent_argv(tmp_path / "state", "--max-restarts", "2", "--events", "/dev/full"), sys.executable, str(CHILDREN / "crash.py")]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.returncode == 138  # the budget was still applied
    assert result.stdout.count("attempt") == 3
    assert result.stderr.count("cannot write events to /dev/full: No space left on device; supervision continues") == 1


def test_an_unwritable_events_file(tmp_path):
    argv = [*agent_argv(tmp_path / "state", "--events", "/proc/version"), sys.executable, "-c", "print('ok')"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout) == (0, "ok\n")
    assert result.stderr.count("cannot write events to /proc/version") == 1


def test_a_corrupted_state_file_is_recovered_and_reported(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.json").write_text('{"attempt": 3, "restarts": ')  # torn by a crash mid-write of an older tool
    result = subprocess.run([*agent_argv(state, "--max-restarts", "1"), sys.executable, str(CHILDREN / "crash.py")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 138
    assert "state file unreadable (no hacfg-state 1 line: not sealed by hacfg); starting from zero" in result.stderr
    events = read_events(state)
    assert events[0]["event"] == "state_recovered"
    assert [e["attempt"] for e in events if e["event"] == "attempt_start"] == [1, 2]


def test_a_child_that_closes_stdout_early_is_still_supervised(tmp_path):
    result = subprocess.run([*agent_argv(tmp_path / "state"), sys.executable, str(CHILDREN / "close_stdout_early.py")], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout) == (5, "before close\n")
    exit_event = read_events(tmp_path / "state")[-3]
    assert exit_event["event"] == "attempt_exit" and exit_event["duration"] >= 0.5


def test_a_flood_without_newlines_is_relayed_and_the_tail_stays_bounded(tmp_path):
    argv = ["/usr/bin/time", "-f", "maxrss=%M", *agent_argv(tmp_path / "state"), sys.executable, str(CHILDREN / "flood.py"), "64"]
    result = subprocess.run(argv, capture_output=True, timeout=120)
    assert len(result.stdout) == 64 << 20
    assert result.returncode == 1
    maxrss_kb = int(result.stderr.decode().rsplit("maxrss=", 1)[1].split()[0])
    assert maxrss_kb < 150_000, f"the agent held {maxrss_kb} KiB for a 64 MiB stream"
    exit_event = next(e for e in read_events(tmp_path / "state") if e["event"] == "attempt_exit")
    assert exit_event["cause"] == "environment" and "NCCL error" in exit_event["reason"]  # found in the tail


def test_wall_clock_jumps_neither_fire_nor_hide_a_hang(tmp_path):
    """Like libfaketime: the agent's wall clock leaps an hour at every reading; timeouts must not care."""
    jumper = tmp_path / "jump"
    jumper.mkdir()
    (jumper / "sitecustomize.py").write_text(
        "import time\n_real = time.time\n_leaps = [0]\n"
        "def _jumping():\n    _leaps[0] += 3600\n    return _real() + _leaps[0]\n"
        "time.time = _jumping\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(jumper), str(REPO)])}
    chatty = [sys.executable, "-c", "import time\nfor _ in range(10):\n    print('alive', flush=True)\n    time.sleep(0.2)"]
    result = subprocess.run([*agent_argv(tmp_path / "a", "--hang-timeout", "1s", "--initial-hang-timeout", "1s"), *chatty],
                            capture_output=True, text=True, timeout=60, env=env)
    assert (result.returncode, result.stdout.count("alive")) == (0, 10)
    import time

    started, hang, grace = time.monotonic(), 1.0, 1.0
    argv = agent_argv(tmp_path / "b", "--hang-timeout", f"{hang:g}s", "--initial-hang-timeout", f"{hang:g}s", "--grace", f"{grace:g}")
    result = subprocess.run([*argv, "sleep", "30"], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 128 + signal.SIGTERM
    assert hang <= time.monotonic() - started < at_most(hang, grace)
