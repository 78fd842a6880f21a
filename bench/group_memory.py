"""The memory tier on two emulated nodes (127.0.0.1), measured side by side in one run on this machine:

- fault (SIGKILL of one node's rank, the nodes in turn, at a random moment of a step) to the next
  step completed on both nodes, p50 and p95 over FAULTS faults, itemised: hacfg resuming from the
  nodes' memory tiers (``save_memory`` every step, rank 0's every DISK_EVERY-th written to disk by
  its agent in the background: ``to_disk``), hacfg resuming from disk (``save_state`` every step)
  and two torchrun processes (c10d rendezvous, ``torch.save``/``torch.load``);
- node loss (one node's agent killed with its workers and its memory tier, then started again, as
  the platform would) to the next step completed on both nodes, from the copy the next node keeps,
  itemised with the fetch; the fetch's rate as a fraction of a plain loopback socket copy of the
  same bytes, measured in the same run (bench/peer.py's);
- the steady cost of the background peer copy, paced by the agent to its share of the node's CPU
  time: steps per second with copies against copies off (an interval beyond the run), in
  interleaved rounds, after a warm-up that outlasts the tiers' growth to their two copy points; and
  within each run with copies, the time the steps overlapping a copy took beyond the run's median
  step outside copies, as a share of the run (a figure run-to-run noise does not move);
- for every run, whether both ranks end with the weights of an uninterrupted run, and whether every
  recovery resumed the step every node had saved before the fault (one being saved when it came
  may be lost, no other).

The trainer keeps the ranks in lockstep (a gloo all_reduce of its gradient each step) and carries
STATE_MB of ballast per rank, identical on both ranks, so that disk and torchrun save one copy
(rank 0's, as a data-parallel job does) while each node's memory tier holds its own. A resumed
trainer takes the ballast it loaded as it is, as ``load_state_dict(assign=True)`` takes a model's,
instead of making a fresh one to copy it into. Warm restarts:
as in bench/memory.py, each attempt, once its first step is timed, waits until its agent's next
warm interpreter is ready. Each boundary of a recovery is taken on the later node, so the items add
up to the total. Every file goes to one temporary folder and one /dev/shm folder, removed at the end.

Run: python bench/group_memory.py   (BENCH_GROUP_STATE_MB=1024, BENCH_GROUP_FAULTS=20,
BENCH_GROUP_LOSSES=5, BENCH_GROUP_ROUNDS=3, BENCH_GROUP_COPY_EVERY=10: the copy points,
BENCH_GROUP_STEADY_STEPS=600; BENCH_GROUP_ONLY=torchrun: that part of the first section alone,
BENCH_GROUP_ONLY=steady: the third section alone; BENCH_GROUP_LOAD=mapped: the trainers load their
state mapped, not copied; BENCH_GROUP_EACH=1: every fault's items, in ms, beside the percentiles)
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import queue
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import Scratch, become_subreaper, free_port, kill_descendants, kill_tree
from memory import pct

STATE_MB = int(os.environ.get("BENCH_GROUP_STATE_MB", "1024"))
FAULTS = int(os.environ.get("BENCH_GROUP_FAULTS", "20"))
LOSSES = int(os.environ.get("BENCH_GROUP_LOSSES", "5"))
ROUNDS = int(os.environ.get("BENCH_GROUP_ROUNDS", "3"))
COPY_EVERY = int(os.environ.get("BENCH_GROUP_COPY_EVERY", "10"))
ALL_HOWS = ("memory", "disk", "torchrun")
ONLY = os.environ.get("BENCH_GROUP_ONLY", "")
HOWS = tuple(ONLY.split(",")) if ONLY and ONLY != "steady" else () if ONLY else ALL_HOWS
EACH = bool(os.environ.get("BENCH_GROUP_EACH"))  # every fault's and loss's items too, not only their p50 and p95
NODES = 2
STEPS_PER_ATTEMPT = 3  # steps completed on both nodes before each fault
DISK_EVERY = 50  # the memory run's disk checkpoints
STEADY_STEPS = int(os.environ.get("BENCH_GROUP_STEADY_STEPS", "600"))
WARMUP = 3 * COPY_EVERY + 10  # the tiers hold their two copy points by then, and fault no file in: the faults begin
STALL = 120.0  # seconds without a line from any node: the run is stuck
NEVER = 10**9  # a copy interval no run reaches: copies off
REPO = Path(__file__).resolve().parents[1]
PRELOAD = "torch,torch.distributed,torch._dynamo,hacfg.checkpoint"  # the trainer's imports; torch.optim's first use imports torch._dynamo

TRAINER = """\
import hashlib, os, shutil, sys, time
from datetime import timedelta
from pathlib import Path

