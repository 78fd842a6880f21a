"""Every benchmark, one command, one table of ratios measured in this run.

    pip install -e '.[bench,server]'   # the peers: yamllint, check-jsonschema (torch for torchrun)
    python bench/run.py

Absolute times depend on the machine; the targets are ratios against peers measured in the
same run: medians of several runs, with min and max. The language server's peer is what an
editor without it runs on every save: a cold `hacfg lint` of the same file.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import agent
import cold_build
import cold_plan
import lint_corpus
import multinode
import server
from common import verdicts_table


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")), platform.processor())
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores ({cpu}), Python {platform.python_version()}"


def main() -> None:
    verdicts = [*lint_corpus.verdicts(), *cold_build.verdicts(), *cold_plan.verdicts(), *server.verdicts(), *agent.verdicts(), *multinode.verdicts()]
    print(f"machine: {machine()}\n")
    print(verdicts_table(verdicts))
    missed = [v.name for v in verdicts if v.ok is False]
    print(f"\n{len(verdicts) - len(missed)} of {len(verdicts)} targets met" + (f"; missed: {', '.join(missed)}" if missed else ""))


if __name__ == "__main__":
    main()
