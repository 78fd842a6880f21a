"""The agent's costs, measured in one run: restart latency (vs torchrun), relay throughput (vs a
plain pipe), CPU while idle-supervising, and hang detection latency (vs the configured timeout).

Run: python bench/agent.py. Targets: restart latency >= 10x lower than torchrun's; relay >= 1.0x
the plain pipe; idle CPU < 1% of a core; hang detected within timeout + 1 s.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import Verdict, cpu_seconds, verdicts_table

RESTARTS = 20
RELAY_MB = 200
RELAY_RUNS = 15
HACFG = [sys.executable, "-m", "hacfg"]


def timed(argv: list[str], **kwargs) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)
    return time.perf_counter() - start


def median_of(runs: int, argv: list[str], **kwargs) -> float:
    return statistics.median(timed(argv, **kwargs) for _ in range(runs))


def restart_latency(tmp: Path) -> tuple[float, float | None]:
    """Seconds from one child's exit to the next child's start, averaged over RESTARTS restarts."""
    fail = ["/bin/sh", "-c", "exit 1"]
    alone = median_of(5, fail)
    state = tmp / "state"

    # Unconditional restarts stop after 3 in a row, so crash by signal: an environment fault.
    crash = ["/bin/sh", "-c", "kill -9 $$"]

    def agent_crash() -> float:
        shutil.rmtree(state, ignore_errors=True)
        return timed([*HACFG, "agent", "--state-dir", str(state), "--no-precheck", "--max-restarts", str(RESTARTS), "--", *crash])

    startup = median_of(3, [*HACFG, "agent", "--state-dir", str(tmp / "s0"), "--no-precheck", "--", "/bin/true"])
    agent_total = statistics.median(agent_crash() for _ in range(3))
    ours = (agent_total - startup - (RESTARTS + 1) * alone) / RESTARTS
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        return ours, None
    torch_start = median_of(3, [torchrun, "--standalone", "--nproc-per-node=1", "--no-python", "--max-restarts=0", "/bin/true"])
    torch_total = median_of(3, [torchrun, "--standalone", "--nproc-per-node=1", "--no-python", f"--max-restarts={RESTARTS}", *fail])
    theirs = (torch_total - torch_start - RESTARTS * alone) / RESTARTS
    return ours, theirs


def relay(tmp: Path) -> tuple[float, float]:
    """MB/s of RELAY_MB of child output through the agent, and through a plain pipe.

    The reader times from the first byte to the last, so neither side's start-up or exit counts.
    """
    writer = tmp / "writer.py"
    writer.write_text("import os, sys\nchunk = b'x' * 65535 + b'\\n'\nfor _ in range(int(sys.argv[1]) * 16):\n    os.write(1, chunk)\n")
    reader = tmp / "reader.py"
    reader.write_text(
        "import os, sys, time\nbuf = memoryview(bytearray(1 << 20))\nfirst = None\ntotal = 0\nexpected = int(sys.argv[1])\n"
        "while total < expected:\n    n = os.readv(0, [buf])\n    if not n:\n        break\n    first = first or time.perf_counter()\n    total += n\n"
        "print(total / (time.perf_counter() - first) / 1e6)\nwhile os.readv(0, [buf]):\n    pass\n"
    )

    def rate(prefix: list[str]) -> float:
        command = " ".join([*prefix, sys.executable, str(writer), str(RELAY_MB)])
        out = subprocess.run(["/bin/sh", "-c", f"{command} | {sys.executable} {reader} {RELAY_MB << 20}"], capture_output=True, text=True).stdout
        return float(out)

    agent = [*HACFG, "agent", "--state-dir", str(tmp / "relay"), "--no-precheck", "--"]
    # interleaved, and many: whether the scheduler puts writer and reader on one core or two
    # changes a pipe's speed two-fold, and it falls on both sides alike
    pairs = [(rate(agent), rate([])) for _ in range(RELAY_RUNS)]
    return statistics.median(a for a, _ in pairs), statistics.median(p for _, p in pairs)


def idle_cpu(tmp: Path, seconds: float = 5.0, *, silent: bool = False) -> float:
    """Percent of one core the agent uses while its child sleeps (hang detection on), once the child
    has shown life: a training job's steady state. ``silent``: a child that never shows life, past
    the first seconds in which the agent looks for it often."""
    from hacfg.agent.process.attempt import QUICK_START

    shown = "" if silent else "echo started; "
    proc = subprocess.Popen(
        [*HACFG, "agent", "--state-dir", str(tmp / f"idle-{silent}"), "--no-precheck", "--hang-timeout", "30m", "--",
         "sh", "-c", f"{shown}sleep {seconds + 3 + (QUICK_START if silent else 0)}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    time.sleep(QUICK_START + 1 if silent else 1.5)  # past start-up
    before, started = cpu_seconds(proc.pid), time.monotonic()
    time.sleep(seconds)
    used, elapsed = cpu_seconds(proc.pid) - before, time.monotonic() - started
    proc.wait()
    return 100 * used / elapsed


def hang_latency(tmp: Path, timeout: float = 2.0) -> float:
    """Seconds past the timeout before the agent declares a silent child hung."""
    state = tmp / "hang"
    subprocess.run(
        [*HACFG, "agent", "--state-dir", str(state), "--no-precheck", "--hang-timeout", f"{int(timeout)}s", "--initial-hang-timeout", f"{int(timeout)}s", "--grace", "1", "--", "sleep", "60"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    events = [json.loads(line) for line in (state / "events.jsonl").read_text().splitlines()]
    stamp = {e["event"]: e["time"] for e in events}
    from datetime import datetime

    def parse(text: str) -> datetime:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    return (parse(stamp["hang"]) - parse(stamp["attempt_start"])).total_seconds() - timeout


def verdicts() -> Iterator[Verdict]:
    """Each row as soon as it is measured."""
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        ours, theirs = restart_latency(tmp)
        if theirs is None:
            yield Verdict("restart latency", f"{ours * 1000:.1f}ms", "torchrun: not installed", None, ">= 10x lower", None)
        else:
            yield Verdict("restart latency", f"{ours * 1000:.1f}ms", f"torchrun {theirs * 1000:.1f}ms", theirs / ours, ">= 10x lower", theirs / ours >= 10)
        agent_mbs, pipe_mbs = relay(tmp)
        yield Verdict(f"relay {RELAY_MB} MB", f"{agent_mbs:.0f} MB/s", f"plain pipe {pipe_mbs:.0f} MB/s", agent_mbs / pipe_mbs, ">= 1.0x pipe", agent_mbs / pipe_mbs >= 1.0)
        cpu = idle_cpu(tmp)
        yield Verdict("idle CPU", f"{cpu:.2f}% of a core", "-", None, "< 1%", cpu < 1)
        cpu = idle_cpu(tmp, silent=True)
        yield Verdict("idle CPU, silent start-up", f"{cpu:.2f}% of a core", "-", None, "< 1%", cpu < 1)
        late = hang_latency(tmp)
        yield Verdict("hang detection latency", f"{late:+.3f}s", "2s timeout", None, "<= timeout + 1s", late <= 1)

def main() -> None:
    print(verdicts_table(list(verdicts())))


if __name__ == "__main__":
    main()