# the agent's warm interpreters ready so far: the first step waits for the next one (see below)
warm = Path(os.environ["HACFG_HEARTBEAT_FILE"]).with_name("warm.log") if "HACFG_HEARTBEAT_FILE" in os.environ else None
ready = warm.read_text().count(" ready: ") if warm is not None and warm.is_file() else 0
import torch
import torch._dynamo  # imported by torch.optim's first use: a cold start pays for it here, not in its load
import torch.distributed as dist
from hacfg.checkpoint import load_state, resume_dir, save_memory, save_state

how, steps, out, root = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
state_mb, disk_every = int(sys.argv[5]), int(sys.argv[6])
rank, world = int(os.environ.get("RANK") or os.environ["NODE_RANK"]), int(os.environ["WORLD_SIZE"])
print(f"up {time.time():.6f} pid {os.getpid()}", flush=True)
# torchrun's restarts now and then leave a pair of workers waiting for each other's gloo connection
# forever: a minute, then the attempt fails and torchrun restarts it
dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
print(f"grouped {time.time():.6f}", flush=True)
torch.use_deterministic_algorithms(True)
model = torch.nn.Linear(64, 1, bias=False, dtype=torch.float64)
torch.nn.init.zeros_(model.weight)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
start, began, state = 0, time.perf_counter(), None
if how == "torchrun":
    done = sorted(root.glob("step_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    state = torch.load(done[-1]) if done else None
elif (found := resume_dir()) is not None:
    # rank 0's file: no RANK under the agent, and the ranks' states are the same
    state = load_state(found, mapped=os.environ.get("BENCH_GROUP_LOAD") == "mapped")
if state is not None:
    model.load_state_dict(state["model"]); optimizer.load_state_dict(state["optimizer"])
    # the loaded tensor itself, as load_state_dict(assign=True) takes a model's: mapped, copied on write
    ballast, start = state["ballast"], state["step"]
    del state
else:
    ballast = torch.zeros(state_mb * (1 << 20) // 4)
print(f"loaded {time.time():.6f} {time.perf_counter() - began:.6f} step {start}", flush=True)


def on_disk(step, state):
    if how == "torchrun":
        torch.save(state, root / "partial.pt"); os.rename(root / "partial.pt", root / f"step_{step}.pt")
    else:
        save_state(root, step, state)
    keep_newest()


def keep_newest():  # the newest complete step on disk alone: disk space is short
    done = [int(p.name.split("_")[1].split(".")[0]) for p in root.glob("step_*") if p.is_file() or (p / ".complete").is_file()]
    for old in root.glob("step_*"):
        if done and int(old.name.split("_")[1].split(".")[0]) < max(done):
            shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink(missing_ok=True)


for step in range(start, steps):
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(step), dtype=torch.float64)
    loss = torch.mean((model(x).squeeze(1) - x.sum(1)) ** 2)
    optimizer.zero_grad(); loss.backward()
    dist.all_reduce(model.weight.grad); model.weight.grad /= world  # the ranks in lockstep, as DDP keeps them
    optimizer.step()
    ballast[step % 4096 :: 4096] += 1
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "ballast": ballast, "step": step + 1}
    if how == "memory":  # every DISK_EVERY-th step of rank 0 written to disk by its agent, in the background
        to_disk = rank == 0 and (step + 1) % disk_every == 0
        save_memory(step + 1, state, fallback=root, to_disk=to_disk)
        if to_disk:
            keep_newest()
    elif rank == 0 and how in ("disk", "torchrun"):
        on_disk(step + 1, state)
    print(f"step {step + 1} {time.time():.6f}", flush=True)
    if step == start and warm is not None:
        # A job fails after minutes, not within the seconds a warm interpreter takes to import torch:
        # once the first step is timed, wait until the agent's next one is ready.
        while not warm.is_file() or warm.read_text().count(" ready: ") <= ready:
            time.sleep(0.01)
out.mkdir(parents=True, exist_ok=True)
digest = hashlib.sha256(ballast.numpy().tobytes()).hexdigest()
torch.save({"model": model.state_dict(), "ballast": digest}, out / f"rank{rank}.pt")
dist.destroy_process_group()
"""


def _when(event: dict) -> float:
    return datetime.fromisoformat(event["time"].replace("Z", "+00:00")).timestamp()


class Stalled(Exception):
    """A job that printed nothing for STALL seconds (what each node printed last is in the message)."""


@dataclass
class Attempt:
    """One node's worker of one attempt, from its lines."""

    up: float
    pid: int
    grouped: float | None = None
    loaded: float | None = None
    load: float | None = None
    from_step: int | None = None
    first: float | None = None  # its first step completed
    steps: int = 0


@dataclass
class Job:
    """A 2-node job on this machine: an agent (or torchrun) per node, each in a session of its own."""

    root: Path
    how: str  # memory, disk, torchrun
    steps: int
    shm: Path
    options: tuple[str, ...] = ()
    disk_every: int = DISK_EVERY
    stalled: list[str] = field(default_factory=list)  # what each node said last, each time the job got stuck
    procs: dict[int, subprocess.Popen] = field(default_factory=dict)
    lines: queue.Queue = field(default_factory=queue.Queue)
    attempts: dict[int, list[Attempt]] = field(default_factory=lambda: {node: [] for node in range(NODES)})
    history: dict[int, list[tuple[int, float]]] = field(default_factory=lambda: {node: [] for node in range(NODES)})

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True)
        (self.root / "ckpt").mkdir()
        self.rdzv, self.master = free_port(), free_port()

    @property
    def ckpt(self) -> Path:
        return self.root / "ckpt"

    def start(self, node: int) -> None:
        trainer = [str(self.root.parent / "trainer.py"), self.how, str(self.steps), str(self.root / "out"), str(self.ckpt),
                   str(STATE_MB), str(self.disk_every)]
        if self.how == "torchrun":
            argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(NODES), "--nproc-per-node", "1",
                    "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{self.rdzv}", "--rdzv-id", "bench",
                    "--rdzv-conf", "join_timeout=120", "--max-restarts", str(3 * FAULTS + 5), "--monitor-interval", "0.1",
                    *trainer]
        else:
            argv = [sys.executable, "-m", "hacfg", "agent", "--nnodes", str(NODES), "--node-rank", str(node),
                    "--rdzv-endpoint", f"127.0.0.1:{self.rdzv}", "--checkpoint-path", str(self.ckpt), "--no-precheck",
                    "--max-restarts", str(3 * FAULTS + 5), "--hang-timeout", "600s", "--grace", "5",
                    "--preload", PRELOAD, *self.options, "--", sys.executable, *trainer]
        env = {**os.environ, "PYTHONPATH": str(REPO), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(self.master),
               "WORLD_SIZE": str(NODES), "NODE_RANK": str(node), "HACFG_MEMORY_ROOT": str(self.shm)}
        env.pop("RANK", None)
        log = (self.root / f"node{node}.log").open("a")
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                cwd=self.root, start_new_session=True)
        self.procs[node] = proc

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                log.flush()
                self.lines.put((node, proc, line))
            log.close()
            self.lines.put((node, proc, None))

        threading.Thread(target=read, daemon=True).start()

    def follow(self, on_step: Callable[[], None]) -> None:
        """Read the nodes' lines until both have ended; ``on_step`` after each completed step."""
        ended = 0
        while ended < NODES:
            try:
                node, proc, line = self.lines.get(timeout=STALL)
            except queue.Empty:
                tails = "".join(f"\n--- node {n}:\n" + (self.root / f"node{n}.log").read_text()[-1500:] for n in range(NODES))
                raise Stalled(f"no line from any node in {STALL:.0f} s:{tails}") from None
            if line is None:
                if proc is not self.procs[node]:  # a lost node's, or a stuck job's: killed, and started again
                    continue
                code = proc.wait()
                if code != 0:
                    raise SystemExit(f"{self.how}: node {node} exited {code}:\n{(self.root / f'node{node}.log').read_text()[-3000:]}")
                ended += 1
                continue
            words = line.split()
            if not words:
                continue
            if words[0] == "up" and len(words) == 4:
                self.attempts[node].append(Attempt(float(words[1]), int(words[3])))
            elif words[0] == "grouped" and len(words) == 2:
                self.attempts[node][-1].grouped = float(words[1])
            elif words[0] == "loaded" and len(words) == 5:
                current = self.attempts[node][-1]
                current.loaded, current.load, current.from_step = float(words[1]), float(words[2]), int(words[4])
            elif words[0] == "step" and len(words) == 3:
                current = self.attempts[node][-1]
                current.steps += 1
                if current.first is None:
                    current.first = float(words[2])
                self.history[node].append((int(words[1]), float(words[2])))
                on_step()

    def current(self) -> list[Attempt]:
        return [self.attempts[node][-1] for node in range(NODES)]

    def done_before(self, moment: float) -> int:
        """The newest step every node had completed (saved) before ``moment``."""
        return min(max((step for step, at in self.history[node] if at < moment), default=0) for node in range(NODES))

    def events(self, node: int) -> list[dict]:
        path = self.ckpt / ".hacfg" / f"node-{node}" / "events.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def wait(self) -> None:
        """Both nodes' launchers ended; one still waiting a minute after the other (torchrun at its
        exit barrier for a node already gone) is killed."""
        for proc in self.procs.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                kill_tree([proc.pid])


