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

from conftest import REPO

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
    the next fault. Returns the agent, its events and what was injected: (fault, step, wall time)."""
    config = tmp_path / "ha.yaml"
    config.write_text(
        "version: 1\nscenario: single-node\njob: {accelerator: cpu}\n"
        f"checkpoint: {{path: {tmp_path / 'ckpt'}, resume: true}}\nrestart: {{max: 3, on_hang: true}}\nprecheck: true\n"
    )
    argv = [sys.executable, "-m", "hacfg", "agent", "--config", str(config), "--hang-timeout", hang_timeout, "--initial-hang-timeout", "30s",
            "--grace", str(grace), "--", sys.executable, str(EXAMPLE / script), "--checkpoints", str(tmp_path / "ckpt"), *train_args]
    agent = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **PRECHECKS_PASS, "PYTHONPATH": str(REPO)})
    rng = random.Random(seed)
    pending, pid, injected = list(faults), None, []
    for line in agent.stdout:
        if line.startswith("pid "):
            pid = int(line.split()[1])
        elif line.endswith("saved\n") and pending and pid is not None:
            time.sleep(rng.uniform(*delay))  # somewhere inside the next few steps
            fault = pending.pop(0)
            os.kill(pid, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
            injected.append((fault, int(line.split()[1]), time.time()))
            pid = None
    agent.wait(timeout=120)
    events = [json.loads(line) for line in (tmp_path / "ckpt" / ".hacfg" / "node-0" / "events.jsonl").read_text().splitlines()]
    return agent, events, injected


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
    agent, events, injected = run_with_faults(tmp_path, "train.py", ["kill", "hang"], [*TRAIN, "--out", str(tmp_path / "final.npy")],
                                              hang_timeout=f"{HANG:g}s", grace=GRACE, delay=(0.15, 0.3))
    return tmp_path, agent, events, injected


def test_numpy_training_survives_a_kill_and_a_hang_bit_identical(faulty_run):
    tmp_path, agent, events, injected = faulty_run
    assert agent.returncode == 0, agent.stderr.read()
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


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_torch_training_survives_a_kill_bit_identical(tmp_path):
    import torch

    args = ["--steps", "120", "--every", "20"]
    reference = tmp_path / "reference.pt"
    subprocess.run([sys.executable, str(EXAMPLE / "train_torch.py"), "--checkpoints", str(tmp_path / "ref-ckpt"), "--out", str(reference), *args],
                   check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    final = tmp_path / "final.pt"
    agent, events, injected = run_with_faults(tmp_path, "train_torch.py", ["kill"], [*args, "--out", str(final)])
    assert agent.returncode == 0, agent.stderr.read()
    assert injected and torch.equal(torch.load(final)["weight"], torch.load(reference)["weight"])
    assert [e["cause"] for e in events if e["event"] == "attempt_exit"] == ["environment", "success"]


def test_the_run_renders_as_a_timeline(tmp_path, cli):
    args = ["--steps", "100", "--every", "20", "--step-time", "0.005"]
    agent, _, _ = run_with_faults(tmp_path, "train.py", ["kill"], [*args, "--out", str(tmp_path / "final.npy")])
    assert agent.returncode == 0
    events = tmp_path / "ckpt" / ".hacfg" / "node-0" / "events.jsonl"
    png, svg = tmp_path / "timeline.png", tmp_path / "timeline.svg"
    result = cli("events", events, "--plot", png)
    assert result.code == 0, result.err
    ratio = float(result.out.splitlines()[-1].split(": ")[1].split("%")[0])
    assert 0 < ratio < 100  # the killed attempt's time after its last checkpoint was lost
    from matplotlib import image

    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = image.imread(png).shape
    assert height > 100 and width > 500
    assert cli("events", events, "--plot", svg).code == 0
    import xml.etree.ElementTree as ElementTree

    assert ElementTree.parse(svg).getroot().tag.endswith("svg")
