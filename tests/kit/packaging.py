"""Installed distributions and what a real process imports."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from kit.paths import REPO


def distribution(site: Path, name: str, entry_points: dict[str, str], version: str = "1.0") -> Path:
    """An unpacked distribution with ``hacfg`` entry points in ``site``, as pip leaves one in site-packages."""
    dist = site / f"{name.replace('-', '_')}-{version}.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (dist / "entry_points.txt").write_text("[hacfg]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items()))
    return dist


def imported_modules(
    *args: str | Path, cwd: Path = REPO, env: dict | None = None, python: str | Path = sys.executable
) -> set[str]:
    """Every module a real ``hacfg ARGS`` process imports, however it exits (recorded as each is looked for)."""
    recorder = (
        "import runpy, sys\n"
        "class Recorder:\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        sys.stderr.write(f'imported {name}\\n')\n"
        "sys.meta_path.insert(0, Recorder())\n"
        "runpy.run_module('hacfg', run_name='__main__', alter_sys=True)\n"
    )
    proc = subprocess.run(
        [str(python), "-c", recorder, *map(str, args)], capture_output=True, text=True, cwd=cwd,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode in (0, 1, 2), proc.stderr
    return {line.removeprefix("imported ") for line in proc.stderr.splitlines() if line.startswith("imported ")}


@dataclass
class Venv:
    python: Path
    bin: Path

    def run(self, *args: str | Path, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})

    def pip_install(self, *requirements: str | Path) -> subprocess.CompletedProcess:
        """This interpreter's pip installing into the virtualenv: seeding one of its own (ensurepip)
        costs 7 s of CPU."""
        return self.run(sys.executable, "-m", "pip", "--python", self.python, "install", "--quiet", *requirements)
