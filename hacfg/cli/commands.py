"""The bodies of the ``hacfg`` commands, and the exit codes and output helpers every one shares.

Each body takes plain arguments and returns an exit code. Nothing here imports typer, and each
body imports what it needs when it runs: :mod:`hacfg.cli.main` calls :func:`run_lint`,
:func:`run_build` and :func:`run_plan` directly for a plain call, and :mod:`hacfg.cli.app` calls
every body with the options a user gave. The commands that supervise a job or read its agents'
records are in :mod:`hacfg.cli.agent_commands`, which a lint never loads. Exit codes: 0 ok,
1 findings, 2 bad input or usage, 3 internal error (and 138, a failed pre-check).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from hacfg.scenario.names import Platform, Scenario, Severity

if TYPE_CHECKING:
    from hacfg.lint.engine import Report

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_INPUT = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130
EXIT_PIPE_CLOSED = 1  # what typer answers a reader that went away (| head), quietly

Format = Literal["text", "json", "sarif", "github"]


def short_seconds(text: str, option: str) -> float:
    """A duration flag that may be under a second (``250ms``, ``0.4s``), as a memory save is."""
    import re

    if found := re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s)", text.strip()):
        return float(found[1]) / (1000 if found[2] == "ms" else 1)
    from hacfg.scenario.model import duration_flag

    return duration_flag(text, option)


def say(line: str) -> None:
    """One line on stderr, for the user rather than for a pipe: a name or a message read from a file
    can break neither the line nor the terminal (:func:`hacfg.untrusted.printable`)."""
    from hacfg.untrusted import printable

    print(printable(line), file=sys.stderr, flush=True)


def note(message: str) -> None:
    say(f"hacfg: note: {message}")


def write(text: str, output: Path | None, *, force: bool = False) -> None:
    """``text`` to stdout, or to ``output`` whole or not at all (see :func:`hacfg.fsutil.write_output`)."""
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    from hacfg.fsutil import write_output

    try:
        write_output(output, text, force=force)
    except OSError as err:
        from hacfg.scenario.source import InputError

        raise InputError(f"cannot write: {why_not_written(err)}", file=str(output)) from None


def picture(path: Path | None) -> Path | None:
    """A ``--plot`` path, refused before any work when its suffix names no format hacfg draws."""
    from hacfg.fsutil import FIGURE_FORMATS

    if path is not None and path.suffix.lstrip(".").lower() not in FIGURE_FORMATS:
        from hacfg.scenario.source import InputError

        raise InputError(f"--plot draws {' or '.join('.' + f for f in FIGURE_FORMATS)} files", file=str(path))
    return path


def why_not_written(err: OSError) -> str:
    from hacfg.fsutil import ReadOnlyFile

    reason = err.strerror or str(err)
    return f"{reason}; pass --force to overwrite it" if isinstance(err, ReadOnlyFile) else reason


def report_discovery(result: Report) -> Report:
    """Say which named files were skipped, and, as ruff does, warn (exit 0) when nothing was found."""
    for message in result.notes:
        note(message)
    if result.files == 0:
        say("hacfg: warning: no files found: no scenario files or ModelArts request bodies under the given paths")
    return result


def run_build(
    file: str,
    target: str = "modelarts",
    platform: Platform | None = None,
    only: str | None = None,
    into: Path | None = None,
    output: Path | None = None,
    force: bool = False,
) -> int:
    """``hacfg build``: compile a scenario file (or a preset) and print or write the result."""
    from hacfg.compile.compiler import build_file
    from hacfg.plugin import provided

    scenario = provided.preset_or_path(file)
    text, notes = build_file(
        scenario, target, provided.presets(), provided.targets(), platform=platform, only=only, into=into
    )
    for message in notes:
        note(message)
    write(text, output or into, force=force)
    return EXIT_OK


def run_lint(
    paths: Sequence[Path],
    fmt: Format | None = None,
    fail_on: Severity | None = None,
    exit_zero: bool = False,
    platform: Platform | None = None,
    output: Path | None = None,
    respect_gitignore: bool = True,
    force_exclude: bool = False,
    force: bool = False,
    baseline: Path | None = None,
    write_baseline: Path | None = None,
    stdin_filename: str | None = None,
    quiet: bool = False,
    statistics: bool = False,
    select: Sequence[str] | None = None,
    extend_select: Sequence[str] | None = None,
    ignore: Sequence[str] | None = None,
    config: Path | None = None,
) -> int:
    """``hacfg lint``: lint files and directories (none: the current directory; ``-``, or none with
    ``stdin_filename``: standard input, as that file) and report.

    With a baseline (``--baseline`` or the settings'), only findings not in it are reported;
    ``--write-baseline`` records today's findings instead of reporting them."""
    from hacfg.lint import engine as lint
    from hacfg.lint import formatters as report

    chosen_rules = {"select": select or (), "extend_select": extend_select or (), "ignore": ignore or ()}
    settings, rules = lint.configured(config, **chosen_rules)
    from_stdin = [str(path) for path in paths] == ["-"] or (not paths and stdin_filename is not None)
    if from_stdin:
        found = lint.lint_text(sys.stdin.read(), stdin_filename or "-", settings, platform=platform)
    elif any(str(path) == "-" for path in paths):
        from hacfg.scenario.source import InputError

        raise InputError("'-' (standard input) is linted on its own, not with other paths")
    else:
        found = lint.lint_paths(
            paths, settings, platform=platform, respect_gitignore=respect_gitignore, force_exclude=force_exclude
        )
    result = found if quiet else report_discovery(found)
    if write_baseline is not None:
        from hacfg.lint.baseline import write as record

        count = record(write_baseline, result.findings)
        files = f"{result.files} file{'s' * (result.files != 1)}"
        say(f"wrote {count} finding{'s' * (count != 1)} of {files} to {write_baseline}")
        return EXIT_OK
    if (baseline := baseline or settings.baseline) is not None:
        from hacfg.lint.baseline import Baseline

        result = Baseline.read(baseline).apply(result, rules)
    chosen = fmt or ("github" if os.environ.get("GITHUB_ACTIONS") == "true" else "text")
    if statistics:
        text = report.statistics(chosen, result, rules)
    else:
        excerpts = output is None and not from_stdin and sys.stdout.isatty()
        text = report.render(chosen, result, rules, excerpts=excerpts, colour=colour(output), quiet=quiet)
    write(text, output, force=force)
    return EXIT_FINDINGS if not exit_zero and result.fails(fail_on or settings.fail_on) else EXIT_OK


def colour(output: Path | None) -> bool:
    """Colour on a terminal only: never into a file, a pipe or a CI log. ``NO_COLOR`` turns it off and
    ``FORCE_COLOR`` on (no-color.org, force-color.org: any value but the empty string); ``NO_COLOR`` wins."""
    if output is not None or os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return sys.stdout.isatty() and os.environ.get("TERM") != "dumb" and not os.environ.get("CI")


def run_fix(
    paths: Sequence[Path],
    show_diff: bool = False,
    platform: Platform | None = None,
    respect_gitignore: bool = True,
    force_exclude: bool = False,
    force: bool = False,
) -> int:
    """``hacfg fix``: apply the safe fixes in place, or print them as a diff (exit 1 if there are any).

    Each file is written whole or not at all, and one that cannot be written (a full disk, a
    read-only folder or file) does not stop the others: every file is reported either way."""
    from hacfg.lint import engine as lint
    from hacfg.lint import fix

    settings, _ = lint.configured()
    found = lint.lint_paths(
        paths, settings, platform=platform, respect_gitignore=respect_gitignore, force_exclude=force_exclude
    )
    changed = fix.fixes(report_discovery(found))
    if show_diff:
        for file in changed:
            write(file.diff(), None)
        return EXIT_FINDINGS if changed else EXIT_OK
    unwritten = []
    for file in changed:
        try:
            file.write(force=force)
        except OSError as err:
            say(f"{file.path}: cannot write: {why_not_written(err)}; not fixed")
            unwritten.append(file.path)
        else:
            say(f"fixed {file.count} in {file.path}")
    if unwritten:
        say(f"hacfg: error: {len(unwritten)} of {len(changed)} files not fixed: {', '.join(unwritten)}")
        return EXIT_INPUT
    return EXIT_OK


def run_schema(output: Path | None = None, force: bool = False) -> int:
    """``hacfg schema``: the JSON Schema of the scenario file format."""
    import json

    from hacfg.scenario.validation import json_schema

    write(json.dumps(json_schema(), indent=2) + "\n", output, force=force)
    return EXIT_OK


def run_init(scenario: Scenario, output: Path, force: bool = False) -> int:
    """``hacfg init``: write a commented starting scenario file, never over one unless forced."""
    from hacfg.scenario.source import InputError
    from hacfg.scenario.starter import starter

    if output.exists() and not force:
        raise InputError("already exists; pass --force to overwrite it", file=str(output))
    write(starter(scenario), output, force=force)
    say(f"wrote {output}")
    return EXIT_OK


def run_import(body: Path, output: Path | None = None, platform: Platform = "huaweicloud", force: bool = False) -> int:
    """``hacfg import``: a scenario file from a request body, with a note for what it cannot express."""
    from hacfg.scenario.importer import import_body
    from hacfg.scenario.source import load

    text, notes = import_body(load(body), platform=platform)
    for message in notes:
        note(message)
    write(text, output, force=force)
    return EXIT_OK


def run_plugins() -> int:
    """``hacfg plugins``: the loaded plugins and what each provides."""
    from hacfg.plugin import manager as plugin_manager

    write(plugin_manager.get().listing(), None)
    return EXIT_OK


def run_rules(fmt: Literal["text", "json", "markdown"] = "text") -> int:
    """``hacfg rules``: every lint rule, built-in and from plugins."""
    from hacfg.lint import engine as lint
    from hacfg.lint import formatters as report

    write(report.rules_listing(fmt, lint.registry()), None)
    return EXIT_OK


def run_explain(rule_id: str) -> int:
    """``hacfg explain``: one rule's documentation."""
    from hacfg.lint import engine as lint
    from hacfg.lint import formatters as report

    write(report.explanation(rule_id, lint.registry()), None)
    return EXIT_OK


def run_server() -> int:
    """``hacfg server``: the language server on stdin and stdout; a missing extra is bad input."""
    try:
        from hacfg.lint.server import serve
    except ModuleNotFoundError as err:
        if (err.name or "").partition(".")[0] not in ("pygls", "lsprotocol"):
            raise
        from hacfg.scenario.source import InputError

        raise InputError(f"hacfg server needs {err.name}: pip install 'hacfg[server]'") from None
    serve()
    return EXIT_OK


def run_plan(
    file: str,
    from_events: Sequence[Path] = (),
    fmt: Literal["text", "json"] = "text",
    plot: Path | None = None,
    *,
    nodes: int | None = None,
    node_mtbf: str | None = None,
    interval: str | None = None,
    save_time: str | None = None,
    restart_time: str | None = None,
    duration: str | None = None,
    memory_save_time: str | None = None,
) -> int:
    """``hacfg plan``: what the file's configuration will cost, and what to change. The what-if
    values override the file for this run; durations are spelled as the file spells them."""
    import json

    from hacfg.plan import inputs as planned
    from hacfg.plan import report
    from hacfg.plan.forecast import NotEnough, forecast
    from hacfg.plugin import provided
    from hacfg.scenario.config import load_config
    from hacfg.scenario.model import duration_flag
    from hacfg.scenario.source import InputError

    plot = picture(plot)  # before any work
    flags: dict[str, float | None] = {"nodes": nodes}
    durations = {
        "node_mtbf": node_mtbf,
        "interval": interval,
        "save_time": save_time,
        "restart_time": restart_time,
        "duration": duration,
    }
    for name, spelling in durations.items():
        flags[name] = None if spelling is None else duration_flag(spelling, f"--{name.replace('_', '-')}")
        if flags[name] == 0 and name != "save_time":
            raise InputError(f"--{name.replace('_', '-')}: must be longer than 0s")
    if nodes is not None and nodes < 1:
        raise InputError("--nodes: a job has at least 1 node")
    memory = None if memory_save_time is None else short_seconds(memory_save_time, "--memory-save-time")
    if memory == 0:
        raise InputError("--memory-save-time: must be longer than 0s")
    loaded = load_config(provided.preset_or_path(file), provided.presets())
    inputs = planned.from_config(loaded.config, loaded.document.values)
    if from_events:
        from hacfg.agent.records.calibration import measure
        from hacfg.agent.records.timeline import read_logs

        inputs = planned.with_measured(inputs, measure(read_logs(from_events)))
    inputs = planned.with_what_if(inputs, flags)
    try:
        result = forecast(inputs, memory)
    except NotEnough as err:
        # at the value at fault: its flag, or its place in the file
        origin = getattr(inputs, err.name).origin if err.name else ""
        if origin.startswith("what-if: "):
            raise InputError(f"{origin.removeprefix('what-if: ')}: {err}") from None
        if err.name and origin == "stated":
            key = planned.KEYS[err.name]
            raise InputError(f"{key}: {err}", loaded.document.span(tuple(key.split(".")))) from None
        raise InputError(str(err), file=file) from None
    if fmt == "json":
        write(json.dumps(report.to_json(result, file), indent=2) + "\n", None)
    else:
        write(report.text(result, file), None)
    if plot is not None:
        report.plot(result, str(plot))
        say(f"wrote {plot}")
    return EXIT_OK
