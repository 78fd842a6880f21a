"""The resumable-training example under `hacfg agent`, with faults injected from outside the script."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
from kit.agents import read_events
from kit.paths import REPO
from kit.processes import ending
from pytest import approx

from hacfg.agent.records.goodput import when
from hacfg.checkpoint import load_state

pytestmark = pytest.mark.slow  # real training runs with faults injected

EXAMPLE = REPO / "examples" / "resumable-training"
PRECHECKS_PASS = {
    "HACFG_PRECHECK_ROOT_MIN": "1K",
    "HACFG_PRECHECK_SHM_MIN": "1K",
    "HACFG_PRECHECK_CACHE_PATH": "/nonexistent-cache",
    "VC_WORKER_HOSTS": "localhost",
}


def run_with_faults(tmp_path, script: str, faults: list[str], train_args: list[str], *, seed: int = 1234, hang_timeout: str = "1s",
                    grace: float = 1, delay: tuple[float, float] = (0, 0.05)):
    """Run ``script`` under the agent; ``delay`` seconds after each attempt's first checkpoint, inject
    the next fault. Returns how the agent ended (its code, its stderr), its events, what was injected (fault, step, wall time) and
    the command's output lines with the wall time each was read."""
    config = tmp_path / "ha.yaml"
    config.write_text(
        "version: 1\nscenario: single-node\njob: {accelerator: cpu}\n"
        f"checkpoint: {{path: {tmp_path / 'ckpt'}, resume: true}}\nrestart: {{max: 3, on_hang: true}}\nprecheck: true\n"
    )
    argv = [sys.executable, "-m", "hacfg", "agent", "--config", str(config), "--hang-timeout", hang_timeout, "--initial-hang-timeout", "30s",
            "--grace", str(grace), "--", sys.executable, str(EXAMPLE / script), "--checkpoints", str(tmp_path / "ckpt"), *train_args]
    with ending(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **PRECHECKS_PASS, "PYTHONPATH": str(REPO)})) as agent:
        rng = random.Random(seed)
        pending, pid, injected, lines = list(faults), None, [], []
        for line in agent.stdout:
            lines.append((time.time(), line))
            if line.startswith("pid "):
                pid = int(line.split()[1])
            elif line.endswith("saved\n") and pending and pid is not None:
                time.sleep(rng.uniform(*delay))  # somewhere inside the next few steps
                fault = pending.pop(0)
                os.kill(pid, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
                injected.append((fault, int(line.split()[1]), time.time()))
                pid = None
        _, err = agent.communicate(timeout=120)
    events = read_events(tmp_path / "ckpt" / ".hacfg" / "node-0")
    return subprocess.CompletedProcess(argv, agent.returncode, stderr=err), events, injected, lines


TRAIN = ["--steps", "200", "--every", "20", "--step-time", "0.02"]  # a checkpoint every ~0.4 s
HANG, GRACE = 3.0, 2.0


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory):
    """The example under ``--hang-timeout 3s``, SIGKILLed once and SIGSTOPped once, each fault
    0.15-0.3 s after a checkpoint; and an uninterrupted reference run."""
    tmp_path = tmp_path_factory.mktemp("faulty")
    reference = tmp_path / "reference.npy"
    subprocess.run([sys.executable, str(EXAMPLE / "train.py"), "--checkpoints", str(tmp_path / "ref-ckpt"), "--out", str(reference), *TRAIN],
                   check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    agent, events, injected, lines = run_with_faults(tmp_path, "train.py", ["kill", "hang"], [*TRAIN, "--out", str(tmp_path / "final.npy")],
                                                     hang_timeout=f"{HANG:g}s", grace=GRACE, delay=(0.15, 0.3))
    return tmp_path, agent, events, injected, lines


def test_numpy_training_survives_a_kill_and_a_hang_bit_identical(faulty_run):
    tmp_path, agent, events, injected, _ = faulty_run
    assert agent.returncode == 0, agent.stderr
    assert [fault for fault, _, _ in injected] == ["kill", "hang"]
    assert (tmp_path / "final.npy").read_bytes() == (tmp_path / "reference.npy").read_bytes()  # bit-identical weights

    assert {e["status"] for e in events if e["event"] == "precheck"} <= {"passed", "skipped"}
    exits = [(e.get("signal"), e["cause"]) for e in events if e["event"] == "attempt_exit"]
    assert exits == [("SIGKILL", "environment"), ("SIGKILL", "hang"), (None, "success")]
    assert [e["event"] for e in events].count("hang") == 1
    decisions = [e for e in events if e["event"] == "decision"]
    assert [d["action"] for d in decisions] == ["proc_restart", "proc_restart", "success"]
    last = decisions[-1]
    assert (last["counted"], last["hang_streak"], last["restarts"]) == (1, 1, 2)  # the hang did not count
    starts = [e["resume_from"] for e in events if e["event"] == "attempt_start"]
    assert starts[0] is None and all(s and "/step_" in s for s in starts[1:])


@pytest.mark.torch
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_torch_training_survives_a_kill_bit_identical(tmp_path):
    import torch

    args = ["--steps", "120", "--every", "20"]
    reference = tmp_path / "reference.pt"
    subprocess.run([sys.executable, str(EXAMPLE / "train_torch.py"), "--checkpoints", str(tmp_path / "ref-ckpt"), "--out", str(reference), *args],
                   check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    final = tmp_path / "final.pt"
    # torch's own exit can take more than a second on a busy machine: a longer hang timeout than the numpy run's
    agent, events, injected, _ = run_with_faults(tmp_path, "train_torch.py", ["kill"], [*args, "--out", str(final)], hang_timeout="5s")
    assert agent.returncode == 0, agent.stderr
    assert injected and torch.equal(torch.load(final)["weight"], torch.load(reference)["weight"])
    assert [e["cause"] for e in events if e["event"] == "attempt_exit"] == ["environment", "success"]
    # saved to memory every step, to disk every 20: the step after the kill comes from memory
    resumed = [e for e in events if e["event"] == "attempt_start"][1]
    assert resumed["resume_tier"] == "memory" and int(resumed["resume_from"].rsplit("_", 1)[1]) >= injected[0][1]
    # every 20th step written to checkpoint.path by the agent, the last one before it ended
    written = [e for e in events if e["event"] == "checkpoint_written"]
    assert written[-1]["step"] == 120 and not [e for e in written if e["error"]] and "[hacfg] step" not in agent.stderr
    assert torch.equal(load_state(tmp_path / "ckpt" / "step_120")["model"]["weight"], torch.load(final)["weight"])


def test_goodput_says_where_the_time_went(faulty_run, cli):
    tmp_path, _, events, injected, lines = faulty_run
    result = cli("events", tmp_path / "ckpt" / ".hacfg" / "node-0" / "events.jsonl", "--format", "json")
    assert result.code == 0, result.err
    goodput = json.loads(result.out)["goodput"]
    first, second, third = (a["seconds"] for a in goodput["attempts"])
    (_, killed_after, killed_at), (_, stopped_after, stopped_at) = injected
    saved = {step: (tmp_path / "ckpt" / f"step_{step}").stat().st_mtime for step in (killed_after, stopped_after)}
    began = [t for t, line in lines if line.startswith("pid ")]  # each attempt's first output
    done = next(t for t, line in lines if line.startswith("done:"))
    starts = [when(e).timestamp() for e in events if e["event"] == "attempt_start"]
    exits = [when(e).timestamp() for e in events if e["event"] == "attempt_exit"]
    hang = next(when(e).timestamp() for e in events if e["event"] == "hang")

    for attempt, seconds in enumerate((first, second, third)):
        assert seconds["startup"] == approx(began[attempt] - starts[attempt], abs=0.2)
    for attempt, seconds in enumerate((first, second)):
        assert seconds["restart"] == approx(starts[attempt + 1] - exits[attempt], abs=0.01)
        assert seconds["restart"] < 0.5
    # SIGKILLed: kept up to the checkpoint it was killed after (the next attempt resumed from it), the rest lost
    assert goodput["attempts"][0]["kept_checkpoint"].endswith(f"/step_{killed_after}")
    assert first["productive"] == approx(saved[killed_after] - began[0], abs=0.2)
    assert first["lost"] == approx(killed_at - saved[killed_after], abs=0.1)
    assert (first["hang_wait"], first["grace"]) == (0, 0)
    # SIGSTOPped: the hang wait is the timeout, the grace the --grace; the lost work is known to one heartbeat interval
    assert second["productive"] == approx(saved[stopped_after] - began[1], abs=0.2)
    assert second["hang_wait"] == approx(HANG, abs=0.2)
    assert second["grace"] == approx(GRACE, abs=0.2)
    assert stopped_at - saved[stopped_after] - HANG / 4 - 0.1 <= second["lost"] <= stopped_at - saved[stopped_after] + 0.05
    # up to the stop signal: the verdict, then the hang's evidence gathered (a while on a busy machine)
    hung_exit = [e for e in events if e["event"] == "attempt_exit"][1]
    assert hang - 0.01 <= exits[1] - hung_exit["stopping"] <= hang + hung_exit["gathering"] + 0.05
    assert second["lost"] + second["hang_wait"] == approx(exits[1] - hung_exit["stopping"] - saved[stopped_after], abs=0.05)
    # finished: all of it after start-up was productive, up to the exit (the interpreter's own exit after
    # its last line counts: on a busy machine it is a good part of a second)
    assert third["productive"] == approx(exits[2] - began[2], abs=0.2)
    assert exits[2] >= done - 0.05
    assert (third["lost"], third["hang_wait"], third["grace"]) == (0, 0, 0)
    # the kinds add up to the wall time, and ETTR is productive over it
    wall = (when(events[-1]) - when(events[0])).total_seconds()
    assert goodput["wall"] == approx(wall, abs=0.002)
    assert sum(goodput["seconds"].values()) == approx(wall, abs=0.01)
    assert goodput["ettr"] == approx(sum(s["productive"] for s in (first, second, third)) / wall, abs=1e-3)
    assert goodput["ettr"] < 0.6  # a hang, a grace period and two restarts: far from the old "99.9%"


def test_events_prints_the_breakdown_and_draws_the_run(faulty_run, cli):
    tmp_path = faulty_run[0]
    events = tmp_path / "ckpt" / ".hacfg" / "node-0" / "events.jsonl"
    png, svg = tmp_path / "timeline.png", tmp_path / "timeline.svg"
    result = cli("events", events, "--plot", png)
    assert result.code == 0, result.err
    breakdown = result.out.split("\n\n")[1].splitlines()
    assert breakdown[0].startswith("goodput: ") and "ETTR" in breakdown[0]
    assert [line.split()[0] for line in breakdown[1:]] == ["start-up", "productive", "save", "fail-slow", "lost", "hang", "grace", "restart", "other"]
    assert any(part.startswith("measured for hacfg plan: 2 failures in ") for part in result.out.split("\n\n"))
    goodput = json.loads(cli("events", events, "--format", "json").out)["goodput"]
    assert f"ETTR {goodput['ettr']:.1%}" in breakdown[0]
    per_attempt = result.out.split("\n\n")[2].splitlines()
    assert [row.split()[0] for row in per_attempt] == ["seconds", "attempt", "1", "2", "3"]
    assert "hang -> proc_restart" in per_attempt[3]
    from matplotlib import image

    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = image.imread(png).shape
    assert height > 100 and width > 500
    assert cli("events", events, "--plot", svg).code == 0
    from xml.etree import ElementTree

    text = "".join(ElementTree.parse(svg).getroot().itertext())
    assert "ETTR" in text and "hang detected" in text and "node 0" in text
