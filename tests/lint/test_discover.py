"""Which files `hacfg lint` reads: found like ruff finds Python files, each once, by name or by content."""

from __future__ import annotations

import json
import subprocess

from kit.cli import findings
from kit.paths import REPO

BODY = {
    "kind": "job",
    "metadata": {"name": "demo", "annotations": {"fault-tolerance/job-retry-num": 3}},
    "algorithm": {"engine": {"image_url": "org/img:tag"}, "command": "sh run.sh"},
    "spec": {"resource": {"flavor_id": "modelarts.pool.visual.xlarge", "node_count": 1}},
}
DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  annotations:
    fault-tolerance/job-retry-num: 3
spec:
  replicas: 2
  template:
    spec:
      containers: [{name: web, image: nginx}]
"""
PACKAGE_JSON = '{"name": "web", "version": "1.0.0", "scripts": {"test": "jest"}, "dependencies": {"react": "^18.0.0"}}\n'
SCENARIO = "version: 1\nscenario: single-node\nhang: {timeout: 5m}\n"  # HA016: one warning per file


def put(root, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def linted(cli, *args) -> list[str]:
    """The files ``hacfg lint ARGS`` reports findings in (each scenario here has one)."""
    return sorted(findings(cli, *args, keys="path"))


def test_a_folder_of_request_bodies_is_found_by_content(cli, project):
    put(project, {
        "deploy/train.json": json.dumps(BODY, indent=2),
        "deploy/finetune.yaml": "kind: job\nmetadata:\n  name: ft\n  annotations: {fault-tolerance/job-retry-num: 3}\n",
        "deploy/k8s/web.yaml": DEPLOYMENT,
        "deploy/package.json": PACKAGE_JSON,
        "deploy/tsconfig.json": '{"compilerOptions": {"strict": true}}',
        "deploy/helm/templates/job.yaml": "kind: {{ .Values.kind }}\n  broken: [\n",
        "deploy/jobs/pretrain.yaml": SCENARIO,
    })
    result = cli("lint", "-f", "json", "deploy")
    report = json.loads(result.out)
    assert sorted({f["path"] for f in report["findings"]}) == ["deploy/finetune.yaml", "deploy/jobs/pretrain.yaml", "deploy/train.json"]
    assert report["summary"]["files"] == 3
    assert result.err == ""


def test_gitignore_is_respected_unless_told_otherwise(cli, project):
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    put(project, {
        ".gitignore": "build/\n*.generated.ha.yaml\n",
        "ha.yaml": SCENARIO,
        "build/ha.yaml": SCENARIO,
        "jobs/a.generated.ha.yaml": SCENARIO,
        "jobs/.gitignore": "scratch/\n!keep.generated.ha.yaml\n",
        "jobs/keep.generated.ha.yaml": SCENARIO,
        "jobs/scratch/ha.yaml": SCENARIO,
        ".git/info/exclude": "local.ha.yaml\n",
        "jobs/local.ha.yaml": SCENARIO,
    })
    assert linted(cli) == ["ha.yaml", "jobs/keep.generated.ha.yaml"]
    assert linted(cli, "jobs") == ["jobs/keep.generated.ha.yaml"]  # the .gitignore above the walked folder applies too
    assert linted(cli, "--no-respect-gitignore") == [
        "build/ha.yaml", "ha.yaml", "jobs/a.generated.ha.yaml", "jobs/keep.generated.ha.yaml", "jobs/local.ha.yaml", "jobs/scratch/ha.yaml",
    ]
    assert linted(cli, "build/ha.yaml") == ["build/ha.yaml"]  # named on the command line: read, as ruff does


def test_tool_folders_are_skipped_but_not_every_hidden_one(cli, project):
    put(project, {
        ".modelarts/ha.yaml": SCENARIO,
        ".github/jobs/train.ha.yaml": SCENARIO,
        ".git/ha.yaml": SCENARIO,
        "node_modules/pkg/ha.yaml": SCENARIO,
        ".venv/lib/ha.yaml": SCENARIO,
        "env/pyvenv.cfg": "home = /usr/bin\n",
        "env/lib/ha.yaml": SCENARIO,
        ".tox/py311/ha.yaml": SCENARIO,
    })
    assert linted(cli) == [".github/jobs/train.ha.yaml", ".modelarts/ha.yaml"]


def test_each_file_is_linted_once(cli, project):
    put(project, {"jobs/ha.yaml": SCENARIO})
    (project / "link.ha.yaml").symlink_to(project / "jobs/ha.yaml")
    report = json.loads(cli("lint", "-f", "json", "jobs/ha.yaml", "./jobs/ha.yaml", "jobs/../jobs/ha.yaml", "jobs", "link.ha.yaml").out)
    assert [(f["path"], f["rule"]) for f in report["findings"] if f["rule"] == "HA016"] == [("jobs/ha.yaml", "HA016")]
    assert report["summary"]["files"] == 1


def test_nothing_found_says_so_on_stderr_and_exits_0_like_ruff(cli, project):
    put(project, {"src/app.py": "print()\n", "package.json": PACKAGE_JSON})
    result = cli("lint", "src")
    assert (result.code, result.out) == (0, "")
    assert result.err == "hacfg: warning: no files found: no scenario files or ModelArts request bodies under the given paths\n"
    assert cli("fix").err == result.err


def test_named_files_that_are_plainly_something_else_are_skipped_with_a_note(cli, project):
    # a Kubernetes object is one even with a scenario file's keys in it
    config_map = "apiVersion: v1\nkind: ConfigMap\nversion: 1\nscenario: single-node\n"
    put(project, {"web.yaml": DEPLOYMENT, "package.json": PACKAGE_JSON, "job.json": json.dumps(BODY), "cm.yaml": config_map})
    result = cli("lint", "web.yaml", "package.json", "job.json", "cm.yaml")
    assert result.code == 1
    assert "hacfg: note: web.yaml: not a scenario file or a ModelArts request body; skipped\n" in result.err
    assert "hacfg: note: cm.yaml: not a scenario file or a ModelArts request body; skipped\n" in result.err
    assert "hacfg: note: package.json: not a scenario file or a ModelArts request body; skipped\n" in result.err
    assert {line.split(":")[0] for line in result.out.splitlines()[:-1]} == {"job.json"}


def test_a_named_file_is_read_even_when_broken_but_force_exclude_chooses_like_a_walk(cli, project):
    put(project, {"broken.yaml": "kind: [\n", "chart.yaml": "kind: {{ .Values.kind }}\n", "ha.yaml": "version: 1\nscenario: [\n"})
    assert "HA100" in cli("lint", "broken.yaml").out
    forced = cli("lint", "--force-exclude", "broken.yaml", "chart.yaml", "ha.yaml")
    assert [line.split(": ")[1].split()[0] for line in forced.out.splitlines()[:-1]] == ["HA100"]  # only the file named like a scenario
    assert forced.out.startswith("ha.yaml:")


def test_a_file_that_others_extend_is_checked_as_a_base(cli, project):
    put(project, {
        "jobs/common.ha.yaml": "# shared by every job: no version or scenario of its own\nhang: {timeout: 5m}\n",
        "jobs/a/ha.yaml": "version: 1\nscenario: single-node\nextends: ../common.ha.yaml\n",
        "jobs/b/ha.yaml": "version: 1\nscenario: single-node\nextends: ../common.ha.yaml\nhang: {timeout: 30m}\n",
        "team/base.yaml": "version: 1\nscenario: multi-node\nrestart: {mx: 2}\n",
        "team/x/ha.yaml": "version: 1\nscenario: multi-node\nextends: ../base.yaml\n",
    })
    report = json.loads(cli("lint", "-f", "json").out)
    assert [(f["path"], f["line"], f["rule"]) for f in report["findings"] if f["rule"] in ("HA016", "HA101")] == [
        ("jobs/a/ha.yaml", 3, "HA016"),  # the risk is judged where the base is used, once
        ("team/base.yaml", 3, "HA101"),  # a base's own keys are checked at their line...
        ("team/x/ha.yaml", 3, "HA101"),  # ...and inherited by the file that extends it
    ]
    assert report["summary"]["files"] == 5


def test_the_example_tree_lints_clean_and_finds_its_scenarios(cli, monkeypatch):
    monkeypatch.chdir(REPO / "examples")
    result = cli("lint", "-f", "json")
    assert json.loads(result.out)["summary"]["files"] >= 2


def test_discovery_hands_each_document_to_lint_with_its_kind(tmp_path):
    """The kind is decided once, from the content, while choosing the file; the lint takes it as given."""
    from hacfg.lint.discover import discover
    from hacfg.lint.settings import Settings

    stream = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: agent}\n---\n"
    stream += "apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata: {name: demo}\nspec: {}\n"
    put(tmp_path, {
        "ha.yaml": SCENARIO,
        "body.json": json.dumps(BODY),
        "jobset.yaml": stream,
        "named/ha.yaml": "job: {nodes: 2}\n",  # a scenario file by its name, whatever it lacks
    })
    found = discover([tmp_path], Settings(root=tmp_path))
    kinds = {f.path.relative_to(tmp_path).as_posix(): [item.kind for item in f.linted] for f in found.files}
    assert kinds == {"ha.yaml": ["scenario"], "body.json": ["job"], "jobset.yaml": ["manifest"], "named/ha.yaml": ["scenario"]}
    (stream_file,) = (f for f in found.files if f.path.name == "jobset.yaml")
    assert [item.document.data["kind"] for item in stream_file.linted] == ["JobSet"]  # not the ConfigMap