def after(events: list[dict], kind: str, moment: float) -> dict | None:
    return next((e for e in events if e["event"] == kind and _when(e) > moment), None)


def itemise(killed: float, marks: list[tuple[str, float | None]]) -> dict[str, float]:
    """Each item from the previous boundary to its own, the boundaries taken in order (a boundary
    already passed adds nothing), so that the items add up to the total."""
    found, last = {}, killed
    for name, moment in marks:
        if moment is None:
            continue
        found[name] = max(0.0, moment - last)
        last = max(last, moment)
    found["total"] = last - killed
    return found


@dataclass
class Fault:
    killed: float
    victim: int
    done: int  # the newest step every node had saved before the kill
    attempts: list[Attempt]


def faults_run(tmp: Path, shm: Path, how: str, seed: int) -> tuple[Job, list[Fault]]:
    """A 2-node run with FAULTS SIGKILLs of one rank, the nodes in turn, each at a random moment of a
    step, from step WARMUP on: a job fails after minutes, once its tiers have grown to their files."""
    job = Job(tmp / how, how, WARMUP + FAULTS * (STEPS_PER_ATTEMPT + 3) + 10, shm)  # room for restarts that redo a step or two
    rng = random.Random(seed)
    faults: list[Fault] = []
    pending: dict = {}

    def on_step() -> None:
        current = job.current()
        if pending and all(a.up > pending["killed"] and a.first is not None for a in current):
            faults.append(Fault(pending["killed"], pending["victim"], job.done_before(pending["killed"]), current))
            pending.clear()
        grown = faults or job.done_before(time.time()) >= WARMUP
        if not pending and len(faults) < FAULTS and grown and all(a.steps >= STEPS_PER_ATTEMPT for a in current):
            victim = len(faults) % NODES
            time.sleep(rng.uniform(0, 0.3))  # a random moment of the step: in its save, most likely
            pending.update(killed=time.time(), victim=victim)
            with contextlib.suppress(ProcessLookupError):
                os.kill(current[victim].pid, signal.SIGKILL)

    for node in range(NODES):
        job.start(node)
    while True:
        try:
            job.follow(on_step)
            job.wait()
            return job, faults
        except Stalled as err:  # killed, and started again from the newest checkpoint, as an operator would
            job.stalled.append(str(err))
            kill_tree([proc.pid for proc in job.procs.values()])
            if len(job.stalled) > 3:
                return job, faults
            pending.clear()
            job.rdzv, job.master = free_port(), free_port()
            for node in range(NODES):
                job.start(node)


