"""Every benchmark, one command, one table of ratios measured in this run.

    pip install -e '.[bench,server]'   # the peers: yamllint, check-jsonschema (torch for torchrun)
    python bench/run.py

Absolute times depend on the machine; the targets are ratios against peers measured in the
same run: medians of several runs, with min and max. The language server's peer is what an
editor without it runs on every save: a cold `hacfg lint` of the same file.

Each row is printed as soon as it is measured (the whole run takes minutes). Nothing the run
started outlives it: the process adopts orphans, and every process below it is killed at the end
of each benchmark, however it detached.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import agent
import cold_build
import cold_plan
import completion
import lint_corpus
import multinode
import server
import steady
import warm
from common import HEADER, Verdict, become_subreaper, kill_descendants

BENCHMARKS: list[Callable[[], Iterable[Verdict]]] = [
    lint_corpus.verdicts, cold_build.verdicts, cold_plan.verdicts, completion.verdicts, server.verdicts, agent.verdicts, steady.verdicts, warm.verdicts,
    multinode.verdicts,
]


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")), platform.processor())
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores ({cpu}), Python {platform.python_version()}"


def main() -> None:
    become_subreaper()
    print(f"machine: {machine()}\n")
    print(HEADER, flush=True)
    verdicts: list[Verdict] = []
    for benchmark in BENCHMARKS:
        try:
            for verdict in benchmark():
                print(verdict.row(), flush=True)
                verdicts.append(verdict)
        finally:
            kill_descendants()
    missed = [v.name for v in verdicts if v.ok is False]
    print(f"\n{len(verdicts) - len(missed)} of {len(verdicts)} targets met" + (f"; missed: {', '.join(missed)}" if missed else ""))


if __name__ == "__main__":
    main()
