"""The memory tier, measured side by side in one run on this machine:

- save block per GB: ``memory.save`` of STATE_MB of state, round by round in turn with two floors
  measured here, a plain memcpy into memory already touched and a copy into a fresh shared-memory
  file (the page faults a save without its spare would pay); and ``save_memory``'s block in each
  trained step;
- fault (SIGKILL of the trainer) to the next completed step, p50 and p95 over FAULTS faults,
  itemised (detect and stop, decide, start, load, first step): hacfg resuming from memory, hacfg
  resuming from disk (``save_state`` every step), and torchrun with ``torch.save``/``torch.load``;
- whether every faulted run ends with the same weights as an uninterrupted one.

One rank on one node (not the two emulated nodes of the goal), warm restarts: as in bench/warm.py,
each attempt, once its first step is timed, waits until the agent's next warm interpreter is ready. Every file goes to
one temporary folder, removed at the end; disk saves keep only the newest two steps.

Run: python bench/memory.py   (BENCH_MEMORY_STATE_MB=256, BENCH_MEMORY_FAULTS=20; the save block
alone, which needs no disk: python bench/memory.py save)
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import Scratch

STATE_MB = int(os.environ.get("BENCH_MEMORY_STATE_MB", "256"))
FAULTS = int(os.environ.get("BENCH_MEMORY_FAULTS", "20"))
ROUNDS = 10  # of the save block and its floors
STEPS_PER_ATTEMPT = 3  # completed steps before each kill
REPO = Path(__file__).resolve().parents[1]

TRAINER = """\
import os, shutil, sys, time
from pathlib import Path
import torch
from hacfg.checkpoint import load_state, resume_dir, save_memory, save_state

