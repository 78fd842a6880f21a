"""`hacfg diagnose` on the log of an agent run says what the agent decided.

The agent's stdout and stderr go to one file, as the platform logs a job; ``hacfg diagnose`` with
the same scenario file must give the cause the agent recorded for the last attempt, and the
decisions it took one after another when the same fault came back every time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kit.agents import agent_argv, read_events
from kit.cli import run_hacfg
from kit.paths import CHILDREN

NCCL = "import sys; print('NCCL WARN NET/IB : Got completion with error 12', file=sys.stderr); sys.exit(1)"
FAULTS = {
    "SIGKILL": [sys.executable, str(CHILDREN / "crash.py")],
    "OOM exit 137": ["sh", "-c", "echo loading; exit 137"],
    "user exception": [sys.executable, str(CHILDREN / "user_error.py")],
    "NCCL error": [sys.executable, "-c", NCCL],
    "hang": [sys.executable, str(CHILDREN / "silent.py")],
}
RESTART = {
    "restart off": "restart:\n  max: 0\n",
    "restart on": "restart:\n  max: 2\n  unconditional: true\n  on_hang: true\n",
    "no unconditional": "restart:\n  max: 2\n",
}


def _run_and_diagnose(tmp_path: Path, command: list[str], restart: str, expect: int = 1) -> tuple[list[dict], dict, int]:
    scenario = tmp_path / "ha.yaml"
    scenario.write_text(
        f"version: 1\nscenario: single-node\njob:\n  name: demo\n  accelerator: cpu\n{restart}"
        "hang:\n  detect: true\n  timeout: 1s\n"
    )
    log = tmp_path / "job.log"
    with log.open("wb") as out:
        argv = agent_argv(tmp_path / "state", "--config", str(scenario), "--grace", "1", "--no-warm")
        code = subprocess.run([*argv, *command], stdout=out, stderr=subprocess.STDOUT, timeout=120).returncode
    result = run_hacfg("diagnose", "--config", scenario, "--format", "json", log)
    assert result.code == expect, result.err
    [report] = json.loads(result.out)
    return read_events(tmp_path / "state"), report, code


@pytest.mark.slow
@pytest.mark.parametrize("restart", RESTART)
@pytest.mark.parametrize("fault", FAULTS)
def test_diagnose_of_the_agents_log_gives_the_agents_cause_and_decisions(tmp_path: Path, fault: str, restart: str) -> None:
    events, report, code = _run_and_diagnose(tmp_path, FAULTS[fault], RESTART[restart])
    exits = [e for e in events if e["event"] == "attempt_exit"]
    decided = [e["action"] for e in events if e["event"] == "decision"]
    assert report["cause"] == exits[-1]["cause"]
    assert [d["action"] for d in report["decisions"]] == decided
    assert report["decisions"][-1]["exit_code"] == events[-1]["exit_code"] == code
    assert report["exit_status"]["from"]["text"].startswith(f"[hacfg] attempt {len(exits)} ended: ")


@pytest.mark.slow
def test_a_job_that_succeeded_after_a_restart_is_diagnosed_a_success(tmp_path: Path) -> None:
    command = ["sh", "-c", 'echo "NCCL WARN boom" >&2; test "$HACFG_ATTEMPT" -ge 2 || kill -9 $$']
    events, report, code = _run_and_diagnose(tmp_path, command, RESTART["restart on"], expect=0)
    assert code == 0 and [e["action"] for e in events if e["event"] == "decision"] == ["proc_restart", "success"]
    assert report["outcome"] == "success"
    assert report["exit_status"]["from"]["text"] == "[hacfg] attempt 2 ended: exit 0"