def fault_items(job: Job, fault: Fault) -> dict[str, float]:
    a = fault.attempts
    if job.how == "torchrun":
        marks: list[tuple[str, float | None]] = [("detect+stop+decide+start", max(x.up for x in a))]
    else:
        exits = [after(job.events(node), "attempt_exit", fault.killed) for node in range(NODES)]
        starts = [after(job.events(node), "attempt_start", fault.killed) for node in range(NODES)]
        marks = [("detect+stop", max(_when(e) for e in exits if e)), ("decide", max(_when(e) for e in starts if e)),
                 ("start", max(x.up for x in a))]
    found = itemise(fault.killed, [*marks, ("rendezvous", max(x.grouped or 0 for x in a)),
                                   ("load", max(x.loaded or 0 for x in a)), ("first step", max(x.first or 0 for x in a))])
    return {**found, "(load: the read and copy in)": max(x.load or 0 for x in a)}


def tiers_of(job: Job, moment: float) -> list[str | None]:
    return [(after(job.events(node), "attempt_start", moment) or {}).get("resume_tier") for node in range(NODES)]


def resumed_ok(fault: Fault) -> bool:
    """Every node resumed one step: the newest every node had saved before the kill, or the one
    being saved when it came (saved, but not yet said)."""
    steps = {a.from_step for a in fault.attempts}
    return len(steps) == 1 and fault.done <= steps.pop() <= fault.done + 1  # type: ignore[operator]