how, steps, out, root, state_mb = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5])
print(f"up {time.time():.6f} pid {os.getpid()}", flush=True)
torch.use_deterministic_algorithms(True)
model = torch.nn.Linear(64, 1, bias=False, dtype=torch.float64)
torch.nn.init.zeros_(model.weight)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
ballast = torch.zeros(state_mb * (1 << 20) // 4)
start, began = 0, time.perf_counter()
if how == "torchrun":
    done = sorted(root.glob("step_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    state = torch.load(done[-1]) if done else None
else:
    found = resume_dir()
    state = load_state(found) if found is not None else None
if state is not None:
    model.load_state_dict(state["model"]); optimizer.load_state_dict(state["optimizer"])
    ballast.copy_(state["ballast"]); start = state["step"]
print(f"loaded {time.time():.6f} {time.perf_counter() - began:.6f} step {start}", flush=True)
for step in range(start, steps):
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(step), dtype=torch.float64)
    loss = torch.mean((model(x).squeeze(1) - x.sum(1)) ** 2)
    optimizer.zero_grad(); loss.backward(); optimizer.step()
    ballast[step % 4096 :: 4096] += 1
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "ballast": ballast, "step": step + 1}
    saving = time.perf_counter()
    if how == "memory":
        save_memory(step + 1, state, fallback=root)
    elif how == "disk":
        save_state(root, step + 1, state)
    else:
        torch.save(state, root / "partial.pt"); os.rename(root / "partial.pt", root / f"step_{step + 1}.pt")
    saved = time.perf_counter() - saving
    for old in root.glob("step_*"):  # two steps on disk at most
        if int(old.name.split("_")[1].split(".")[0]) < step:
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    print(f"step {step + 1} {time.time():.6f} save {saved:.6f}", flush=True)
    if step == start and os.environ.get("HACFG_HEARTBEAT_FILE"):
        # A job fails after minutes, not within the second a warm interpreter takes to import torch:
        # once the first step is timed, wait until the agent's next one is ready.
        log = Path(os.environ["HACFG_HEARTBEAT_FILE"]).with_name("warm.log")
        while not log.is_file() or log.read_text().count(" ready: ") < int(os.environ["HACFG_ATTEMPT"]):
            time.sleep(0.01)
torch.save({"model": model.state_dict(), "ballast": ballast}, out)
"""


def save_block(nbytes: int) -> dict[str, list[float]]:
    """Seconds per GB, ROUNDS times, each round in turn (a busy moment of the shared machine falls on
    all alike): ``memory.save`` of ``nbytes`` of state to a tier of its own, a step after the other
    as a trainer saves (the two first, with no spare yet, left out); glibc's memcpy into touched
    memory, the bytes shared between torch's threads; torch's ``copy_`` into touched memory; a
    copy into a fresh /dev/shm file, the page faults a save without its spare would pay."""
    import torch

    from hacfg import memory

    source = torch.ones(nbytes, dtype=torch.uint8)
    target = torch.zeros(nbytes, dtype=torch.uint8)
    gb = nbytes / 1e9
    found: dict[str, list[float]] = {"save": [], "memcpy": [], "copy_": [], "fresh": []}
    threads = torch.get_num_threads()
    share = nbytes // threads

    def memcpy(part: int) -> None:
        ctypes.memmove(target.data_ptr() + part * share, source.data_ptr() + part * share, share)

    scratch = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="hacfg-bench-"))
    (scratch / "tier").mkdir()
    try:
        for step in range(-1, ROUNDS + 1):
            began = time.perf_counter()
            memory.save(scratch / "tier", step + 2, {"state": source, "step": step + 2}, rank=0, ranks=1)
            if step > 0:
                found["save"].append((time.perf_counter() - began) / gb)
                began = time.perf_counter()
                helpers = [threading.Thread(target=memcpy, args=(part,)) for part in range(1, threads)]
                for helper in helpers:
                    helper.start()
                memcpy(0)
                for helper in helpers:
                    helper.join()
                found["memcpy"].append((time.perf_counter() - began) / gb)
                began = time.perf_counter()
                target.copy_(source)
                found["copy_"].append((time.perf_counter() - began) / gb)
                path = scratch / f"fresh{step}"
                began = time.perf_counter()
                handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
                os.posix_fallocate(handle, 0, nbytes)
                with mmap.mmap(handle, nbytes) as mapped:
                    view = torch.frombuffer(mapped, dtype=torch.uint8)
                    view.copy_(source)
                    del view
                found["fresh"].append((time.perf_counter() - began) / gb)
                os.close(handle)
                path.unlink()
    finally:
        shutil.rmtree(scratch)
    return found


def run(tmp: Path, how: str, steps: int, faults: int, seed: int) -> dict:
    """One run of ``steps`` steps with ``faults`` SIGKILLs; each fault's timings and the final weights' path."""
    work = tmp / how
    (work / "ckpt").mkdir(parents=True)
    script = tmp / "trainer.py"
    script.write_text(TRAINER)
    out = work / "final.pt"
    trainer = [str(script), how, str(steps), str(out), str(work / "ckpt"), str(STATE_MB)]
    if how == "torchrun":
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
                "--max-restarts", str(faults + 1), *trainer]
    else:
        argv = [sys.executable, "-m", "hacfg", "agent", "--state-dir", str(work / "state"), "--no-precheck",
                "--max-restarts", str(faults + 1), "--hang-timeout", "600s", "--checkpoint-path", str(work / "ckpt"), "--", sys.executable, *trainer]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HACFG_MEMORY_ROOT": str(tmp / "shm")}
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=work)
    assert child.stdout is not None
    rng = random.Random(seed)
    pid, done, killed, faulted, saves = None, 0, None, [], []
    current: dict = {}
    for line in child.stdout:
        words = line.split()
        if words[0] == "up":
            pid, current = int(words[3]), {"up": float(words[1])}
        elif words[0] == "loaded":
            current.update(loaded=float(words[1]), load=float(words[2]), from_step=int(words[4]))
        elif words[0] == "step":
            saves.append(float(words[4]))
            done += 1
            if killed is not None:
                faulted.append({**current, "killed": killed, "next_step": float(words[2])})
                killed = None
            if done % STEPS_PER_ATTEMPT == 0 and len(faulted) < faults and pid is not None and killed is None:
                time.sleep(rng.uniform(0, 0.01))
                killed = time.time()
                os.kill(pid, signal.SIGKILL)
                pid, done = None, 0
    code = child.wait(timeout=600)
    if code != 0:
        raise SystemExit(f"{how}: exit {code}: {child.stderr.read() if child.stderr else ''}")
    if how != "torchrun":
        events = [json.loads(line) for line in (work / "state" / "events.jsonl").read_text().splitlines()]
        exits = [e for e in events if e["event"] == "attempt_exit"]
        starts = [e for e in events if e["event"] == "attempt_start"][1:]
        for fault, exit_, start in zip(faulted, exits, starts, strict=False):
            fault.update(exit=_when(exit_), start=_when(start), tier=start.get("resume_tier"))
    return {"faults": faulted, "out": out, "saves": saves}


def _when(event: dict) -> float:
    from datetime import datetime

    return datetime.fromisoformat(event["time"]).timestamp()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def items(fault: dict) -> dict[str, float]:
    found = {"total": fault["next_step"] - fault["killed"], "load": fault["load"],
             "first step": fault["next_step"] - fault["loaded"]}
    if "exit" in fault:
        found.update({"detect+stop": fault["exit"] - fault["killed"], "decide": fault["start"] - fault["exit"],
                      "start": fault["loaded"] - fault["load"] - fault["start"]})
    else:
        found["detect+stop+decide+start"] = fault["loaded"] - fault["load"] - fault["killed"]
    return found


def print_save_block() -> None:
    found = save_block(STATE_MB << 20)
    print(f"save block, {STATE_MB} MB of state, {ROUNDS} rounds each in turn with its floors; shared machine "
          f"({os.cpu_count()} cores, others working): s/GB p50 (min to max)")
    for name, what in (("save", "memory.save"), ("memcpy", "floor: memcpy into touched memory"),
                       ("copy_", "torch's copy_ into touched memory"),
                       ("fresh", "floor: copy into a fresh /dev/shm file")):
        values = found[name]
        print(f"  {what:40} {statistics.median(values):.3f} ({min(values):.3f} to {max(values):.3f})")
    ratios = [save / memcpy for save, memcpy in zip(found["save"], found["memcpy"], strict=True)]
    print(f"  save over memcpy, round by round: p50 {statistics.median(ratios):.2f}x")


def main() -> None:
    import torch

    print_save_block()
    if sys.argv[1:] == ["save"]:
        return
    scratch = Scratch.make("memory")
    tmp = scratch.tmp
    (tmp / "shm").symlink_to(scratch.shm)
    try:
        steps = FAULTS * STEPS_PER_ATTEMPT + 10
        runs = {how: run(tmp, how, steps, FAULTS, 7) for how in ("memory", "disk", "torchrun")}
        reference = tmp / "reference"
        reference.mkdir()
        subprocess.run([sys.executable, str(tmp / "trainer.py"), "disk", str(steps), str(reference / "final.pt"),
                        str(reference), str(STATE_MB)], check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
        expected = torch.load(reference / "final.pt")
        gb = (STATE_MB << 20) / 1e9
        print(f"\nstate {STATE_MB} MB per rank, one rank, {FAULTS} SIGKILLs per run: figures vary from run to run")
        for how, found in runs.items():
            final = torch.load(found["out"])
            same = all(torch.equal(final[k][n], expected[k][n]) for k in ("model",) for n in expected[k]) and \
                torch.equal(final["ballast"], expected["ballast"])
            save = statistics.median(found["saves"]) / gb
            print(f"\n{how}: save block p50 {save:.3f} s/GB; bit-identical to an uninterrupted run: {same}; "
                  f"faults seen {len(found['faults'])}; tiers {sorted({f.get('tier') for f in found['faults']} - {None})}")
            table = [items(f) for f in found["faults"]]
            for name in table[0]:
                values = [row[name] for row in table]
                print(f"  {name:28} p50 {statistics.median(values) * 1000:8.0f} ms   p95 {pct(values, 0.95) * 1000:8.0f} ms")
    finally:
        scratch.remove()


if __name__ == "__main__":
    main()
