"""The ``hacfg`` process: which way a command runs, its exit code, and a quick exit.

A plain ``hacfg lint PATH...`` or ``hacfg fix PATH...`` (with the switches and options pre-commit
and editors pass), ``hacfg build FILE`` or ``hacfg plan FILE`` (with what-if values), what editors,
hooks and scripts run most, calls :mod:`hacfg.cli.commands` directly; anything else goes through typer
(:mod:`hacfg.cli.app`), which takes about 80 ms to import with the pydantic it reads options through.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, get_args

from hacfg.cli.commands import (
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PIPE_CLOSED,
    Format,
    run_build,
    run_fix,
    run_lint,
    run_plan,
    say,
)
from hacfg.cli.complete import COMPLETE_VAR, answer
from hacfg.scenario.names import Platform

# The switches a plain lint takes, each setting one keyword of run_lint to one value; test_main
# checks every one against typer's declaration of the same flag.
LINT_SWITCHES = {
    "--force-exclude": ("force_exclude", True),
    "--exit-zero": ("exit_zero", True),
    "--respect-gitignore": ("respect_gitignore", True),
    "--no-respect-gitignore": ("respect_gitignore", False),
    "--quiet": ("quiet", True),
    "-q": ("quiet", True),
    "--statistics": ("statistics", True),
}
# The options a plain lint takes, each followed by its value, and the keyword of run_lint it sets
# (the rule lists may be repeated); test_main checks every one against typer's declaration.
LINT_OPTIONS = {
    "--format": "fmt",
    "-f": "fmt",
    "--output-format": "fmt",
    "--stdin-filename": "stdin_filename",
    "--config": "config",
    "--select": "select",
    "--extend-select": "extend_select",
    "--ignore": "ignore",
}
_RULE_LISTS = ("select", "extend_select", "ignore")
_CHOICES = {"fmt": get_args(Format), "platform": get_args(Platform)}  # what typer would accept, else typer says no

# The switches and options a plain fix takes (pre-commit's hook passes --force-exclude), as for lint.
FIX_SWITCHES = {
    "--force-exclude": ("force_exclude", True),
    "--diff": ("show_diff", True),
    "--force": ("force", True),
    "--respect-gitignore": ("respect_gitignore", True),
    "--no-respect-gitignore": ("respect_gitignore", False),
}
FIX_OPTIONS = {"--platform": "platform"}

# The options a plain plan takes, each followed by its value, and the keyword of run_plan it sets;
# test_main checks every one against typer's declaration of the same option.
PLAN_OPTIONS = {
    "--format": "fmt",
    "-f": "fmt",
    "--nodes": "nodes",
    "--node-mtbf": "node_mtbf",
    "--interval": "interval",
    "--save-time": "save_time",
    "--restart-time": "restart_time",
    "--duration": "duration",
}


def run() -> NoReturn:
    """The console script. Once the output is flushed it skips the interpreter's teardown,
    which only frees memory the system takes back anyway (about 15 ms of a cold lint). What a
    plugin registered with :mod:`atexit` still runs, as it would at a normal exit."""
    code = main()
    atexit._run_exitfuncs()  # none in a plain lint or build: free
    for stream in (sys.stdout, sys.stderr):
        # Closed by the command (the language server's exit), or left for a reader that went away
        # (| head), which main answered already.
        with contextlib.suppress(ValueError, OSError):
            stream.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    """Run one command and map every outcome onto the documented exit codes."""
    _claim_standard_streams()
    args = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in args or os.environ.get("HACFG_DEBUG", "") not in ("", "0")
    try:
        code = _command(args)()
        sys.stdout.flush()  # here, so that a closed pipe meets the handler below
        return code
    except SystemExit as done:  # how typer ends every command, usage errors with 2
        return done.code if isinstance(done.code, int) else (EXIT_OK if done.code is None else EXIT_INPUT)
    except BrokenPipeError:
        return EXIT_PIPE_CLOSED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as err:
        return _failed(err, debug)
    finally:
        plugins = sys.modules.get("hacfg.plugin.manager")
        for failure in plugins.drain() if plugins is not None else ():
            say(f"hacfg: {failure}")


def _command(args: list[str]) -> Callable[[], int]:
    """The plain call when the arguments are ``lint [SWITCH...] PATH...`` or ``build FILE``; what
    it does not pass keeps the default that typer would give it."""
    if COMPLETE_VAR in os.environ:
        if (completions := answer(os.environ)) is not None:
            return functools.partial(_print, completions)
    elif args:
        name, *rest = args
        if name == "lint" and (lint := _plain_paths(rest, LINT_SWITCHES, LINT_OPTIONS, run_lint)) is not None:
            return lint
        if name == "fix" and (fix := _plain_paths(rest, FIX_SWITCHES, FIX_OPTIONS, run_fix)) is not None:
            return fix
        if name == "build" and len(rest) == 1 and not rest[0].startswith("-"):
            return functools.partial(run_build, rest[0])
        if name == "plan" and (plain := _plain_plan(rest)) is not None:
            return plain
    from hacfg.cli.app import app

    return functools.partial(app, args=args, prog_name="hacfg")


def _plain_paths(
    args: list[str],
    switches: dict[str, tuple[str, bool]],
    options: dict[str, str],
    command: Callable[..., int],
) -> Callable[[], int] | None:
    """``[SWITCH | OPTION VALUE | PATH | -]...`` with values typer would take as they are, else None."""
    operands, chosen = [], dict[str, Any]()
    items = iter(args)
    for arg in items:
        if arg in switches:
            keyword, setting = switches[arg]
            chosen[keyword] = setting
        elif arg in options:
            value, keyword = next(items, None), options[arg]
            if value is None or value.startswith("-"):
                return None
            if keyword in _RULE_LISTS:
                chosen.setdefault(keyword, []).append(value)
            else:
                chosen[keyword] = Path(value) if keyword == "config" else value
        elif arg.startswith("-") and arg != "-":
            return None
        else:
            operands.append(Path(arg))
    if any(chosen[keyword] not in choices for keyword, choices in _CHOICES.items() if keyword in chosen):
        return None
    return functools.partial(command, operands, **chosen)


def _print(text: str) -> int:
    print(text)
    return EXIT_OK


def _plain_plan(args: list[str]) -> Callable[[], int] | None:
    """``plan FILE [OPTION VALUE]...`` with values typer would take as they are, else None."""
    operands, chosen = [], dict[str, Any]()
    pairs = iter(args)
    for arg in pairs:
        if not arg.startswith("-"):
            operands.append(arg)
            continue
        value = next(pairs, None)
        if arg not in PLAN_OPTIONS or value is None or value.startswith("-"):
            return None
        chosen[PLAN_OPTIONS[arg]] = value
    if len(operands) != 1 or chosen.get("fmt", "text") not in ("text", "json"):
        return None
    if "nodes" in chosen:
        digits = sys.get_int_max_str_digits()  # 0: no limit
        if not chosen["nodes"].isdigit() or 0 < digits < len(chosen["nodes"]):
            return None  # typer says why
        chosen["nodes"] = int(chosen["nodes"])
    return functools.partial(run_plan, operands[0], **chosen)


def _failed(err: Exception, debug: bool) -> int:
    """One line for an exception, and its exit code. Error classes are looked up among the loaded
    modules only: a module never imported raised nothing, and importing one here costs time."""
    loaded = ("hacfg.scenario.config", "hacfg.scenario.source", "hacfg.plugin.manager")
    config, source, plugins = map(sys.modules.get, loaded)
    if config is not None and isinstance(err, config.ConfigInvalid):
        for error in err.errors:
            say(str(error))
        return EXIT_INPUT
    if source is not None and isinstance(err, source.InputError):
        say(str(err) if err.file else f"hacfg: error: {err}")
        return EXIT_INPUT
    if debug:
        import traceback

        traceback.print_exc()
    if isinstance(err, OSError):  # a full disk, a read-only folder, a file gone: the system's words
        say(f"hacfg: error: {err.filename}: {err.strerror}" if err.filename else f"hacfg: error: {err.strerror or err}")
        return EXIT_INPUT
    if plugins is not None and isinstance(err, plugins.BuiltinPluginError):
        say(f"hacfg: error: {err}")
    else:
        say(f"hacfg: internal error: {type(err).__name__}: {err} (this is a bug; --debug shows the traceback)")
    return EXIT_INTERNAL


def _claim_standard_streams() -> None:
    """Open /dev/null on a closed fd 0, 1 or 2, so no file or pipe hacfg opens later takes its number
    (and reaches a supervised command as its stdin)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.set_inheritable(os.open(os.devnull, os.O_RDWR), True)  # the lowest free number: this one
