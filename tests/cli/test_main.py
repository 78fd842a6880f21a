"""The process around every command, as a shell sees it: a plain `hacfg lint PATH...` or
`hacfg build FILE` runs without typer yet answers exactly as through typer, and the process ends
without interpreter teardown with every byte of its output delivered."""

from __future__ import annotations

import errno
import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer.main
from kit.cli import Result
from kit.paths import REPO

from hacfg.cli.app import app
from hacfg.cli.commands import run_build, run_fix, run_lint
from hacfg.cli.complete import GRAMMAR
from hacfg.cli.main import _declared_options, _parse

HACFG = Path(sys.executable).parent / "hacfg"  # the console script pip wrote
ENV = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}  # as a user's shell has it
EXAMPLE = REPO / "examples/llama-pretrain/ha.yaml"
FINDINGS = "version: 1\nscenario: single-node\nrestart: {maks: 1}\n"
# An option given at its default value, in a form the plain path leaves to typer: the same command,
# but parsed by typer.
THROUGH_TYPER = {"lint": ["--fail-on=error"], "build": ["--target", "modelarts"]}


def test_the_plain_call_gets_the_defaults_typer_gives():
    commands = typer.main.get_command(app).commands
    for name, function in (("lint", run_lint), ("build", run_build), ("fix", run_fix)):
        operand, *options = inspect.signature(function).parameters.values()
        assert {p.name: p.default for p in options} == {
            p.name: p.default for p in commands[name].params if p.name != operand.name
        }, f"hacfg {name}: the typer options and {function.__name__}'s defaults drifted apart"


@pytest.mark.parametrize("command", ["lint", "fix", "plan"])
def test_each_option_a_plain_call_takes_sets_what_typer_sets(command):
    """Each option grammar.json lets a plain call take, given alone, is parsed to typer's keyword and value;
    a value typer would refuse, and every other option, is left to typer."""
    declared = typer.main.get_command(app).commands[command]
    for flag, option in json.loads(GRAMMAR.read_text())["commands"][command]["options"].items():
        kind = option.get("value")
        value = option["takes"][-1] if kind == "choice" else {"integer": "3", "text": "x", "path": "p"}.get(kind)
        args = [flag] if "sets" in option else [flag, value or "x"]
        parsed = _parse([*args, "operand"], command)
        if "sets" not in option and kind is None:
            assert parsed is None, f"{flag} is taken without typer's checks"
            continue
        assert parsed is not None, flag
        typed = declared.make_context(command, [*args, "operand"]).params
        assert parsed[1] == {option["keyword"]: typed[option["keyword"]]}, flag
        if kind in ("choice", "integer"):
            assert _parse([flag, "nowhere", "operand"], command) is None, f"{flag} takes a value typer refuses"


def test_a_plain_call_reads_each_commands_part_of_the_grammar_as_a_whole_read_would():
    grammar = json.loads(GRAMMAR.read_text())
    for name, command in grammar["commands"].items():
        assert _declared_options(name) == command["options"], name


