"""docs/plugins.md stays true: every hook is documented, and its code blocks are a plugin that works."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
import tomllib

import pytest
from kit.packaging import distribution
from kit.paths import REPO

from hacfg.plugin import hookspecs
from hacfg.plugin import manager as plugin_manager

GUIDE = (REPO / "docs" / "plugins.md").read_text()
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def blocks(language: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(GUIDE) if lang == language]


def test_every_hook_has_a_section():
    hooks = {name for name, _ in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("hacfg_")}
    sections = set(re.findall(r"^### (hacfg_\w+)$", GUIDE, re.MULTILINE))
    assert hooks - sections == set(), "docs/plugins.md has no section for these hooks"
    assert sections - hooks == set(), "docs/plugins.md documents hooks hacfg no longer has"


@pytest.mark.slow
def test_the_guide_is_a_working_plugin_with_passing_tests(tmp_path, cli, monkeypatch):
    module, files = [], {}
    for language in ("python", "yaml"):
        for body in blocks(language):
            first = body.splitlines()[0]
            if first.startswith("# ") and "/" in first:
                files[first[2:].strip()] = body
            elif language == "python":
                module.append(body)
    (tmp_path / "hacfg_plugin_example.py").write_text("\n".join(module))
    for name, body in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body)
    project = tomllib.loads(blocks("toml")[0])["project"]
    distribution(tmp_path, project["name"], project["entry-points"]["hacfg"], version=project["version"])
    monkeypatch.syspath_prepend(str(tmp_path))
    plugin_manager.reset()

    listing = cli("plugins")
    assert "example              hacfg-plugin-example 0.1.0" in listing.out
    for provided in ("rules: EXA101", "presets: example-site", "targets: summary", "prechecks: scratch", "checkpoint layouts: epoch-N", "failure classifier",
                     "event hook", "restart hook"):
        assert provided in listing.out
    assert listing.err == ""

    built = cli("build", "--target", "summary", "multi-node")
    assert built.out == '{\n  "job": "multi-node",\n  "restarts": 3,\n  "hang_restarts": true\n}\n'
    plugin_manager.reset()

    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=tmp_path, capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "4 passed" in tests.stdout
