"""How long a TAB takes: `hacfg` answering a shell's completion request, next to the typer app.

Run: python bench/completion.py. Target: every TAB under 150 ms (rule IDs, targets, options),
on the machine the README's table names. The peer is the same request answered by typer's
own completion (`hacfg.cli.app`), which is what a TAB cost before.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import Verdict, compile_bytecode, ms, require, table, time_interleaved

TARGET_MS = 150
LINES = {"rule IDs": "hacfg explain HA0", "targets": "hacfg build --target ", "options": "hacfg lint --f"}
TYPER = "from hacfg.cli.app import app; app(prog_name='hacfg')"


def _request(line: str) -> dict[str, str]:
    words = line.split()
    index = len(words) if line.endswith(" ") else len(words) - 1
    return {**os.environ, "_HACFG_COMPLETE": "complete_bash", "COMP_WORDS": line, "COMP_CWORD": str(index)}


def _timings() -> list:
    hacfg = require("hacfg")
    commands = {f"TAB: {what}": ([hacfg], _request(line)) for what, line in LINES.items()}
    commands["TAB through typer: rule IDs"] = ([sys.executable, "-c", TYPER], _request(LINES["rule IDs"]))
    return time_interleaved(commands, repeat=11)


def verdicts() -> list[Verdict]:
    compile_bytecode()
    *tabs, typer = _timings()
    slowest = max(tabs, key=lambda t: t.median)
    ok = slowest.median * 1000 <= TARGET_MS
    return [Verdict(f"completion ({slowest.label[5:]})", ms(slowest), f"typer {ms(typer)}", slowest.median / typer.median,
                    f"<= {TARGET_MS}ms", ok)]


def main() -> None:
    compile_bytecode()
    rows = _timings()
    print(table(rows, baseline=rows[-1]))


if __name__ == "__main__":
    main()
