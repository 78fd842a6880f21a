"""The command line, in this process or as a real one, and the findings it reports."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hacfg.cli.main import main


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_hacfg(*args: str | Path, cwd: Path | None = None, env: dict | None = None, timeout: float = 60) -> Result:
    """Run ``hacfg ARGS`` as a real process (``python -m hacfg``)."""
    proc = subprocess.run(
        [sys.executable, "-m", "hacfg", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def findings(cli, *args: str | Path, keys: str | tuple[str, ...] | None = None) -> Any:
    """The findings of ``hacfg lint -f json ARGS``: each as the JSON report writes it, or, with
    ``keys``, the set of those fields of each (of the one field, when ``keys`` is a name)."""
    result = cli("lint", "-f", "json", *args)
    assert result.code in (0, 1), result.err
    found = json.loads(result.out)["findings"]
    if keys is None:
        return found
    if isinstance(keys, str):
        return {f[keys] for f in found}
    return {tuple(f[key] for key in keys) for f in found}


def run_in_process(*args: str) -> tuple[int, str]:
    """``hacfg ARGS`` in this process without pytest's capture (for hypothesis): exit code and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, err.getvalue()
