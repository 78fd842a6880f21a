"""A wheel built from this tree carries the presets, schemas and built-in plugins."""

from __future__ import annotations

import json
import subprocess
import sys
import venv

from conftest import REPO


def test_wheel_installs_and_builds_from_another_directory(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", dist, REPO], check=True, capture_output=True)
    wheel = next(dist.glob("hacfg-*.whl"))
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "--quiet", wheel], check=True, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    preset = subprocess.run([env_dir / "bin" / "hacfg", "build", "llm-long-term"], cwd=elsewhere, capture_output=True, text=True)
    assert preset.returncode == 0, preset.stderr
    assert json.loads(preset.stdout)["metadata"]["annotations"]["fault-tolerance/pod-retry-num"] == "3"

    (elsewhere / "ha.yaml").write_text("version: 1\nscenario: multi-node\njob: {name: elsewhere}\n")
    built = subprocess.run([env_dir / "bin" / "hacfg", "build", "ha.yaml"], cwd=elsewhere, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    assert json.loads(built.stdout)["metadata"]["name"] == "elsewhere"
    imported = subprocess.run([python, "-c", "import hacfg.build; print(hacfg.build.__file__)"], cwd=elsewhere, capture_output=True, text=True)
    assert "site-packages" in imported.stdout
