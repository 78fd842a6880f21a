"""bench/run.py: each row appears as it is measured, and no process outlives a benchmark, however
it detached (torchrun starts every worker in a session of its own); bench/steady.py gives its rows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from kit.paths import REPO

BENCH = REPO / "bench"

# A launcher that starts a worker in a new session (as torchrun does); the worker starts a child of
# its own. "stuck" then waits forever; "gone" exits at once, leaving its worker an orphan.
LAUNCHER = """
import os, subprocess, sys, time
folder, how = sys.argv[1], sys.argv[2]
worker = "import os, subprocess, sys, time; subprocess.Popen(['sleep', '300']); " \\
    "open(os.path.join(sys.argv[1], sys.argv[2] + '-' + str(os.getpid())), 'w').close(); time.sleep(300)"
subprocess.Popen([sys.executable, "-c", worker, folder, how], start_new_session=True)
while not any(name.startswith(how + "-") for name in os.listdir(folder)):
    time.sleep(0.01)
if how == "stuck":
    time.sleep(300)
"""

# bench/run.py with one benchmark: it starts both launchers, yields a row, then waits for "go".
DRIVER = """
import os, subprocess, sys, time
sys.path.insert(0, {bench!r})
import run
from common import Verdict

folder = {folder!r}

def benchmark():
    for how in ("stuck", "gone"):
        subprocess.Popen([sys.executable, os.path.join(folder, "launcher.py"), folder, how])
    while sum(name.startswith(("stuck-", "gone-")) for name in os.listdir(folder)) < 2:
        time.sleep(0.01)
    yield Verdict("first", "1ms", "-", None, "-", True)
    while not os.path.exists(os.path.join(folder, "go")):
        time.sleep(0.01)
    yield Verdict("second", "2ms", "-", None, "-", True)

run.BENCHMARKS = [benchmark]
run.main()
"""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] != b"Z"


def _session_members(sid: int) -> list[int]:
    members = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.getsid(int(entry)) == sid and _alive(int(entry)):
                members.append(int(entry))
        except OSError:
            continue
    return members


@pytest.mark.slow
def test_rows_stream_and_detached_workers_of_a_stuck_launcher_are_killed(tmp_path: Path) -> None:
    (tmp_path / "launcher.py").write_text(LAUNCHER)
    driver = textwrap.dedent(DRIVER.format(bench=str(BENCH), folder=str(tmp_path)))
    proc = subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    lines = []
    deadline = time.monotonic() + 60
    while not any(line.startswith("first") for line in lines) and time.monotonic() < deadline:
        line = proc.stdout.readline()
        assert line, f"bench/run.py ended early: {lines}"
        lines.append(line)
    assert not any(line.startswith("second") for line in lines)  # the first row came before the second was measured
    workers = [int(name.split("-")[1]) for name in os.listdir(tmp_path) if name.startswith(("stuck-", "gone-"))]
    assert all(_alive(pid) for pid in workers)
    sessions = {pid: os.getsid(pid) for pid in workers}
    (tmp_path / "go").touch()
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert "second" in rest and "2 of 2 targets met" in rest
    for worker, sid in sessions.items():
        assert not _alive(worker)
        assert _session_members(sid) == []  # the worker's own children too


@pytest.mark.slow
@pytest.mark.torch
def test_the_steady_bench_gives_each_agents_warm_up_and_steady_rows_for_both_step_lengths() -> None:
    pytest.importorskip("torch")
    quick = {"BENCH_ROUNDS": "1", "BENCH_WARMUP": "0.5", "BENCH_STEADY": "1"}
    proc = subprocess.run([sys.executable, str(BENCH / "steady.py")], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **quick})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [re.sub(r"(: \S+) .*", r"\1", line) for line in proc.stdout.splitlines()[1:]]
    launches = ("agent", "hang detection", "no warm")
    assert rows == [f"{step} steps, {how}: {phase}" for step in ("10ms", "0.5ms") for how in launches
                    for phase in ("warm-up", "steady")]
    assert all(re.search(r"\d+/s", line) and re.search(r"\d\.\d\dx", line) for line in proc.stdout.splitlines()[1:])
