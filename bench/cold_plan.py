"""Cold wall time of `hacfg plan` next to `hacfg lint`: a 30-day, 1024-node scenario, and a
16,384-node one over 90 days that meets about 10,800 failures.

Run: python bench/cold_plan.py. Targets: the 1024-node plan under 150 ms (the forecast, its
budget chain and the advice included), on the machine the README's table names; the
16,384-node plan within 2x a cold lint of the 1024-node file, timed interleaved in the same run.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import Verdict, compile_bytecode, ms, require, table, time_interleaved

TARGET_MS = 150
TARGET_RATIO = 2.0
SCENARIO = """\
version: 1
scenario: llm-long-term
job: {nodes: 1024, duration: 30d}
checkpoint: {path: obs://bucket/run/ckpt, interval: 2h, save_time: 5m, resume: true}
reliability: {restart_time: 10m}
"""
# Nodes as many as Llama 3 405B's GPUs, for three months, saving at the optimum the plan names.
MANY_FAILURES = """\
version: 1
scenario: llm-long-term
job: {nodes: 16384, duration: 90d}
checkpoint: {path: obs://bucket/run/ckpt, save_time: 2m, resume: true}
reliability: {restart_time: 5m}
"""


def _timings(folder: str) -> list:
    files = {}
    for name, text in (("ha.yaml", SCENARIO), ("many.yaml", MANY_FAILURES)):
        files[name] = Path(folder) / name
        files[name].write_text(text)
    hacfg, env = require("hacfg"), dict(os.environ)
    return time_interleaved({
        "hacfg lint FILE": ([hacfg, "lint", str(files["ha.yaml"])], env),
        "hacfg plan FILE": ([hacfg, "plan", str(files["ha.yaml"])], env),
        "hacfg plan MANY (10,800 failures)": ([hacfg, "plan", str(files["many.yaml"])], env),
    })


def verdicts() -> list[Verdict]:
    compile_bytecode()
    with tempfile.TemporaryDirectory() as folder:
        lint, plan, many = _timings(folder)
    ratio = many.median / lint.median
    return [
        Verdict("cold plan, 30 d x 1024 nodes", ms(plan), f"hacfg lint {ms(lint)}", plan.median / lint.median,
                f"<= {TARGET_MS}ms", plan.median * 1000 <= TARGET_MS),
        Verdict("cold plan, 10,800 failures", ms(many), f"hacfg lint {ms(lint)}", ratio,
                f"<= {TARGET_RATIO}x hacfg lint", ratio <= TARGET_RATIO),
    ]


def main() -> None:
    compile_bytecode()
    with tempfile.TemporaryDirectory() as folder:
        rows = _timings(folder)
    print(table(rows, baseline=rows[0]))
    print(f"\nhacfg plan: {rows[1].median * 1000:.0f} ms (target <= {TARGET_MS} ms)")
    ratio = rows[2].median / rows[0].median
    print(f"hacfg plan / hacfg lint, 10,800 failures: {ratio:.2f}x (target <= {TARGET_RATIO}x): {'ok' if ratio <= TARGET_RATIO else 'MISSED'}")


if __name__ == "__main__":
    main()
