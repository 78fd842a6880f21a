"""Restart latency with torch imported, from the child's death to the next attempt's first line:
hacfg's warm restarts against its cold ones and torchrun's; and the warm interpreter's memory.

Each attempt of a script that imports torch prints the time of its first line, and of its death
just before it SIGKILLs itself; the latency of a restart is the next attempt's first line minus
that death. In the warm run each attempt first waits until the agent's warm interpreter for the
next attempt is ready (a job fails after minutes, not within the second it takes to import) and
reports that interpreter's memory.

Run: python bench/warm.py (needs torch). Target: warm restart latency <= 50 ms.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import Verdict, verdicts_table

RESTARTS = int(os.environ.get("BENCH_WARM_RESTARTS", "4"))
SCRIPT = """\
import os, signal, sys, time
from pathlib import Path

import torch

print(f"first {time.time():.6f}", flush=True)
attempt = int(os.environ.get("HACFG_ATTEMPT") or int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) + 1)
if attempt > int(sys.argv[1]):
    sys.exit(0)
if sys.argv[2] == "wait-for-warm":
    log = Path(os.environ["HACFG_HEARTBEAT_FILE"]).with_name("warm.log")
    while True:
        for entry in Path("/proc").iterdir():
            try:
                ours = entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == os.getppid()
                if ours and b"_hacfg_warm" in (entry / "cmdline").read_bytes() and f"interpreter {entry.name} ready" in log.read_text():
                    rss = (entry / "status").read_text().split("VmRSS:")[1].split()[0]
                    pss = (entry / "smaps_rollup").read_text().split("Pss:")[1].split()[0]
                    print(f"warm interpreter rss {rss} pss {pss}", flush=True)
                    break
            except (OSError, ValueError, IndexError):
                continue
        else:
            time.sleep(0.05)
            continue
        break
print(f"death {time.time():.6f}", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def latencies(output: str) -> list[float]:
    """Each restart's latency: the next attempt's first line minus the previous attempt's death."""
    marks = re.findall(r"^(first|death) ([\d.]+)$", output, re.M)
    return [float(t) - float(marks[i - 1][1]) for i, (kind, t) in enumerate(marks) if kind == "first" and i and marks[i - 1][0] == "death"]


def run(tmp: Path, how: str) -> tuple[list[float], list[tuple[int, int]]]:
    script = tmp / "train.py"
    script.write_text(SCRIPT)
    state = tmp / f"state-{how}"
    shutil.rmtree(state, ignore_errors=True)
    if how == "torchrun":
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1", "--max-restarts", str(RESTARTS),
                "--monitor-interval", "0.1", str(script), str(RESTARTS), "no-wait"]
    else:
        argv = [sys.executable, "-m", "hacfg", "agent", "--state-dir", str(state), "--no-precheck", "--max-restarts", str(RESTARTS),
                *(() if how == "warm" else ("--no-warm",)), "--", sys.executable, str(script), str(RESTARTS),
                "wait-for-warm" if how == "warm" else "no-wait"]
    output = subprocess.run(argv, capture_output=True, text=True, timeout=1200).stdout
    memory = [(int(rss), int(pss)) for rss, pss in re.findall(r"^warm interpreter rss (\d+) pss (\d+)$", output, re.M)]
    return latencies(output), memory


def verdicts() -> list[Verdict]:
    try:
        import torch  # noqa: F401
    except ImportError:
        return [Verdict("warm restart latency", "-", "torch is not installed", None, "<= 50 ms", None)]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        warm, memory = run(tmp, "warm")
        cold, _ = run(tmp, "cold")
        torchrun, _ = run(tmp, "torchrun")
    if not warm or not cold or not torchrun:
        return [Verdict("warm restart latency", "failed", f"restarts seen: {len(warm)} warm, {len(cold)} cold, {len(torchrun)} torchrun",
                        None, "<= 50 ms", False)]
    ours, theirs, peer = (statistics.median(found) for found in (warm, cold, torchrun))
    rss, pss = (statistics.median(column) / 1024 for column in zip(*memory, strict=True))
    spread = f"{ours * 1000:.1f}ms ({min(warm) * 1000:.0f}-{max(warm) * 1000:.0f})"
    return [
        Verdict("warm restart, torch", spread, f"cold {theirs * 1000:.0f}ms, torchrun {peer * 1000:.0f}ms", peer / ours, "<= 50 ms", ours <= 0.05),
        Verdict("warm interpreter memory", f"RSS {rss:.0f} MB", f"PSS {pss:.0f} MB", None, "reported", True),
    ]


def main() -> None:
    print(verdicts_table(verdicts()))


if __name__ == "__main__":
    main()
