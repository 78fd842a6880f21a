"""Write the ``hacfg diagnose`` fixtures from real runs of ``train.py``.

    python tests/data/logs/generate.py                      # every log here; torchrun needs torch==2.13.0
    python tests/data/logs/generate.py --into DIR NAME...   # some logs, elsewhere (the tests do this)

Each log is the merged stdout and stderr of a real run in a scratch directory, with two
substitutions so that it does not depend on the machine: the scratch directory reads
``/home/ma-user/work`` (the ModelArts working directory) and the Python prefix ``/usr/local``.
The ``modelarts-*`` logs frame a real run the way a downloaded ModelArts job log does, with the
platform's service lines in the documented format ("[Modelarts Service Log]Training end with
return code: 137", ModelArts troubleshooting "Training Job Process Exits Unexpectedly") and the
run's real return code.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKDIR = "/home/ma-user/work"
PREFIX = "/usr/local"
TORCHRUN = [str(Path(sys.executable).parent / "torchrun"), "--nproc-per-node"]
PYTHON = [sys.executable, "train.py"]

CASES: dict[str, list[str]] = {
    "python-traceback.log": [*PYTHON, "raise"],
    "shell-killed.log": ["bash", "run.sh"],
    "modelarts-exit-137.log": [*PYTHON, "kill"],
    "modelarts-success.log": [*PYTHON, "ok"],
    "torchrun-exception.log": [*TORCHRUN, "1", "train.py", "raise"],
    "torchrun-sigkill.log": [*TORCHRUN, "1", "train.py", "kill"],
    "torchrun-peer-killed.log": [*TORCHRUN, "2", "train.py", "kill-peer"],
    "modelarts-torchrun-sigkill.log": [*TORCHRUN, "1", "train.py", "kill"],
}


def run(name: str, into: Path) -> Path:
    """Run one case and write its log into ``into``; returns the log's path."""
    with tempfile.TemporaryDirectory() as scratch:
        shutil.copy(HERE / "train.py", scratch)
        Path(scratch, "run.sh").write_text(f"#!/bin/bash\necho 'epoch 1'\n{sys.executable} train.py kill\n")
        proc = subprocess.run(
            CASES[name],
            cwd=scratch,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=300,
            check=False,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        text = proc.stdout.replace(scratch, WORKDIR).replace(sys.prefix, PREFIX)
    if name.startswith("modelarts-"):
        code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode  # as the platform's shell reports it
        text = (
            f"[ModelArts Service Log]modelarts-pipe: will create log file /tmp/log/{name}\n{text}"
            f"[Modelarts Service Log]Training end with return code: {code}\n[Modelarts Service Log]Training completed.\n"
        )
    path = into / name
    path.write_text(text)
    return path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--into", type=Path, default=HERE)
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"default: all of {', '.join(CASES)}")
    args = parser.parse_args()
    for case in args.names or CASES:
        print(run(case, args.into))
