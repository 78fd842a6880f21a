"""A small but real training job that survives faults: linear regression by SGD with momentum.

Every random choice is derived from (seed, step), so a run that is killed, hung and resumed
from its checkpoints ends with exactly the same weights as one that never stopped.

    hacfg agent --config ha.yaml -- python train.py --steps 400 --checkpoints ckpt --out final.npy
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from hacfg.checkpoint import resume_dir, save_step
from hacfg.heartbeat import beat

FEATURES, SAMPLES, BATCH = 32, 4096, 64


def dataset(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((SAMPLES, FEATURES))
    true_w = rng.standard_normal(FEATURES)
    return x, x @ true_w + 0.01 * rng.standard_normal(SAMPLES)


def write(folder: Path, state: dict[str, np.ndarray], seconds: float) -> None:
    np.savez(folder / "state.npz", **state)
    if seconds:
        import time

        time.sleep(seconds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--every", type=int, default=20, help="checkpoint interval, in steps")
    parser.add_argument("--checkpoints", type=Path, default=Path("ckpt"))
    parser.add_argument("--out", type=Path, default=Path("final.npy"))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--step-time", type=float, default=0.0, help="seconds of simulated work per step")
    parser.add_argument("--save-time", type=float, default=0.0, help="seconds a save takes, as a large model's would")
    args = parser.parse_args()

    x, y = dataset(args.seed)
    weights, velocity, start = np.zeros(FEATURES), np.zeros(FEATURES), 0
    found = resume_dir()
    if found is not None:
        state = np.load(found / "state.npz")
        weights, velocity, start = state["weights"], state["velocity"], int(state["step"])
    print(f"pid {os.getpid()} attempt {os.environ.get('HACFG_ATTEMPT', '-')} starts at step {start}", flush=True)

    for step in range(start, args.steps):
        batch = np.random.default_rng([args.seed, step]).integers(0, SAMPLES, BATCH)
        error = x[batch] @ weights - y[batch]
        gradient = x[batch].T @ error / BATCH
        velocity = 0.9 * velocity + gradient
        weights = weights - 0.01 * velocity
        beat(step=step + 1)
        if args.step_time:
            import time

            time.sleep(args.step_time)
        if (step + 1) % args.every == 0:
            state = {"weights": weights, "velocity": velocity, "step": np.int64(step + 1)}
            save_step(args.checkpoints, step + 1, lambda folder, s=state: write(folder, s, args.save_time))
            print(f"step {step + 1} loss {float(np.mean(error**2)):.6f} saved", flush=True)

    np.save(args.out, weights)
    print(f"done: weights in {args.out}", flush=True)


if __name__ == "__main__":
    main()
