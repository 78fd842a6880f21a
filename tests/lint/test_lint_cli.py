"""`hacfg lint` and `hacfg fix` as users run them: formats, exit codes, settings, suppressions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from kit.bodies import BAD_BODY
from kit.cli import run_hacfg
from kit.paths import REPO

from hacfg.lint.settings import _PassedBy


def test_text_output_and_exit_1(cli, project):
    (project / "job.json").write_text(BAD_BODY)
    result = cli("lint", "job.json")
    assert result.code == 1
    assert result.out.splitlines() == [
        "job.json:6:40: HA007 error annotation fault-tolerance/job-retry-num must be a string, not 3: quote it",
        'job.json:7:37: HA015 error fault-tolerance/hang-retry is "True"; the platform reads only "true" or "false": write "true"',
        "Found 2 findings in 1 file (2 errors, 0 warnings, 0 info), 2 fixable with `hacfg fix`.",
    ]


def test_clean_files_exit_0(cli, project):
    shutil.copy(REPO / "examples/llama-pretrain/ha.yaml", project / "ha.yaml")
    result = cli("lint")
    assert (result.code, result.out) == (0, "")


def test_directories_find_scenario_files_only(cli, project):
    (project / "jobs" / "a").mkdir(parents=True)
    (project / "jobs/a/ha.yaml").write_text("version: 1\nscenario: single-node\nrestart: {maks: 1}\n")
    (project / "jobs/train.ha.yml").write_text("version: 1\nscenario: single-node\nhang: {timeout: 1m}\ncheckpoint: {path: obs://b/c, resume: true}\n")
    (project / "jobs/other.yaml").write_text("not: [valid\n")
    (project / ".hidden").mkdir()
    (project / ".hidden/ha.yaml").write_text("not: [valid\n")
    report = json.loads(cli("lint", "--format", "json", "jobs").out)
    assert [(f["path"], f["rule"]) for f in report["findings"]] == [
        ("jobs/a/ha.yaml", "HA001"), ("jobs/a/ha.yaml", "HA017"), ("jobs/a/ha.yaml", "HA101"), ("jobs/train.ha.yml", "HA016")]
    assert report["summary"]["files"] == 2


def test_json_format(cli, project):
    (project / "job.json").write_text(BAD_BODY)
    report = json.loads(cli("lint", "-f", "json", "job.json").out)
    assert report["version"] == 1
    assert report["findings"][0] == {
        "rule": "HA007",
        "severity": "error",
        "path": "job.json",
        "line": 6,
        "column": 40,
        "end_line": 6,
        "end_column": 41,
        "logical_path": 'metadata.annotations."fault-tolerance/job-retry-num"',
        "message": "annotation fault-tolerance/job-retry-num must be a string, not 3: quote it",
        "fixable": True,
    }
    assert report["summary"] == {"files": 1, "findings": 2, "errors": 2, "warnings": 0, "infos": 0, "fixable": 2, "suppressed": 0, "baselined": 0}


def test_sarif_validates_against_the_official_schema(cli, project):
    from jsonschema import Draft4Validator

    (project / "job.json").write_text(BAD_BODY)
    (project / "ha.yaml").write_text(
        "version: 1\nscenario: multi-node\nrestart:\n  on_hang: false  # hacfg: disable=HA003 -- our own watchdog\n"
    )
    sarif = json.loads(cli("lint", "-f", "sarif", "job.json", "ha.yaml").out)
    schema = json.loads((REPO / "tests/data/sarif-schema-2.1.0.json").read_text())
    errors = [e.message for e in Draft4Validator(schema).iter_errors(sarif)]
    assert errors == []
    run = sarif["runs"][0]
    rules = {r["id"]: r for r in run["tool"]["driver"]["rules"]}
    assert rules["HA007"]["defaultConfiguration"] == {"level": "error"}
    assert rules["HA007"]["helpUri"].endswith("#ha007")
    first = next(r for r in run["results"] if r["ruleId"] == "HA007")
    assert first["ruleId"] == "HA007" and run["tool"]["driver"]["rules"][first["ruleIndex"]]["id"] == "HA007"
    assert first["locations"][0]["physicalLocation"]["region"] == {"startLine": 6, "startColumn": 40, "endLine": 6, "endColumn": 41}
    suppressed = [r for r in run["results"] if "suppressions" in r]
    assert [(r["ruleId"], r["suppressions"]) for r in suppressed] == [("HA003", [{"kind": "inSource", "justification": "our own watchdog"}])]


def test_github_format_and_auto_detection(cli, project, monkeypatch):
    (project / "job.json").write_text(BAD_BODY)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    lines = cli("lint", "job.json").out.splitlines()
    assert lines[0] == "::error file=job.json,line=6,col=40,endLine=6,endColumn=41,title=HA007::HA007 annotation fault-tolerance/job-retry-num must be a string, not 3: quote it"


@pytest.mark.slow
def test_github_paths_are_relative_to_the_repository_root_from_a_working_directory_below_it(tmp_path):
    repo = tmp_path / "repo"
    (repo / "deploy/jobs").mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / "deploy/jobs/job.json").write_text(BAD_BODY)
    env = {"GITHUB_ACTIONS": "true"}
    at_root = run_hacfg("lint", "jobs/job.json", cwd=repo / "deploy", env=env).out  # the git top level
    assert at_root.startswith("::error file=deploy/jobs/job.json,line=6,col=40,")
    # Actions names the checkout, which need not be a repository (a downloaded artifact, a submodule)
    workspace = run_hacfg("lint", ".", cwd=repo / "deploy/jobs", env={**env, "GITHUB_WORKSPACE": str(repo / "deploy")})
    assert workspace.out.startswith("::error file=jobs/job.json,line=6,")
    from_outside = run_hacfg("lint", "-f", "github", repo / "deploy/jobs/job.json", cwd=tmp_path)
    assert from_outside.out.startswith("::error file=deploy/jobs/job.json,")  # the root of the file's repository


def test_fail_on_and_exit_zero(cli, project):
    (project / "ha.yaml").write_text("version: 1\nscenario: single-node\nhang: {timeout: 5m}\ncheckpoint: {path: obs://b/c, resume: true}\n")
    assert cli("lint").code == 0  # a warning only
    assert cli("lint", "--fail-on", "warning").code == 1
    (project / "job.json").write_text(BAD_BODY)
    assert cli("lint", "--exit-zero").code == 0


def test_settings_select_ignore_severity_and_per_file(cli, project):
    (project / "job.json").write_text(BAD_BODY)
    (project / "legacy").mkdir()
    (project / "legacy/old.json").write_text(BAD_BODY)
    (project / "pyproject.toml").write_text(
        "[tool.hacfg]\n"
        'ignore = ["HA015"]\n'
        'severity = {HA007 = "warning"}\n'
        'per-file-ignores = {"legacy/*" = ["HA007"]}\n'
        'fail-on = "warning"\n'
    )
    result = cli("lint", "-f", "json", "job.json", "legacy/old.json")
    findings = json.loads(result.out)["findings"]
    assert [(f["path"], f["rule"], f["severity"]) for f in findings] == [("job.json", "HA007", "warning")]
    assert result.code == 1  # fail-on = warning


def test_dot_hacfg_toml_and_unknown_ids_are_errors(cli, project):
    (project / "ha.yaml").write_text("version: 1\nscenario: single-node\ncheckpoint: {path: obs://b/c, resume: true}\n")
    (project / ".hacfg.toml").write_text('ignore = ["HA999"]\n')
    result = cli("lint")
    assert result.code == 2
    assert "[tool.hacfg]: unknown rule 'HA999'" in result.err
    (project / ".hacfg.toml").write_text('ignroe = ["HA003"]\n')
    assert "unknown key 'ignroe'; did you mean 'ignore'?" in cli("lint").err


def test_settings_platform_applies_to_bodies(cli, project):
    body = json.loads(BAD_BODY)
    body["metadata"]["annotations"] = {"fault-tolerance/job-retry-num": "5"}
    (project / "job.json").write_text(json.dumps(body))
    assert cli("lint", "job.json").code == 0
    (project / ".hacfg.toml").write_text('platform = "otc"\n')
    result = cli("lint", "job.json")
    assert (result.code, "otc allows 1 to 3" in result.out) == (1, True)


def test_missing_path_exits_2_and_unparsable_file_is_a_finding(cli, project):
    assert cli("lint", "nope.yaml").code == 2
    (project / "ha.yaml").write_text("version: 1\nscenario: [\n")
    result = cli("lint", "ha.yaml")
    assert result.code == 1
    assert result.out.startswith("ha.yaml:3:1: HA100 error")


def test_unknown_rule_in_a_comment_is_an_error(cli, project):
    (project / "ha.yaml").write_text("version: 1\nscenario: single-node  # hacfg: disable=HA999\n")
    result = cli("lint", "ha.yaml")
    assert result.code == 1
    assert "ha.yaml:2:24: HA099 error unknown rule 'HA999' in suppression comment" in result.out


def test_disable_file(cli, project):
    (project / "ha.yaml").write_text("# hacfg: disable-file=HA016\nversion: 1\nscenario: single-node\nhang: {timeout: 1m}\ncheckpoint: {path: obs://b/c, resume: true}\n")
    assert cli("lint", "--fail-on", "info", "ha.yaml").code == 0


def test_inherited_findings_point_at_the_users_file(cli, project):
    (project / "base.yaml").write_text("version: 1\nscenario: multi-node\nhang: {timeout: 2m}\ncheckpoint: {path: obs://b/c, resume: true}\n")
    (project / "ha.yaml").write_text("version: 1\nscenario: multi-node\nextends: base.yaml\n")
    out = cli("lint", "ha.yaml").out
    assert out.startswith("ha.yaml:3:10: HA016 warning hang.timeout under 10m")
    assert "(inherited from base.yaml)" in out


def test_explain_and_rules(cli):
    explained = cli("explain", "ha007")
    assert explained.out.startswith("HA007 annotation-not-string (error, from hacfg)\n\nAn annotation value is not a string.")
    assert "## Fix" in explained.out
    assert cli("explain", "HA700").code == 2
    listing = json.loads(cli("rules", "-f", "json").out)
    assert {r["id"] for r in listing} >= {fixtures.name for fixtures in (REPO / "tests" / "data" / "rules").iterdir()}


@pytest.mark.slow
def test_fix_rewrites_only_the_broken_values(cli, project):
    (project / "job.json").write_text(BAD_BODY)
    yaml_body = "# our job\nkind: job\nmetadata:\n  name: demo   # keep me\n  annotations:\n    fault-tolerance/job-retry-num: 3\n    'fault-tolerance/hang-retry': 'Yes'\n"
    (project / "job.yaml").write_text(yaml_body)
    assert cli("fix", "--diff", "job.json").code == 1
    assert (project / "job.json").read_text() == BAD_BODY  # --diff writes nothing
    assert cli("fix", "job.json", "job.yaml").code == 0
    assert (project / "job.json").read_text() == BAD_BODY.replace(": 3,", ': "3",').replace('"True"', '"true"')
    assert (project / "job.yaml").read_text() == yaml_body.replace(": 3\n", ': "3"\n').replace("'Yes'", '"true"')
    remaining = json.loads(cli("lint", "-f", "json", "job.json", "job.yaml").out)["findings"]
    assert [f["rule"] for f in remaining] == ["HA001"]  # no output channel: not something to fix by machine
    assert cli("fix", "--diff", "job.json").code == 0  # nothing left to change


def test_fix_diff(cli, project):
    (project / "job.json").write_text(BAD_BODY)
    result = cli("fix", "--diff", "job.json")
    assert result.code == 1
    assert '\n-      "fault-tolerance/job-retry-num": 3,\n' in result.out
    assert '\n+      "fault-tolerance/job-retry-num": "3",\n' in result.out
    assert result.out.startswith("--- job.json\n+++ job.json\n")


def test_lint_as_a_real_process_never_tracebacks(tmp_path):
    for name, content in {"a.yaml": b"\xff\xfe\x00", "b.json": b"{", "c.yaml": b"version: 1\nscenario: !!python/object:x y\n"}.items():
        (tmp_path / name).write_bytes(content)
    result = run_hacfg("lint", *(tmp_path / n for n in ("a.yaml", "b.json", "c.yaml")), cwd=tmp_path)
    assert result.code == 1
    assert "Traceback" not in result.err
    assert [line.split(": ")[1].split()[0] for line in result.out.splitlines()[:3]] == ["HA100"] * 3


def test_rules_reference_page_is_current(cli, builtin_plugins_only):
    assert cli("rules", "-f", "markdown").out == (REPO / "docs/rules.md").read_text(), "run: hacfg rules -f markdown > docs/rules.md"


def test_a_terminal_gets_the_source_line_and_a_caret(tmp_path):
    (tmp_path / "job.json").write_text(BAD_BODY)
    output = run_on_a_terminal(["lint", "job.json"], tmp_path, {"NO_COLOR": "1"})
    lines = output.replace("\r\n", "\n").splitlines()
    assert lines[:3] == [
        "job.json:6:40: HA007 error annotation fault-tolerance/job-retry-num must be a string, not 3: quote it",
        '   6 |       "fault-tolerance/job-retry-num": 3,',
        " " * 46 + "^",
    ]


def lint_stdin(text: str, *args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hacfg", "lint", *args], input=text, capture_output=True, text=True,
                          cwd=cwd, timeout=60)


def test_standard_input_is_linted_as_the_file_it_is_named(project):
    """What editor integrations (ALE, efm-langserver, none-ls) run on an unsaved buffer."""
    (project / ".hacfg.toml").write_text('per-file-ignores = {"legacy/*.json" = ["HA007"]}\n')
    named = lint_stdin(BAD_BODY, "--stdin-filename", "deploy/job.json", "-", cwd=project)
    assert (named.returncode, [line.split(": ")[1][:5] for line in named.stdout.splitlines()[:-1]]) == (1, ["HA007", "HA015"])
    assert named.stdout.startswith("deploy/job.json:6:40: HA007 error")
    assert lint_stdin(BAD_BODY, "--stdin-filename", "legacy/job.json", cwd=project).stdout.count("HA007") == 0
    as_dash = lint_stdin("version: 1\nscenario: single-node\nrestart: {maks: 1}\n", "-", cwd=project)
    assert as_dash.stdout.startswith("-:") and "HA101" in as_dash.stdout
    foreign = lint_stdin("apiVersion: v1\nkind: Pod\n", "--stdin-filename", "pod.yaml", cwd=project)
    assert (foreign.returncode, foreign.stdout) == (0, "")
    assert "pod.yaml: not a scenario file or a ModelArts request body; skipped" in foreign.stderr
    mixed = lint_stdin(BAD_BODY, "-", "deploy", cwd=project)
    assert (mixed.returncode, mixed.stderr) == (2, "hacfg: error: '-' (standard input) is linted on its own, not with other paths\n")


def test_quiet_prints_the_findings_only(cli, project):
    (project / "job.json").write_text(BAD_BODY)
    (project / "empty").mkdir()
    quiet = cli("lint", "-q", "job.json")
    assert quiet.code == 1 and len(quiet.out.splitlines()) == 2 and "Found" not in quiet.out
    assert cli("--version").out == cli("-V").out
    nothing = run_hacfg("lint", "--quiet", "empty", cwd=project)
    assert (nothing.code, nothing.out, nothing.err) == (0, "", "")


def test_statistics_count_each_rule(cli, project):
    (project / "job.json").write_text(BAD_BODY)
    (project / "other.json").write_text(BAD_BODY.replace('"True"', '"true"'))
    assert cli("lint", "--statistics").out == "2\tHA007\t[*] annotation-not-string\n1\tHA015\t[*] boolean-annotation-spelling\n"
    listed = json.loads(cli("lint", "--statistics", "--output-format", "json").out)
    assert listed[0] == {"code": "HA007", "name": "annotation-not-string", "count": 2, "fixable": True}
    assert cli("lint", "--statistics", "-f", "sarif").err == "hacfg: error: --statistics prints text or json, not sarif\n"


def test_rules_chosen_on_the_command_line_go_over_the_settings(cli, project):
    (project / "job.json").write_text(BAD_BODY)
    (project / "pyproject.toml").write_text('[tool.hacfg]\nignore = ["HA015"]\n')

    def rules(*args):
        return sorted({f["rule"] for f in json.loads(cli("lint", "-f", "json", *args).out)["findings"]})

    assert rules() == ["HA007"]
    assert rules("--select", "HA015") == ["HA015"]  # a selection starts over, the settings' ignores too
    assert rules("--extend-select", "HA015") == ["HA007"]  # still ignored by the settings
    assert rules("--select", "HA007,ha015", "--ignore", "HA007") == ["HA015"]
    unknown = cli("lint", "--ignore", "HA0O7")
    assert (unknown.code, unknown.err.startswith("hacfg: error: --ignore: unknown rule 'HA0O7'; did you mean")) == (2, True)


PASSED_BY_PROBE = """
import json, sys
from hacfg.cli.main import main
code = main(["lint", "-f", "json", "job.json"])
print(json.dumps({"code": code, "tomllib": "tomllib" in sys.modules}))
"""


def test_a_pyproject_without_settings_is_read_once_and_again_when_it_changes(tmp_path):
    """Most projects' pyproject.toml has no [tool.hacfg]: the next lint passes it by without parsing
    it, and reads it again once it changes, broken or with settings."""
    (tmp_path / "job.json").write_text(BAD_BODY)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "demo"\n')
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}

    def lint() -> dict:
        ran = subprocess.run([sys.executable, "-c", PASSED_BY_PROBE], cwd=tmp_path, env=env, capture_output=True, text=True)
        return json.loads(ran.stdout.splitlines()[-1])

    while time.time_ns() - pyproject.stat().st_ctime_ns < _PassedBy.SETTLED_NS:  # a file changed since is never remembered
        time.sleep(0.05)
    assert lint() == {"code": 1, "tomllib": True}
    assert lint() == {"code": 1, "tomllib": False}
    pyproject.write_text('[project\nname = "demo"\n')
    broken = run_hacfg("lint", "job.json", cwd=tmp_path, env=env)
    assert (broken.code, broken.err) == (2, f"{pyproject}:1:9: invalid TOML: Expected ']' at the end of a table declaration\n")
    pyproject.write_text('[tool.hacfg]\nfail-on = "info"\nignore = ["HA007", "HA015"]\n')
    assert lint() == {"code": 0, "tomllib": True}


def test_config_names_the_settings_file(cli, project):
    (project / "job.json").write_text(BAD_BODY)
    (project / "pyproject.toml").write_text('[tool.hacfg]\nignore = ["HA015"]\n')
    (project / "ci").mkdir()
    (project / "ci/strict.toml").write_text('select = ["HA015"]\n')
    (project / "ci/pyproject.toml").write_text('[project]\nname = "ci"\n')
    def rules(*args):
        return sorted({f["rule"] for f in json.loads(cli("lint", "-f", "json", *args).out)["findings"]})

    assert rules() == ["HA007"]  # the nearest settings
    assert rules("--config", "ci/strict.toml") == ["HA015"]  # only these
    assert rules("--config", "ci/pyproject.toml") == ["HA007", "HA015"]  # a pyproject.toml without [tool.hacfg]
    missing = cli("lint", "--config", "ci/none.toml")
    assert (missing.code, missing.err) == (2, "ci/none.toml: no such settings file\n")


def run_on_a_terminal(args: list[str], cwd, env: dict[str, str]) -> str:
    """What hacfg writes when its stdout is a real terminal (a pty), as a user's shell runs it."""
    import os
    import pty

    primary, secondary = pty.openpty()
    environment = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "CI")}
    proc = subprocess.Popen([sys.executable, "-m", "hacfg", *args], stdout=secondary, stderr=subprocess.DEVNULL,
                            cwd=cwd, env={**environment, "TERM": "xterm", **env})
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 1 << 16)
        except OSError:  # EIO: the process closed its side
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(primary)
    proc.wait(60)
    return b"".join(chunks).decode()


def test_colour_on_a_terminal_only_and_as_no_color_and_force_color_say(project):
    (project / "job.json").write_text(BAD_BODY)
    painted = run_on_a_terminal(["lint", "job.json"], project, {})
    assert "\x1b[1mjob.json\x1b[0m:6:40: \x1b[1;31mHA007\x1b[0m error" in painted
    assert "\x1b[" not in run_on_a_terminal(["lint", "job.json"], project, {"NO_COLOR": "1"})
    assert "\x1b[" not in run_on_a_terminal(["lint", "job.json"], project, {"CI": "true"})  # a CI log
    assert "\x1b[" not in run_on_a_terminal(["lint", "-o", "report.txt", "job.json"], project, {})
    assert "\x1b[" not in (project / "report.txt").read_text()
    piped = subprocess.run([sys.executable, "-m", "hacfg", "lint", "job.json"], capture_output=True, text=True, cwd=project,
                           env={k: v for k, v in __import__("os").environ.items() if k not in ("FORCE_COLOR", "NO_COLOR")})
    assert "\x1b[" not in piped.stdout
    forced = run_hacfg("lint", "job.json", cwd=project, env={"FORCE_COLOR": "1"})
    assert "\x1b[1;31mHA007\x1b[0m" in forced.out