class Fetches:
    """Watches the lost node's new tier for the fetch of its copy (the hidden folder it arrives in),
    every millisecond or two: when it began, when it ended, how many bytes."""

    def __init__(self, shm: Path, node: int):
        self.shm, self.node = shm, node
        self.began: float | None = None
        self.ended: float | None = None
        self.nbytes = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.stop.is_set() and self.ended is None:
            incoming = list(self.shm.glob(f"hacfg-*-node{self.node}-*/.incoming-step_*"))
            now = time.time()
            if incoming and self.began is None:
                self.began = now
            if incoming:
                with contextlib.suppress(OSError):
                    self.nbytes = max(self.nbytes, sum(f.stat().st_size for f in incoming[0].iterdir()))
            elif self.began is not None:
                self.ended = now
            time.sleep(0.002)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


def copy_held(shm: Path, keeper: int, owner: int) -> int:
    """The newest step of ``owner``'s copies that ``keeper`` holds (0: none)."""
    found = [int(p.parent.name.removeprefix("step_"))
             for p in shm.glob(f"hacfg-*-node{keeper}-*/peer-{owner}/step_*/rank_0.state")]
    return max(found, default=0)


@dataclass
class Loss:
    killed: float
    victim: int
    done: int
    copy: int  # the newest step of its copy on the next node at the kill
    fetch: Fetches
    attempts: list[Attempt]


def losses_run(tmp: Path, shm: Path, copy_every: int) -> tuple[Job, list[Loss]]:
    """A 2-node run in which one node's agent, its workers and its memory tier are lost LOSSES times
    (the nodes in turn), each node started again at once."""
    steps = LOSSES * (2 * copy_every + 3 * STEPS_PER_ATTEMPT) + 10
    job = Job(tmp / "loss", "memory", steps, shm, ("--peer-copy-every", str(copy_every), "--peer-copy-share", "1"))
    losses: list[Loss] = []
    pending: list = []
    resumed = [0]

    def on_step() -> None:
        current = job.current()
        if pending and all(a.up > pending[0][0] and a.first is not None for a in current):
            killed, victim, done, copy, fetch = pending.pop()
            fetch.close()
            losses.append(Loss(killed, victim, done, copy, fetch, current))
            resumed[0] = current[0].from_step or 0
        if pending or len(losses) >= LOSSES or not all(a.steps >= STEPS_PER_ATTEMPT for a in current):
            return
        victim = len(losses) % NODES
        copy = copy_held(shm, (victim + 1) % NODES, victim)
        if copy <= resumed[0] or job.history[0][-1][0] + 2 * copy_every > steps:
            return
        fetch = Fetches(shm, victim)
        killed = time.time()
        os.killpg(job.procs[victim].pid, signal.SIGKILL)  # the agent and its workers, as a lost node
        job.procs[victim].wait()
        pending.append((killed, victim, job.done_before(killed), copy, fetch))
        job.start(victim)

    for node in range(NODES):
        job.start(node)
    job.follow(on_step)
    job.wait()
    return job, losses


