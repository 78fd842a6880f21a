"""Every import path and module file the docs name still exists, and the moves CHANGELOG lists land
where it says: a module that moves leaves no page pointing at its old home."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import tomllib

import pytest
from kit.paths import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted(REPO.glob("examples/*/README.md"))]
DOTTED = re.compile(r"\bhacfg(?:\.[A-Za-z_]\w*)+(?![\w/])")  # not a Kubernetes key's domain: hacfg.io/...
FROM_IMPORT = re.compile(r"^from (hacfg(?:\.\w+)*) import ([\w, ]+)$", re.MULTILINE)
MODULE_FILE = re.compile(r"\b(?:hacfg|plugins|bench)/[\w/.-]+\.py\b")  # tests/ in the plugin guide are the plugin's
FILE_NAMES = {"toml", "json", "jsonl", "yaml", "yml", "prom", "sarif", "md", "txt", "png", "py", "sh"}  # hacfg.toml, ...
MOVED = re.compile(r"^\| `(hacfg(?:\.\w+)*)` \| `(hacfg(?:\.\w+)*)` \|$", re.MULTILINE)


def named_in_docs() -> set[str]:
    """Dotted names in the docs' prose and code, ``from hacfg.x import a, b`` read as hacfg.x.a and hacfg.x.b."""
    names = set()
    for page in DOCS:
        text = page.read_text()
        names |= {name for name in DOTTED.findall(text) if name.rsplit(".", 1)[1] not in FILE_NAMES}
        for module, imported in FROM_IMPORT.findall(text):
            names |= {f"{module}.{name.strip()}" for name in imported.split(",")}
    return names


def resolves(dotted: str) -> bool:
    """``dotted`` is a module, or an attribute reached from the longest module prefix that imports."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def test_every_hacfg_path_the_docs_name_imports():
    names = named_in_docs()
    assert {"hacfg.plugin", "hacfg.testing", "hacfg.heartbeat.beat", "hacfg.checkpoint.save_step"} <= names
    assert sorted(name for name in names if not resolves(name)) == []


def test_every_module_file_the_docs_name_exists():
    named = {path for page in DOCS for path in MODULE_FILE.findall(page.read_text())}
    assert "hacfg/plugin/hookspecs.py" in named
    assert sorted(path for path in named if not (REPO / path).is_file()) == []


def test_each_move_the_changelog_lists_lands_where_it_says():
    unreleased = (REPO / "CHANGELOG.md").read_text().split("\n## ")[1]
    moves = dict(MOVED.findall(unreleased))
    assert moves["hacfg.plugin_manager"] == "hacfg.plugin.manager"
    assert sorted(new for new in moves.values() if not resolves(new)) == []


@pytest.mark.parametrize("entry", ["console script", "python -m hacfg"])
def test_the_command_starts_from_its_public_entries(entry):
    script = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]["hacfg"]
    module, function = script.split(":")
    call = f"import {module}; {module}.{function}()" if entry == "console script" else "import runpy; runpy.run_module('hacfg', run_name='__main__')"
    done = subprocess.run([sys.executable, "-c", call, "--version"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.startswith("hacfg ")) == (0, True), done.stderr
