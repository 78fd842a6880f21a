"""pre-commit as a user sets it up: the README's snippet as written, and this repository's hooks."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kit.paths import REPO

# slow: pre-commit builds its hook environments
pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("git") is None, reason="needs git")]

BODY = {
    "kind": "job",
    "metadata": {"name": "demo", "annotations": {"fault-tolerance/job-retry-num": 3, "fault-tolerance/hang-retry": "True"}},
    "algorithm": {"engine": {"image_url": "org/img:tag"}, "command": "sh run.sh", "outputs": [{"name": "ckpt", "remote": {"obs": {"obs_url": "obs://b/ckpt/"}}}]},
    "spec": {"resource": {"flavor_id": "modelarts.pool.visual.xlarge", "node_count": 1}},
}
# What else a repository holds: none of it is hacfg's to judge, and a Helm template is not even YAML.
OTHER_FILES = {
    "package.json": '{"name": "web", "version": "1.0.0", "dependencies": {"react": "^18.0.0"}}\n',
    "k8s/web.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, annotations: {fault-tolerance/job-retry-num: 3}}\nspec: {}\n",
    "chart/templates/job.yaml": "kind: {{ .Values.kind }}\n  broken: [\n",
    "tsconfig.json": '{"compilerOptions": {"strict": true}}\n',
}


def readme_snippet() -> str:
    section = (REPO / "README.md").read_text().split("### pre-commit", 1)[1]
    return re.search(r"```yaml\n(.*?)```", section, re.DOTALL).group(1)


def git_repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    subprocess.run(["git", "add", "-A"], cwd=path, check=True)
    return path


def pre_commit(repo: Path, cache: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PRE_COMMIT_HOME": str(cache),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # where `hacfg` is installed
        "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run([sys.executable, "-m", "pre_commit", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=600)


def test_the_readme_snippet_works_as_written(tmp_path):
    repo = git_repo(tmp_path / "repo", {
        ".pre-commit-config.yaml": readme_snippet(),
        "jobs/ha.yaml": "version: 1\nscenario: single-node\nrestart:\n  maks: 3\n",
        "deploy/job.json": json.dumps(BODY, indent=2) + "\n",
        **OTHER_FILES,
    })
    first = pre_commit(repo, tmp_path / "cache", "run", "--all-files")
    assert first.returncode == 1, first.stdout + first.stderr
    assert re.search(r"hacfg fix\.+Failed\n.*\n.*files were modified by this hook", first.stdout)
    assert "fixed 2 in deploy/job.json" in first.stdout
    assert json.loads((repo / "deploy/job.json").read_text())["metadata"]["annotations"] == {
        "fault-tolerance/job-retry-num": "3", "fault-tolerance/hang-retry": "true"}
    assert "fixed 1 in jobs/ha.yaml" in first.stdout  # the misspelled key, renamed to the one it meant
    assert (repo / "jobs/ha.yaml").read_text() == "version: 1\nscenario: single-node\nrestart:\n  max: 3\n"
    assert "jobs/ha.yaml:4:8: HA001 error auto restart is on but checkpoint.path is not set" in first.stdout
    for other in OTHER_FILES:
        assert other not in first.stdout
        assert other not in first.stderr

    (repo / "jobs/ha.yaml").write_text("version: 1\nscenario: single-node\nrestart:\n  max: 3\ncheckpoint: {path: obs://b/c, resume: true}\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    second = pre_commit(repo, tmp_path / "cache", "run", "--all-files")
    assert re.search(r"hacfg fix\.+Passed", second.stdout), second.stdout
    assert "HA101" not in second.stdout and "HA015" not in second.stdout and "HA007" not in second.stdout


def test_the_readme_snippet_declares_the_shipped_hooks():
    shipped = {hook["id"]: hook for hook in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())}
    [local] = yaml.safe_load(readme_snippet())["repos"]
    assert {hook["id"] for hook in local["hooks"]} == set(shipped)
    for hook in local["hooks"]:
        assert (hook["entry"], hook["types_or"]) == (shipped[hook["id"]]["entry"], shipped[hook["id"]]["types_or"])


def test_the_repository_hooks_through_try_repo(tmp_path):
    repo = git_repo(tmp_path / "repo", {"ha.yaml": "version: 1\nscenario: single-node\nrestart:\n  maks: 3\n", **OTHER_FILES})
    bad = pre_commit(repo, tmp_path / "cache", "try-repo", str(REPO), "hacfg-lint", "--all-files")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "ha.yaml:4:3: HA101" in bad.stdout
    assert not any(other in bad.stdout for other in OTHER_FILES)
    (repo / "ha.yaml").write_text("version: 1\nscenario: single-node\nrestart:\n  max: 3\ncheckpoint: {path: obs://b/c, resume: true}\n")
    good = pre_commit(repo, tmp_path / "cache", "try-repo", str(REPO), "hacfg-lint", "--files", "ha.yaml", *OTHER_FILES)
    assert good.returncode == 0, good.stdout + good.stderr
