"""Cold wall time of `hacfg build` on one file, next to `python -c pass` and yamllint on the same file.

Run: python bench/cold_build.py [FILE]. Target: hacfg build <= 1.5x yamllint.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import Verdict, compile_bytecode, ms, require, table, time_command, time_interleaved

TARGET = 1.5
EXAMPLE = str(Path(__file__).parent.parent / "examples/llama-pretrain/ha.yaml")


def verdicts(file: str = EXAMPLE) -> list[Verdict]:
    compile_bytecode()
    yamllint, build = time_interleaved({  # interleaved, as every ratio against a peer
        "yamllint FILE": ([require("yamllint"), file], dict(os.environ)),
        "hacfg build FILE": ([require("hacfg"), "build", file], dict(os.environ)),
    })
    ratio = build.median / yamllint.median
    return [Verdict("cold build, one file", ms(build), f"yamllint {ms(yamllint)}", ratio, f"<= {TARGET}x yamllint", ratio <= TARGET)]


def main() -> None:
    compile_bytecode()
    file = sys.argv[1] if len(sys.argv) > 1 else EXAMPLE
    rows = [
        time_command("python -c pass", [sys.executable, "-c", "pass"]),
        time_command("yamllint FILE", [require("yamllint"), file]),
        time_command("hacfg build FILE", [require("hacfg"), "build", file]),
        # The floor under hacfg's stack: the libraries every command imports, and nothing else.
        time_command("python: import yaml, pluggy", [sys.executable, "-c", "import yaml, pluggy"]),
    ]
    print(table(rows, baseline=rows[1]))
    ratio = rows[2].median / rows[1].median
    print(f"\nhacfg build / yamllint = {ratio:.2f}x (target <= {TARGET}x): {'ok' if ratio <= TARGET else 'MISSED'}")


if __name__ == "__main__":
    main()