def hacfg(*args: str | Path, cwd: Path) -> tuple[Result, set[str]]:
    """Run the console script (with a request body on stdin); its output, and apart from it the modules
    the process imported."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", HACFG, *map(str, args)], capture_output=True, text=True, cwd=cwd, env=ENV,
        timeout=60, input='{"kind": "job", "metadata": {"name": "x", "annotations": {"fault-tolerance/job-retry-num": 3}}}',
    )
    timings = [line for line in proc.stderr.splitlines(keepends=True) if line.startswith("import time:")]
    err = "".join(line for line in proc.stderr.splitlines(keepends=True) if not line.startswith("import time:"))
    return Result(proc.returncode, proc.stdout, err), {line.rsplit("|", 1)[1].strip() for line in timings}


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["lint", "clean/ha.yaml"],
        ["lint", "findings/ha.yaml"],
        ["lint", "clean/ha.yaml", "findings/ha.yaml", "bad.yaml"],
        ["lint", "missing.yaml"],
        ["lint", "findings"],
        ["lint"],
        ["lint", "--force-exclude", "clean/ha.yaml", "findings/ha.yaml"],
        ["lint", "--exit-zero", "findings"],
        ["lint", "--no-respect-gitignore", "--respect-gitignore", "findings"],
        ["lint", "-q", "findings", "nothing-here"],
        ["lint", "--quiet", "--statistics", "findings", "clean"],
        ["lint", "--statistics", "-f", "json", "findings"],
        ["lint", "--output-format", "json", "findings"],
        ["lint", "--format", "sarif", "--statistics", "findings"],
        ["lint", "--select", "HA1", "--extend-select", "HA001,HA017", "--ignore", "HA102", "findings"],
        ["lint", "--select", "ha10", "--select", "HA001", "findings"],
        ["lint", "--select", "HA999", "findings"],
        ["lint", "--config", "other.toml", "findings"],
        ["lint", "--config", "missing.toml", "findings"],
        ["lint", "-", "findings"],
        ["lint", "--stdin-filename", "job.json", "-"],
        ["lint", "--fail-on", "warning", "--platform", "otc", "findings"],
        ["build", "clean/ha.yaml"],
        ["build", "findings/ha.yaml"],
        ["build", "bad.yaml"],
        ["build", "missing.yaml"],
        ["build", "single-node"],
    ],
    ids=" ".join,
)
def test_plain_lint_and_build_skip_typer_and_answer_byte_for_byte_as_typer_does(project, args):
    (project / "clean").mkdir()
    shutil.copy(EXAMPLE, project / "clean/ha.yaml")
    (project / "findings").mkdir()
    (project / "findings/ha.yaml").write_text(FINDINGS)
    (project / "bad.yaml").write_text("version: 1\nscenario: [\n")
    (project / "nothing-here").mkdir()
    (project / "other.toml").write_text('ignore = ["HA101"]\n')
    plain, plain_imports = hacfg(*args, cwd=project)
    typed, typed_imports = hacfg(args[0], *THROUGH_TYPER[args[0]], *args[1:], cwd=project)
    assert plain == typed
    assert "Traceback" not in plain.err
    assert "typer" in typed_imports
    assert not {"typer", "click", "hacfg.cli.app"} & plain_imports, "a plain lint or build imports the argument parser"


# The same arguments through typer: the process entry with its plain path taken away.
THROUGH_TYPER_ONLY = "import sys; from hacfg.cli import main; main._plain_paths = lambda *_: None; sys.exit(main.main())"


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["fix", "findings/ha.yaml"],
        ["fix", "--force-exclude", "clean/ha.yaml", "findings/ha.yaml", "notes.yaml"],
        ["fix", "--diff", "findings", "clean"],
        ["fix", "--platform", "otc", "--no-respect-gitignore", "--diff", "findings"],
        ["fix", "--platform", "nowhere", "findings"],
        ["fix", "--force", "findings"],
        ["fix", "missing.yaml"],
        ["fix", "bad.yaml"],
        ["fix"],
    ],
    ids=" ".join,
)
def test_a_plain_fix_skips_typer_and_does_what_typer_does(tmp_path, args):
    """What pre-commit's hacfg-fix hook runs: the same answer and the same files, without the argument parser."""
    outcomes = []
    for way in ("plain", "typer"):
        project = tmp_path / way
        (project / "clean").mkdir(parents=True)
        shutil.copy(EXAMPLE, project / "clean/ha.yaml")
        (project / "findings").mkdir()
        (project / "findings/ha.yaml").write_text(FINDINGS)
        (project / "bad.yaml").write_text("version: 1\nscenario: [\n")
        (project / "notes.yaml").write_text("title: not a training job\n")
        if way == "plain":
            result, imports = hacfg(*args, cwd=project)
            refused = "nowhere" in args  # a value typer refuses is left to typer, to say so in its words
            assert bool({"typer", "click", "hacfg.cli.app"} & imports) == refused, "a plain fix imports typer"
        else:
            proc = subprocess.run(
                [sys.executable, "-c", THROUGH_TYPER_ONLY, *args], capture_output=True, text=True, cwd=project,
                env=ENV, timeout=60,
            )
            result = Result(proc.returncode, proc.stdout, proc.stderr)
        files = {str(path.relative_to(project)): path.read_text() for path in sorted(project.rglob("*.yaml"))}
        outcomes.append((result, files))
    assert outcomes[0] == outcomes[1]
    assert "Traceback" not in outcomes[0][0].err


