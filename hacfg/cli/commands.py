"""The exit codes and output helpers every command shares, and the bodies of ``hacfg lint`` and
``hacfg build``.

Nothing here imports typer: :mod:`hacfg.cli.main` calls these functions directly for a plain
``hacfg lint PATH...`` or ``hacfg build FILE``, and :mod:`hacfg.cli.app` calls the same functions with
the options a user gave. Exit codes: 0 ok, 1 findings, 2 bad input or usage, 3 internal error.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from hacfg.scenario.names import Platform, Severity

if TYPE_CHECKING:
    from hacfg.lint.engine import Report

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_INPUT = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130
EXIT_PIPE_CLOSED = 1  # what typer answers a reader that went away (| head), quietly

Format = Literal["text", "json", "sarif", "github"]


def say(line: str) -> None:
    """One line on stderr, for the user rather than for a pipe."""
    print(line, file=sys.stderr, flush=True)


def note(message: str) -> None:
    say(f"hacfg: note: {message}")


def write(text: str, output: Path | None) -> None:
    """``text`` to stdout, or atomically to ``output``."""
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    from hacfg.fsutil import atomic_write

    try:
        atomic_write(output, text)
    except OSError as err:
        from hacfg.scenario.source import InputError

        raise InputError(f"cannot write: {err.strerror or err}", file=str(output)) from None


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
) -> int:
    """``hacfg build``: compile a scenario file (or a preset) and print or write the result."""
    from hacfg.build.compiler import build_file
    from hacfg.plugin import provided as registry

    scenario = registry.preset_or_path(file)
    text, notes = build_file(
        scenario, target, registry.presets(), registry.targets(), platform=platform, only=only, into=into
    )
    for message in notes:
        note(message)
    write(text, output or into)
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
) -> int:
    """``hacfg lint``: lint files and directories (none: the current directory) and report."""
    from hacfg.lint import engine as lint
    from hacfg.lint import formatters as report

    settings, rules = lint.configured()
    found = lint.lint_paths(
        paths, settings, platform=platform, respect_gitignore=respect_gitignore, force_exclude=force_exclude
    )
    result = report_discovery(found)
    chosen = fmt or ("github" if os.environ.get("GITHUB_ACTIONS") == "true" else "text")
    write(report.render(chosen, result, rules, excerpts=output is None and sys.stdout.isatty()), output)
    return EXIT_FINDINGS if not exit_zero and result.fails(fail_on or settings.fail_on) else EXIT_OK