def loss_items(job: Job, loss: Loss) -> dict[str, float]:
    a, survivor = loss.attempts, (loss.victim + 1) % NODES
    restarted = after(job.events(loss.victim), "agent_start", loss.killed)
    stopped = after(job.events(survivor), "attempt_exit", loss.killed)
    starts = [after(job.events(node), "attempt_start", loss.killed) for node in range(NODES)]
    found = itemise(loss.killed, [
        ("agent restart", _when(restarted) if restarted else None), ("detect+stop", _when(stopped) if stopped else None),
        ("decide", loss.fetch.began), ("fetch", loss.fetch.ended), ("start (agent)", max(_when(e) for e in starts if e)),
        ("start (worker)", max(x.up for x in a)), ("rendezvous", max(x.grouped or 0 for x in a)),
        ("load", max(x.loaded or 0 for x in a)), ("first step", max(x.first or 0 for x in a))])
    return {**found, "(load: the read and copy in)": max(x.load or 0 for x in a)}


class CopyWindows:
    """When copies were arriving at either node's keeper (its hidden ``.incoming-`` folder there),
    watched every few milliseconds."""

    def __init__(self, shm: Path):
        self.shm = shm
        self.open: dict[Path, float] = {}
        self.windows: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.stop.wait(0.003):
            now, seen = time.time(), set(self.shm.glob("hacfg-*-node*-*/peer-*/.incoming-step_*"))
            for folder in seen - self.open.keys():
                self.open[folder] = now
            for folder in self.open.keys() - seen:
                self.windows.append((self.open.pop(folder), now))

    def close(self) -> list[tuple[float, float]]:
        self.stop.set()
        self.thread.join()
        return sorted(self.windows)


@dataclass
class Steady:
    rate: float  # steps per second after WARMUP (node 0's lines)
    copies: int  # copies kept by either node after WARMUP
    cost: float  # the steps overlapping a copy: their time beyond the median step outside copies, over the whole


def steady_run(tmp: Path, shm: Path, name: str, copy_every: int) -> Steady:
    """A 2-node job without faults, its steps per second after WARMUP steps and what its copies cost."""
    job = Job(tmp / name, "memory", STEADY_STEPS, shm, ("--peer-copy-every", str(copy_every)), disk_every=NEVER)
    watch = CopyWindows(shm)
    for node in range(NODES):
        job.start(node)
    job.follow(lambda: None)
    job.wait()
    windows = watch.close()
    timed = [at for step, at in job.history[0] if step > WARMUP]
    steps = list(itertools.pairwise(timed))
    during = [b - a for a, b in steps if any(a < end and b > start for start, end in windows)]
    outside = [b - a for a, b in steps if not any(a < end and b > start for start, end in windows)]
    usual = statistics.median(outside)
    shutil.rmtree(job.root)
    return Steady((len(timed) - 1) / (timed[-1] - timed[0]), sum(start > timed[0] for start, _ in windows),
                  sum(max(0.0, took - usual) for took in during) / (timed[-1] - timed[0]))


