"""The README's examples, run as written: the scenario file, and every hacfg command of the sections on
building, adopting, Volcano and linting (pre-commit's snippet runs in test_precommit.py)."""

from __future__ import annotations

import re
import shlex
import shutil

import pytest
from kit.bodies import BAD_BODY
from kit.cli import run_hacfg
from kit.paths import REPO

pytestmark = pytest.mark.slow  # every command of the README, each a real process

README = (REPO / "README.md").read_text()
SECTIONS = dict(re.findall(r"^## (.+?)\n(.*?)(?=^## |\Z)", README, re.DOTALL | re.MULTILINE))
BLOCK = re.compile(r"```(\w*)\n(.*?)```", re.DOTALL)


def blocks(section: str, language: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(SECTIONS[section]) if lang == language]


SCENARIO = blocks("A scenario file", "yaml")[0]


def commands(section: str) -> list[list[str]]:
    """Each `hacfg ...` of the section's bash blocks, without its comment, shell redirection or other programs."""
    found = []
    for block in blocks(section, "bash"):
        for line in block.splitlines():
            for part in line.split("#", 1)[0].split("&&"):
                words = shlex.split(part.split(">", 1)[0])
                if words[:1] == ["hacfg"]:
                    found.append(words[1:])
    return found


@pytest.fixture
def readme_project(project):
    """What the README's commands expect to find: the README's scenario file, a request body, a folder of bodies."""
    (project / "ha.yaml").write_text(SCENARIO)
    (project / "job.json").write_text(BAD_BODY)
    (project / "deploy").mkdir()
    shutil.copy(REPO / "tests/data/bodies/custom-image-retry.json", project / "deploy/train.json")
    return project


def test_the_scenario_file_lints_clean_and_builds(readme_project):
    assert run_hacfg("lint", "ha.yaml", cwd=readme_project).code == 0
    built = run_hacfg("build", "ha.yaml", cwd=readme_project)
    assert built.code == 0, built.err


def test_ci_runs_the_quick_starts_test_lines_verbatim():
    """The suite on the pinned torch, then the tests that touch torch on the newest: .ci/run says
    both exactly as the README does, so neither drifts from the other."""
    [quick] = blocks("Quick start", "bash")
    [test] = [line for line in quick.splitlines() if "pytest" in line]
    assert test.index("&& pytest &&") < test.index("pytest -m torch")
    assert test in (REPO / ".ci" / "run").read_text().splitlines()


def test_the_quick_start_builds(readme_project):
    [build] = [c for c in commands("Quick start") if c[0] == "build"]
    result = run_hacfg(*build, cwd=REPO)
    assert result.code == 0, result.err


@pytest.mark.parametrize("section", ["Building", "Adopting hacfg for an existing job", "Beyond ModelArts: Volcano on any Kubernetes", "Beyond Volcano: JobSet and Kubeflow Trainer", "Linting"])
def test_every_command_runs_as_written(readme_project, section):
    found = commands(section)
    assert found, f"no hacfg commands in README section {section!r}"
    for args in found:
        result = run_hacfg(*args, cwd=readme_project)
        allowed = (0, 1) if args[0] == "lint" else (0,)  # lint exits 1 on the findings the README shows
        assert result.code in allowed, f"hacfg {' '.join(args)}: {result.err}"
        assert "internal error" not in result.err


def test_the_lint_output_shown_is_what_lint_prints(readme_project):
    shown = next(body for lang, body in BLOCK.findall(SECTIONS["Linting"]) if lang == "")
    printed = run_hacfg("lint", "job.json", cwd=readme_project).out
    assert printed.startswith(shown)


def test_the_settings_shown_are_accepted(readme_project):
    [settings] = blocks("Linting", "toml")
    (readme_project / "pyproject.toml").write_text("[project]\nname = 'demo'\n\n" + settings)
    result = run_hacfg("lint", "-f", "json", "job.json", cwd=readme_project)
    assert result.code in (0, 1) and result.err == ""