def test_shell_completion_goes_to_typer_whatever_the_arguments(tmp_path):
    proc = subprocess.run(
        [HACFG, "lint", "ha.yaml"], capture_output=True, text=True, cwd=tmp_path, timeout=60,
        env={**ENV, "_HACFG_COMPLETE": "source_bash"},
    )
    assert proc.returncode == 0 and "_hacfg_completion" in proc.stdout, proc.stderr


@pytest.mark.slow
def test_a_large_report_reaches_a_pipe_and_a_file_whole(tmp_path):
    for index in range(300):
        (tmp_path / f"job{index}").mkdir()
        (tmp_path / f"job{index}/ha.yaml").write_text(FINDINGS)
    count = "import json, sys; text = sys.stdin.read(); print(len(json.loads(text)['findings']), len(text) > 1 << 16)"
    piped = subprocess.run(
        f"'{HACFG}' lint --format json . | '{sys.executable}' -c \"{count}\"", shell=True, capture_output=True,
        text=True, cwd=tmp_path, env=ENV, timeout=120,
    )
    assert piped.stdout == "900 True\n", piped.stderr  # more than a pipe holds (HA101, and the risks HA001, HA017)
    redirected = subprocess.run(
        f"'{HACFG}' lint . > report.txt; '{HACFG}' build '{EXAMPLE}' > built.json", shell=True, cwd=tmp_path, env=ENV,
        timeout=120,
    )
    assert redirected.returncode == 0
    lines = (tmp_path / "report.txt").read_text().splitlines()
    assert len(lines) == 901 and lines[-1].startswith("Found 900 findings in 300 files")
    assert json.loads((tmp_path / "built.json").read_text())["kind"] == "job"  # less than a buffer holds


EXIT_PROBE = """
import atexit, pathlib
atexit.register(pathlib.Path("atexit-ran").touch)

class Finalized:
    def __del__(self):
        pathlib.Path("teardown-ran").touch()

kept = Finalized()  # finalized when the interpreter tears its modules down
"""


@pytest.mark.slow
def test_atexit_handlers_run_but_the_teardown_is_skipped(tmp_path):
    (tmp_path / "exit_probe.py").write_text(EXIT_PROBE)
    env = {**ENV, "PYTHONPATH": str(tmp_path)}
    subprocess.run([sys.executable, "-c", "import exit_probe"], cwd=tmp_path, env=env, timeout=60, check=True)
    assert {p.name for p in tmp_path.glob("*-ran")} == {"atexit-ran", "teardown-ran"}  # what a normal exit does
    for marker in tmp_path.glob("*-ran"):
        marker.unlink()
    proc = subprocess.run(
        [HACFG, "--plugin", "exit_probe", "build", EXAMPLE], cwd=tmp_path, env=env, capture_output=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in tmp_path.glob("*-ran")} == {"atexit-ran"}


@pytest.mark.slow
@pytest.mark.parametrize("options", [[], THROUGH_TYPER["build"]], ids=["plain", "typer"])
def test_a_reader_that_went_away_ends_it_quietly(options):
    read, write = os.pipe()
    os.close(read)
    proc = subprocess.run([HACFG, "build", *options, EXAMPLE], stdout=write, stderr=subprocess.PIPE, env=ENV, timeout=60)
    os.close(write)
    assert (proc.returncode, proc.stderr) == (1, b"")


def as_from_a_terminal() -> None:
    """Ctrl-C's default in the child: a shell's background job (pytest ... &) ignores SIGINT, and a child
    inherits that, so Python would never raise KeyboardInterrupt in it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.parametrize("options", [[], THROUGH_TYPER["build"]], ids=["plain", "typer"])
def test_ctrl_c_exits_130_without_a_traceback(tmp_path, options):
    fifo = tmp_path / "ha.yaml"
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        [HACFG, "build", *options, fifo], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV,
        preexec_fn=as_from_a_terminal,
    )
    writer = None
    deadline = time.monotonic() + 60
    while True:  # until hacfg waits in read(2) on the file: a signal just before that call would wait with it
        assert proc.poll() is None and time.monotonic() < deadline
        if writer is None:
            try:
                writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # succeeds once hacfg has opened it
            except OSError as err:
                assert err.errno == errno.ENXIO
        elif "pipe" in Path(f"/proc/{proc.pid}/wchan").read_text():
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    os.close(writer)
    assert (proc.returncode, out, err) == (130, b"", b"")