def reference(tmp: Path, steps: int) -> list[dict]:
    """Both ranks' final weights and ballast digest after ``steps`` steps, no fault, no agent, no save."""
    import torch

    root = tmp / f"reference-{steps}"
    if not root.exists():
        root.mkdir()
        env = {**os.environ, "PYTHONPATH": str(REPO), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
               "WORLD_SIZE": str(NODES)}
        env.pop("RANK", None)
        ranks = [subprocess.Popen([sys.executable, str(tmp / "trainer.py"), "plain", str(steps), str(root / "out"),
                                   str(root), str(STATE_MB), str(NEVER)], env={**env, "NODE_RANK": str(node)},
                                  stdout=subprocess.DEVNULL) for node in range(NODES)]
        if any(rank.wait(timeout=600) for rank in ranks):
            raise SystemExit("the uninterrupted run failed")
    return [torch.load(root / "out" / f"rank{node}.pt") for node in range(NODES)]


def same_as_reference(tmp: Path, job: Job) -> bool | str:
    import torch

    if not all((job.root / "out" / f"rank{node}.pt").exists() for node in range(NODES)):
        return "not finished"
    expected = reference(tmp, job.steps)
    finals = [torch.load(job.root / "out" / f"rank{node}.pt") for node in range(NODES)]
    return all(got["ballast"] == want["ballast"] and all(torch.equal(got["model"][k], want["model"][k]) for k in want["model"])
               for got, want in zip(finals, expected, strict=True))


