"""`hacfg plan` against reality: the resumable example under `hacfg agent`, SIGKILLed at
exponential intervals of a known mean by a seeded injector, on CPU.

Run: python bench/plan.py [--seeds 5] [--mtbf 6] [--save-time 1] [--compute 30].

1. One calibration run at a first-guess interval; `hacfg plan --from-events` on its log gives
   the recommended interval (Daly's optimum from the measured save time, restart cost and MTBF).
2. For each seed, the same fault schedule (the seed's gaps, in wall time) at the recommended
   interval, at 4x shorter and at 4x longer.
3. Targets: the ETTR `hacfg plan --from-events` predicts for each recommended-interval run is
   within 5 points of the mean measured ETTR (goodput breakdown); the recommended interval's
   mean measured ETTR beats both others'. Every run lasts >= 60 s with >= 8 faults.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRAIN = REPO / "examples/resumable-training/train.py"
STEP_TIME = 0.05  # seconds of compute per step


@dataclass
class Run:
    seed: int
    every: int  # steps between saves
    wall: float
    faults: int
    measured: float  # ETTR from the goodput breakdown
    predicted: float  # ETTR hacfg plan --from-events predicts at this interval
    recommended: float  # Daly's optimum, seconds, from the same measurements


def hacfg(*args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "hacfg", *args], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def trainers(marker: str) -> list[int]:
    """The training processes of this run (their command line names its folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            # python train.py ...: the script itself, not the agent whose command line names it too
            if len(argv) > 1 and argv[1].endswith(b"train.py") and marker.encode() in b" ".join(argv):
                found.append(int(entry.name))
    return found


def inject(seed: int, mtbf: float, marker: str, stop: threading.Event, hits: list[float]) -> None:
    """SIGKILL the trainer at exponential gaps of mean ``mtbf`` (wall time), the seed's own schedule."""
    rng, started = random.Random(seed), time.monotonic()
    moment = 0.0
    while True:
        moment += rng.expovariate(1 / mtbf)
        if stop.wait(max(0.0, started + moment - time.monotonic())):
            return
        for pid in trainers(marker):
            try:
                os.kill(pid, signal.SIGKILL)
                hits.append(time.monotonic() - started)
            except ProcessLookupError:
                pass


def run(seed: int, every: int, args: argparse.Namespace, folder: Path) -> Run:
    folder.mkdir(parents=True)
    steps = round(args.compute / STEP_TIME)
    interval = max(1, round(every * STEP_TIME))
    (folder / "ha.yaml").write_text(
        "version: 1\nscenario: single-node\n"
        f"job: {{accelerator: cpu, duration: {args.compute:.0f}s}}\n"
        f"checkpoint: {{path: {folder / 'ckpt'}, interval: {interval}s, save_time: {max(1, round(args.save_time))}s, resume: true}}\n"
        # what the agent measures overrides these two; they stand in for a run that measured none
        "reliability: {restart_time: 1s}\n"
        "restart: {max: 128}\nhang: {detect: false}\nprecheck: false\n"
    )
    command = [sys.executable, str(TRAIN), "--steps", str(steps), "--every", str(every), "--step-time", str(STEP_TIME),
               "--save-time", str(args.save_time), "--checkpoints", str(folder / "ckpt"), "--out", str(folder / "final.npy")]
    # cold restarts: the injector finds each trainer by its command line, which a warm fork does not have
    agent = [sys.executable, "-m", "hacfg", "agent", "--config", str(folder / "ha.yaml"), "--no-precheck", "--no-warm", "--grace", "1",
             "--", *command]
    stop, hits = threading.Event(), []
    injector = threading.Thread(target=inject, args=(seed, args.mtbf, str(folder), stop, hits), daemon=True)
    started = time.monotonic()
    with open(folder / "agent.log", "w") as log:
        process = subprocess.Popen(agent, stdout=log, stderr=subprocess.STDOUT, cwd=folder, start_new_session=True)
        injector.start()
        code = process.wait(timeout=3600)
    stop.set()
    injector.join()
    wall = time.monotonic() - started
    if code != 0:
        raise SystemExit(f"seed {seed}, every {every}: the agent exited {code}; see {folder / 'agent.log'}")
    events = str(folder / "ckpt/.hacfg/node-0/events.jsonl")
    measured = hacfg("events", events, "-f", "json")["goodput"]["ettr"]
    plan = hacfg("plan", str(folder / "ha.yaml"), "--from-events", events, "-f", "json")
    # at the interval as run, to the step: the file's is rounded to whole seconds
    return Run(seed, every, wall, len(hits), measured, plan_at(plan, every * STEP_TIME), plan["interval"]["daly_s"])


def plan_at(plan: dict, interval: float) -> float:
    """The predicted ETTR at exactly ``interval`` seconds, from the plan's measured inputs."""
    from hacfg.plan.model import Costs

    inputs = {name: item["value"] for name, item in plan["inputs"].items()}
    costs = Costs(mtbf=inputs["node_mtbf"] / inputs["nodes"], save_time=inputs["save_time"],
                  restart_time=inputs["restart_time"], hang_share=inputs["hang_share"], hang_timeout=inputs["hang_timeout"])
    return costs.ettr(interval)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--mtbf", type=float, default=6.0, help="mean seconds between injected SIGKILLs")
    parser.add_argument("--save-time", type=float, default=1.0)
    parser.add_argument("--compute", type=float, default=30.0, help="seconds of compute the run needs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        first_guess = round(2.0 / STEP_TIME)
        calibration = run(1000, first_guess, args, root / "calibration")
        every = max(1, round(calibration.recommended / STEP_TIME))
        print(f"calibration: {calibration.faults} faults in {calibration.wall:.0f}s; recommended interval "
              f"{calibration.recommended:.2f}s = {every} steps", flush=True)
        runs: dict[str, list[Run]] = {"recommended": [], "4x shorter": [], "4x longer": []}
        for seed in range(args.seeds):
            for label, steps in (("recommended", every), ("4x shorter", max(1, every // 4)), ("4x longer", every * 4)):
                result = run(seed, steps, args, root / f"{label.replace(' ', '-')}-{seed}")
                runs[label].append(result)
                print(f"seed {seed} {label:<12} every {steps:>4} steps: {result.wall:5.0f}s wall, {result.faults:>2} faults, "
                      f"ETTR measured {result.measured:.1%}, predicted {result.predicted:.1%}", flush=True)
    mean = {label: statistics.fmean(r.measured for r in rs) for label, rs in runs.items()}
    predicted = statistics.fmean(r.predicted for r in runs["recommended"])
    everything = [r for rs in runs.values() for r in rs]
    print()
    for label, value in mean.items():
        print(f"{label:<12} mean measured ETTR {value:.1%}")
    gap = abs(predicted - mean["recommended"])
    print(f"predicted ETTR at the recommended interval {predicted:.1%}: {gap * 100:.1f} points from measured "
          f"(target <= 5): {'ok' if gap <= 0.05 else 'MISSED'}")
    wins = mean["recommended"] > max(mean["4x shorter"], mean["4x longer"])
    print(f"recommended beats 4x shorter and 4x longer: {'ok' if wins else 'MISSED'}")
    short = [r for r in everything if r.wall < 60 or r.faults < 8]
    print(f"runs >= 60 s with >= 8 faults: {len(everything) - len(short)} of {len(everything)}")


if __name__ == "__main__":
    main()
