"""The agent's state folder on a bad day: links planted where its files go, a folder of another
user, a disk that fills up (real tmpfs mounts of 64 KiB), records torn by a crash."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from kit.agents import agent_argv, saved_state

from hacfg.agent.records.events import EventLog
from hacfg.agent.records.state import read_events


def agent_in(state: Path, *command: str, options: tuple[str, ...] = (), env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``hacfg agent`` around a shell command, its state in ``state``."""
    return subprocess.run([*agent_argv(state, *options), *command], capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("name", ["agent.lock", "state.json", "events.jsonl"])
def test_a_link_where_a_state_file_goes_is_refused_and_its_target_untouched(tmp_path, name):
    state, victim = tmp_path / "state", tmp_path / "victim"
    state.mkdir()
    victim.write_text("precious\n")
    (state / name).symlink_to(victim)
    result = agent_in(state, "true")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"{state / name}: is a symbolic link: the agent never writes through one in its state folder; remove it"]
    assert victim.read_text() == "precious\n"
    assert (state / name).is_symlink()


def test_a_state_folder_of_another_user_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    state = tmp_path / "state"
    state.mkdir()
    os.chown(state, 4242, 4242)
    result = agent_in(state, "true")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"{state}: the state folder belongs to another user (uid 4242, not 0): pass --state-dir a folder of your own"]
    assert list(state.iterdir()) == []


@pytest.fixture
def small_disk(tmp_path):
    """A real 64 KiB tmpfs: a disk that fills up."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a 64 KiB tmpfs here ({mounted.stderr.strip() or 'mount failed'}); the full-disk tests need root")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path) -> Path:
    """Take every free byte of ``disk``."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as handle:
        for size in (4096, 1):
            try:
                while handle.write(b"\0" * size):
                    pass
            except OSError:
                continue
    return filler


def test_a_record_that_does_not_fit_is_taken_back_whole(small_disk):
    log = small_disk / "events.jsonl"
    first = json.dumps({"time": "2026-12-01T00:00:00.000Z", "event": "agent_start", "pad": ""})
    first = first.replace('"pad": ""', '"pad": "' + "x" * (4096 - 8 - len(first)) + '"') + "\n"  # 8 bytes of its last page free
    log.write_text(first)
    filler = fill(small_disk)
    said = []
    events = EventLog(log, echo=said.append)
    events.write("attempt_start", detail="y" * 300)
    events.write("attempt_exit", detail="z" * 300)
    assert log.read_text() == first  # the 8 bytes that fitted were cut back off
    assert said == [f"[hacfg] cannot write events to {log}: No space left on device (the record was cut short and taken back); supervision continues"]
    filler.unlink()
    events.write("decision", action="success")
    assert [e["event"] for e in read_events(log)] == ["agent_start", "decision"]


def test_a_torn_record_is_reported_and_the_next_one_starts_its_own_line(tmp_path, cli):
    log = tmp_path / "events.jsonl"
    log.write_text('{"time": "2026-12-01T00:00:00.000Z", "event": "agent_start"}\n{"time": "2026-12-01T00:00:01.000Z", "ev')  # a crash mid-record
    EventLog(log).write("agent_start")
    damaged = []
    assert [e["event"] for e in read_events(log, damaged.append)] == ["agent_start", "agent_start"]
    assert damaged == [2]
    result = cli("events", log)
    assert result.code == 0
    assert f"hacfg: warning: {log}:2: a damaged event record, skipped" in result.err


def test_a_command_that_fills_the_disk_is_still_judged_and_restarted(small_disk):
    script = ('if [ "$HACFG_ATTEMPT" = 1 ]; then cat /dev/zero > "$DISK/checkpoint" 2>/dev/null; echo "disk full"; kill -9 $$; '
              'else rm "$DISK/checkpoint"; echo "attempt $HACFG_ATTEMPT done"; fi')
    result = agent_in(small_disk, "sh", "-c", script, options=("--max-restarts", "2"), env={"DISK": str(small_disk)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["disk full", "attempt 2 done"]
    assert "internal error" not in result.stderr
    said = [line for line in result.stderr.splitlines() if "cannot" in line]
    assert sum("cannot save the state" in line for line in said) == 1, result.stderr  # said once
    assert sum("cannot write events" in line for line in said) <= 1  # the log's last page may still hold a few
    state = saved_state(small_disk)
    assert (state["attempt"], state["counted"], state["running"]) == (2, 1, False)  # judged from memory, saved once there was room
    records = read_events(small_disk / "events.jsonl", lambda number: pytest.fail(f"line {number} is damaged"))
    decisions = [e["action"] for e in records if e["event"] == "decision"]
    assert decisions[-1] == "success"