def link_rate(shm: Path) -> float:
    """GB/s of a plain loopback socket copy of STATE_MB read from a tier's file, median of 3 (bench/peer.py's)."""
    import torch
    from peer import plain_copy, rank_files

    from hacfg import memory

    tier = Path(tempfile.mkdtemp(dir=shm, prefix="link-"))
    folder = memory.save(tier, 1, {"ballast": torch.rand(STATE_MB * (1 << 20) // 4)}, rank=0, ranks=1)
    files = rank_files(folder)
    nbytes = sum(path.stat().st_size for path in files)
    times = []
    for _ in range(3):
        began = time.perf_counter()
        plain_copy(files)
        times.append(time.perf_counter() - began)
    shutil.rmtree(tier)
    return nbytes / 1e9 / statistics.median(times)


def table(rows: list[dict[str, float]], indent: str = "  ") -> None:
    if EACH:
        for number, row in enumerate(rows, 1):
            print(f"{indent}#{number:<3}" + "  ".join(f"{name} {value * 1000:.0f}" for name, value in row.items()))
    for name in rows[0]:
        values = [row[name] for row in rows if name in row]
        print(f"{indent}{name:28} p50 {statistics.median(values) * 1000:8.0f} ms   p95 {pct(values, 0.95) * 1000:8.0f} ms")


def steady_section(tmp: Path, shm: Path, share: float) -> None:
    """The third section: steps per second with the peer copies off and on, in interleaved rounds."""
    print(f"\n3. steady steps per second, steps {WARMUP + 1}-{STEADY_STEPS}, {ROUNDS} interleaved rounds, copy points "
          f"every {COPY_EVERY} steps, copies paced to cost the training at most {share:.0%} of its time, as the agent measures")
    configs = {"copies off": NEVER, "copies on": COPY_EVERY}
    runs: dict[str, list[Steady]] = {name: [] for name in configs}
    for round_ in range(ROUNDS):
        for name, every in configs.items():
            runs[name].append(steady_run(tmp, shm, f"steady-{round_}-{every}", every))
            print(f"  round {round_ + 1} {name}: {runs[name][-1]}", flush=True)
    off = statistics.median(run.rate for run in runs["copies off"])
    for name, found in runs.items():
        rate = statistics.median(run.rate for run in found)
        rates = [run.rate for run in found]
        print(f"  {name:12} {rate:6.2f} steps/s p50 ({min(rates):.2f}-{max(rates):.2f})   {100 * (off - rate) / off:+5.1f} % slower; "
              f"copies after the warm-up {statistics.median(run.copies for run in found):.0f} a run, their steps' time "
              f"beyond the usual {100 * statistics.median(run.cost for run in found):.2f} % of the run (each: "
              f"{', '.join(f'{100 * run.cost:.2f}' for run in found)})")


def main() -> None:
    from hacfg.agent.group.peer import COPY_SHARE

    become_subreaper()
    scratch = Scratch.make("group")
    tmp, shm = scratch.tmp, scratch.shm
    (tmp / "trainer.py").write_text(TRAINER)
    try:
        print(f"state {STATE_MB} MB per rank, 2 emulated nodes on 127.0.0.1, one rank each; shared machine "
              f"({os.cpu_count()} cores, others working): figures vary from run to run", flush=True)
        if HOWS:
            print(f"\n1. SIGKILL of one rank (the nodes in turn) to the next step completed on both nodes, {FAULTS} faults")
        totals, step_time = {}, 0.0
        for how in HOWS:
            job, faults = faults_run(tmp, shm, how, ALL_HOWS.index(how))
            if how == "memory":
                step_time = statistics.median(b - a for (_, a), (_, b) in zip(job.history[0], job.history[0][1:], strict=False))
            tiers = sorted({t for f in faults for t in tiers_of(job, f.killed)} - {None}) if how != "torchrun" else []
            wrong = [(f.done, [a.from_step for a in f.attempts]) for f in faults if not resumed_ok(f)]
            rows = [fault_items(job, f) for f in faults]
            totals[how] = statistics.median(row["total"] for row in rows) if rows else math.nan
            same = same_as_reference(tmp, job)
            print(f"\n{how}: faults {len(faults)}; tiers resumed {tiers}; bit-identical to an uninterrupted run: "
                  f"{same}; every resume at the step saved before the fault: {not wrong}{f' (saved, resumed: {wrong})' if wrong else ''}")
            if job.stalled:
                print(f"  recoveries stuck, not in the table: {len(job.stalled)} (the job killed after {STALL:.0f} s without "
                      f"a line and started again from its newest checkpoint); the last:\n{job.stalled[-1][-1200:]}")
            if rows:
                table(rows)
            if EACH and how != "torchrun":
                print(f"  the step each fault came after: {[f.done for f in faults]}")
                written = [e for e in job.events(0) if e["event"] == "checkpoint_written"]
                print("  written to disk by node 0's agent (step, seconds): "
                      f"{[(e['step'], e['seconds']) for e in written]}")
            sys.stdout.flush()
            shutil.rmtree(job.root)
        if set(HOWS) == set(ALL_HOWS):
            print(f"\nratio of p50 totals: memory {totals['memory'] / totals['torchrun']:.3f}x torchrun, "
                  f"disk {totals['disk'] / totals['torchrun']:.3f}x torchrun; memory run's step {step_time * 1000:.0f} ms")
        if HOWS and set(HOWS) != set(ALL_HOWS):
            return

        if LOSSES and not ONLY:
            link = link_rate(shm)
            job, losses = losses_run(tmp, shm, COPY_EVERY)
            rows = [loss_items(job, loss) for loss in losses]
            fetch_rates = [loss.fetch.nbytes / 1e9 / (loss.fetch.ended - loss.fetch.began) for loss in losses
                     if loss.fetch.began and loss.fetch.ended]
            tiers = [tiers_of(job, loss.killed) for loss in losses]
            print(f"\n2. node loss (agent, workers and memory tier killed, the agent started again) to the next step "
                  f"completed on both nodes, {len(losses)} losses, the nodes in turn, copy points every {COPY_EVERY} steps")
            print(f"  tiers resumed (node 0, node 1): {tiers}")
            print(f"  steps redone (saved before the loss - resumed): {[loss.done - (loss.attempts[0].from_step or 0) for loss in losses]}; "
                  f"resumed the copy held: {all(a.from_step == loss.copy for loss in losses for a in loss.attempts)}")
            print(f"  bit-identical to an uninterrupted run: {same_as_reference(tmp, job)}")
            if fetch_rates:
                print(f"  fetch {statistics.median(fetch_rates):.2f} GB/s p50 = {statistics.median(fetch_rates) / link:.2f} of a plain loopback "
                      f"socket copy ({link:.2f} GB/s)")
            table(rows)
            sys.stdout.flush()
            shutil.rmtree(job.root)
        if ONLY in ("", "steady"):
            steady_section(tmp, shm, COPY_SHARE)
    finally:
        kill_descendants()
        scratch.remove()


if __name__ == "__main__":
    main()
