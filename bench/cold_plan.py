"""Cold wall time of `hacfg plan` on a 30-day, 1024-node scenario, next to `hacfg lint` of it.

Run: python bench/cold_plan.py. Target: under 150 ms (the forecast, its budget chain and the
advice included), on the machine the README's table names.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import Verdict, compile_bytecode, ms, require, table, time_command

TARGET_MS = 150
SCENARIO = """\
version: 1
scenario: llm-long-term
job: {nodes: 1024, duration: 30d}
checkpoint: {path: obs://bucket/run/ckpt, interval: 2h, save_time: 5m, resume: true}
reliability: {restart_time: 10m}
"""


def _timings(folder: str) -> list:
    file = Path(folder) / "ha.yaml"
    file.write_text(SCENARIO)
    hacfg = require("hacfg")
    return [
        time_command("hacfg lint FILE", [hacfg, "lint", str(file)]),
        time_command("hacfg plan FILE", [hacfg, "plan", str(file)]),
    ]


def verdicts() -> list[Verdict]:
    compile_bytecode()
    with tempfile.TemporaryDirectory() as folder:
        lint, plan = _timings(folder)
    ratio = plan.median / lint.median
    ok = plan.median * 1000 <= TARGET_MS
    return [Verdict("cold plan, 30 d x 1024 nodes", ms(plan), f"hacfg lint {ms(lint)}", ratio, f"<= {TARGET_MS}ms", ok)]


def main() -> None:
    compile_bytecode()
    with tempfile.TemporaryDirectory() as folder:
        rows = _timings(folder)
    print(table(rows, baseline=rows[0]))
    print(f"\nhacfg plan: {rows[1].median * 1000:.0f} ms (target <= {TARGET_MS} ms)")


if __name__ == "__main__":
    main()
