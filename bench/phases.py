"""Learned hang timeouts: how soon a stuck step is caught, and whether saves and evaluations are
ever taken for hangs.

Each run is ``hacfg agent --learn-hang-timeouts --learn-floor FLOOR --phase-timeout eval=...`` on a
loop that reports every step (STEP seconds), saves through ``save_step`` every 10 steps (20 x STEP,
quiet, in its own phase) and evaluates in a declared ``eval`` phase every 12 steps (10 x STEP,
quiet). Clean runs end by themselves after 24 steps: any hang verdict is a false one. Stuck runs
stop making progress at a random step after the first save, in silence or still printing: the
latency is from the last step report to the agent's ``hang`` event, against the goal's bound,
max(FLOOR, 5 x the p99 of the step times the loop itself measured).

The goal at full scale is the 60 s floor; the bench scales it down (BENCH_FLOOR, default 1 s, with
a 0.25 s step, BENCH_STEP) so that a run takes seconds: the agent's heartbeat interval is a
quarter of the floor, so every step is reported, as with 60 s and steps of 15 s or more.

Run: python bench/phases.py (BENCH_RUNS clean runs, default 100, and BENCH_STUCK stuck ones, default
20; about 20 s a run, BENCH_LANES at a time, default 4: each run mostly sleeps).
Targets: every stuck run caught within the bound (the learned timeout runs from the step reports as
the agent saw them, a few percent longer than the loop's own step times); 0 false verdicts.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

from hacfg.restart.learning import p99

REPO = Path(__file__).resolve().parent.parent
RUNS = int(os.environ.get("BENCH_RUNS", "100"))
STUCK = int(os.environ.get("BENCH_STUCK", "20"))
LANES = int(os.environ.get("BENCH_LANES", "4"))
FLOOR = float(os.environ.get("BENCH_FLOOR", "1"))
STEP = float(os.environ.get("BENCH_STEP", "0.25"))

LOOP = """
import json, sys, time
from hacfg import heartbeat
from hacfg.checkpoint import save_step

folder, step_s, stuck_at, chatty, record = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5]
times, last = [], time.time()
for step in range(1, 25):
    time.sleep(step_s)
    now = time.time()
    times.append(now - last)
    last = now
    heartbeat.beat(step=step)
    if step == stuck_at:
        with open(record, "w") as out:
            json.dump({"stalled": now, "steps": times}, out)
        while True:
            if chatty:
                print("retrying", flush=True)
            time.sleep(step_s)
    if step % 10 == 0:
        save_step(folder, step, lambda _: time.sleep(20 * step_s))
    if step % 12 == 0:
        with heartbeat.phase("eval"):
            time.sleep(10 * step_s)
    last = time.time()  # a step's time is its own, not the save's or the evaluation's
with open(record, "w") as out:
    json.dump({"stalled": None, "steps": times}, out)
print("done", flush=True)
"""


def run(root: Path, stuck_at: int, chatty: bool) -> dict:
    """One supervised run: its hang events and what the loop recorded."""
    script, record, state = root / "loop.py", root / "record.json", root / "state"
    script.write_text(LOOP)
    argv = [
        sys.executable, "-m", "hacfg", "agent", "--state-dir", str(state), "--hang-timeout", "60s",
        "--learn-hang-timeouts", "--learn-floor", f"{FLOOR:g}s", "--phase-timeout", f"eval={20 * STEP:g}s", "--grace", "1",
        "--", sys.executable, str(script), str(root / "ckpt"), str(STEP), str(stuck_at), "1" if chatty else "0",
        str(record),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, cwd=root)
    if not (state / "events.jsonl").exists():
        raise SystemExit(f"the agent did not run: {done.stderr.strip()}")
    events = [json.loads(line) for line in (state / "events.jsonl").read_text().splitlines()]
    return {"hangs": [e for e in events if e["event"] == "hang"], **json.loads(record.read_text())}


def main() -> None:
    rng = random.Random(7)
    stuck_at = [(rng.randrange(11, 24), number % 2 == 1) for number in range(STUCK)]
    print(f"load at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(LANES) as pool:

        def one(name: str, at: int, chatty: bool) -> dict:
            root = Path(tmp) / name
            root.mkdir()
            return run(root, at, chatty)

        clean = [pool.submit(one, f"clean-{number}", 0, False) for number in range(RUNS)]
        stuck = [pool.submit(one, f"stuck-{number}", at, chatty) for number, (at, chatty) in enumerate(stuck_at)]
        false = sum(len(done.result()["hangs"]) for done in clean)
        latencies = []
        for number, done in enumerate(stuck):
            result = done.result()
            hang = result["hangs"][0] if result["hangs"] else None
            if hang is None:
                print(f"stuck run {number}: never caught")
                continue
            caught = datetime.fromisoformat(hang["time"]).timestamp() - result["stalled"]
            latencies.append((caught, max(FLOOR, 5 * p99(result["steps"])), hang["timeout_from"], hang["timeout"]))
    print(f"load at end: {os.getloadavg()[0]:.1f}")
    print(f"{RUNS} clean runs (saves 20 x a {STEP}s step, evals in a declared phase): {false} false hang verdicts")
    for caught, bound, source, timeout in latencies:
        print(f"  stuck: caught after {caught:.2f}s, bound {bound:.2f}s ({caught / bound:.2f}x), by the {source} timeout {timeout}s")
    within = sum(caught <= 1.1 * bound for caught, bound, *_ in latencies)
    print(f"stuck runs caught within 1.1 x the bound: {within} of {STUCK}")


if __name__ == "__main__":
    main()
