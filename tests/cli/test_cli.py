"""The command line as a user meets it: exit codes, one-line errors, no tracebacks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from kit.paths import REPO

from hacfg import __version__


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("version: 1\nscenario: [\n", ":3:1: while parsing a flow node"),
        (
            "version: 1\nscenario: !!python/object:os.system ls\n",
            ":2:11: YAML tag !!python/object:os.system is not allowed",
        ),
        ("version: 1\nscenario: single-node\nscenario: multi-node\n", ":3:1: duplicate key 'scenario'"),
        (
            "version: 1\nscenario: single-node\njob: {nodes: four}\n",
            ":3:14: job.nodes: Input should be a valid integer (got 'four')",
        ),
        (
            "version: 1\nscenario: single-node\nrestart: {maks: 2}\n",
            ":3:11: unknown key 'maks' in restart; did you mean 'max'?",
        ),
        (
            "version: 1\nscenario: single-node\njob:\n\tnodes: 2\n",
            ":4:1: a tab in indentation: YAML indents with spaces only",
        ),
        (
            "version: 1\njob:\n  nodes: 2\n   accelerator: gpu\n",
            ":4:15: unexpected ':': this line is indented deeper than the key above it",
        ),
        (
            "version: 1\njob:\n    nodes: 2\n  accelerator: gpu\n",
            ":4:3: bad indentation: this line does not line up with the keys above it",
        ),
        ("", ":1:1: empty file: a scenario file needs at least 'version: 1' and 'scenario'"),
        ("# nothing yet\n\n", ":1:1: empty file: a scenario file needs at least 'version: 1' and 'scenario'"),
        (
            'version: 1\nscenario: single-node\nrestart:\n  max: "five"\n',
            ":4:8: restart.max: Input should be a valid integer (got 'five')",
        ),
        (
            "version: 1\nscenario: single-node\njob: {accelerator: GPU}\n",
            ":3:20: job.accelerator: Input should be 'gpu', 'npu' or 'cpu' (got 'GPU'); did you mean 'gpu'?",
        ),
        (
            "version: 1\nscenario: single-node\nplatform: {a: 1}\nrestart:\n  max: 3\n",
            ":3:11: platform: Input should be 'huaweicloud' or 'otc'",
        ),
    ],
    ids=[
        "malformed",
        "python-tag",
        "duplicate-key",
        "wrong-type",
        "misspelled-key",
        "tab",
        "indent-deeper",
        "indent-shallower",
        "empty",
        "only-comments",
        "bad-value-shown",
        "case-insensitive-suggestion",
        "platform-mapping-beside-restart",
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, cli, text, expected):
    path = tmp_path / "ha.yaml"
    path.write_text(text)
    result = cli("build", path)
    assert result.code == 2
    assert result.out == ""
    assert result.err == f"{path}{expected}" + result.err.split(expected, 1)[1]
    assert result.err.count("\n") == 1
    assert "Traceback" not in result.err
    linted = cli("lint", path)  # the same words as a finding
    assert (linted.code, linted.err) == (1, "")
    position, message = expected.split(": ", 1)
    finding = rf"^{re.escape(f'{path}{position}')}: HA10[0-2] error {re.escape(message)}"
    assert re.search(finding, linted.out, re.MULTILINE), linted.out


def test_otc_rejects_five_restarts(tmp_path, cli):
    path = tmp_path / "ha.yaml"
    path.write_text("version: 1\nscenario: multi-node\nrestart:\n  max: 5\n")
    result = cli("build", "--only", "annotations", "--platform", "otc", path)
    assert (result.code, result.err) == (
        2,
        f"{path}:4:8: restart.max: otc allows 1 to 3 restarts (0 turns auto restart off), got 5\n",
    )
    assert cli("build", "--only", "annotations", path).code == 0


def test_missing_file_and_directory(tmp_path, cli):
    assert cli("build", tmp_path / "nope.yaml").err == f"{tmp_path}/nope.yaml: cannot read: No such file or directory\n"
    (tmp_path / "dir.yaml").mkdir()
    assert cli("build", tmp_path / "dir.yaml").err == f"{tmp_path}/dir.yaml: is a directory, not a file\n"


def test_usage_errors_exit_2(cli):
    assert cli("build", "--platform", "aws", "single-node").code == 2
    assert cli("no-such-command").code == 2


def test_version(cli):
    assert cli("--version").out == f"hacfg {__version__}\n"
    # one source: the installed metadata, which pyproject.toml writes
    assert __version__ == tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def test_internal_errors_exit_3_with_a_short_message(cli, monkeypatch):
    import hacfg.compile.compiler

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(hacfg.compile.compiler, "compile_config", broken)
    result = cli("build", "single-node")
    assert result.code == 3
    assert result.err == "hacfg: internal error: RuntimeError: boom (this is a bug; --debug shows the traceback)\n"
    assert "Traceback" in cli("--debug", "build", "single-node").err


def test_committed_schema_matches_the_model(cli):
    result = cli("schema")
    assert result.code == 0
    committed = (REPO / "schemas/hacfg.schema.json").read_text()
    assert result.out == committed, "schemas/hacfg.schema.json drifted: run `hacfg schema -o schemas/hacfg.schema.json`"


def test_examples_point_editors_at_the_schema_and_satisfy_it():
    from jsonschema import Draft202012Validator

    from hacfg.scenario.source import load

    for example in sorted(REPO.glob("examples/**/ha.yaml")):
        first = example.read_text().splitlines()[0]
        assert first.startswith("# yaml-language-server: $schema=")
        schema_path = (example.parent / first.split("=", 1)[1]).resolve()
        validator = Draft202012Validator(json.loads(schema_path.read_text()))
        assert list(validator.iter_errors(load(example).data)) == []


@pytest.mark.parametrize("scenario", ["single-node", "multi-node", "llm-long-term"])
def test_init_writes_a_file_that_builds(cli, tmp_path, scenario):
    out = tmp_path / "ha.yaml"
    assert cli("init", "--scenario", scenario, "-o", out).code == 0
    assert f"scenario: {scenario}" in out.read_text()
    assert json.loads(cli("build", out).out)["metadata"]["name"] == "my-training-job"
    assert cli("build", "--target", "volcano", out).code == 0


def test_init_refuses_to_overwrite(cli, tmp_path):
    out = tmp_path / "ha.yaml"
    out.write_text("mine\n")
    result = cli("init", "-o", out)
    assert (result.code, out.read_text()) == (2, "mine\n")
    assert "already exists; pass --force" in result.err
    assert cli("init", "-o", out, "--force").code == 0


COMMANDS = [
    "build",
    "schema",
    "init",
    "import",
    "plugins",
    "lint",
    "fix",
    "rules",
    "explain",
    "agent",
    "precheck",
    "events",
]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_names_what_an_argument_holds_not_its_python_type(cli, command):
    page = cli(command, "--help").out
    assert not re.search(r"<(str|int|float|bool)\b|list\[|\{\w+\}", page), page
    assert page.splitlines()[0].startswith(f"Usage: hacfg {command} [OPTIONS]")


def test_help_pages_read_as_written(cli):
    assert cli("lint", "--help").out.splitlines()[0] == "Usage: hacfg lint [OPTIONS] [PATH...]"
    assert "\n  PATH...  Files and directories" in cli("lint", "--help").out
    assert cli("build", "--help").out.splitlines()[0] == "Usage: hacfg build [OPTIONS] FILE"
    assert "--hang-timeout DURATION" in cli("agent", "--help").out


@pytest.mark.slow
def test_shell_completion_completes_commands_and_choices(tmp_path):
    """Typed at a bash prompt: typer names the shell from the process that started hacfg, so the test
    starts it from bash, whatever the shell (or none, or $SHELL unset) that runs the tests."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "HOME": str(tmp_path)}

    def bash(command: str) -> subprocess.CompletedProcess:
        # `; exit $?`: bash forks for the command rather than becoming it, and stays its parent
        return subprocess.run(["bash", "-c", f"{command}; exit $?"], capture_output=True, text=True, timeout=60, env=env)

    script = bash("hacfg --show-completion")
    assert script.returncode == 0 and "_HACFG_COMPLETE=complete_bash" in script.stdout, script.stdout + script.stderr
    (tmp_path / "completion.bash").write_text(script.stdout)

    def complete(*words: str) -> list[str]:
        return bash(f'source {tmp_path}/completion.bash; COMP_WORDS=({" ".join(words)}); COMP_CWORD={len(words) - 1}; '
                    '_hacfg_completion hacfg; printf "%s\\n" "${COMPREPLY[@]}"').stdout.split()

    assert complete("hacfg", "li") == ["lint"]
    assert complete("hacfg", "lint", "--format", "''") == ["text", "json", "sarif", "github"]
    installed = bash("hacfg --install-completion")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "hacfg" in (tmp_path / ".bashrc").read_text()
