"""The ``hacfg`` process: which way a command runs, its exit code, and a quick exit.

A plain ``hacfg lint PATH...`` or ``hacfg fix PATH...``, ``hacfg build FILE`` or ``hacfg plan FILE``,
what editors, hooks and scripts run most, calls :mod:`hacfg.cli.commands` directly; anything else goes
through typer (:mod:`hacfg.cli.app`), which takes about 80 ms to import with the pydantic it reads
options through. A plain call takes the options typer would take as they are: which those are, and
what each sets, the grammar generated from typer's declaration says (:mod:`hacfg.cli.grammar`).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from hacfg.cli.commands import (
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PIPE_CLOSED,
    run_build,
    run_fix,
    run_lint,
    run_plan,
    say,
)
from hacfg.cli.complete import COMPLETE_VAR, GRAMMAR, answer

# How a plain call takes an option's value, as grammar.json says typer declares it.
_CONVERT: dict[str, Callable[[str], Any]] = {"text": str, "choice": str, "path": Path, "integer": int}
# Commands that read their files, answer and exit. What they allocate is mostly the modules they
# import, which live until the exit: the cyclic collector's passes over them free nothing and cost
# about 2 ms of a cold lint, so these run without it.
_ONE_SHOT = frozenset({"lint", "fix", "build", "plan"})


def run() -> NoReturn:
    """The console script. Once the output is flushed it skips the interpreter's teardown,
    which only frees memory the system takes back anyway (about 15 ms of a cold lint). What a
    plugin registered with :mod:`atexit` still runs, as it would at a normal exit."""
    if sys.argv[1:2] and sys.argv[1] in _ONE_SHOT:
        gc.disable()
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
        if name in ("lint", "fix") and (paths := _plain_paths(rest, name)) is not None:
            return paths
        if name == "build" and len(rest) == 1 and not rest[0].startswith("-"):
            return functools.partial(run_build, rest[0])
        if name == "plan" and (plain := _plain_plan(rest)) is not None:
            return plain
    from hacfg.cli.app import app

    return functools.partial(app, args=args, prog_name="hacfg")


def _plain_paths(args: list[str], name: str) -> Callable[[], int] | None:
    """``lint`` or ``fix`` with ``[SWITCH | OPTION VALUE | PATH | -]...`` typer would take as they are, else None."""
    if (parsed := _parse(args, name)) is None:
        return None
    operands, chosen = parsed
    return functools.partial(run_lint if name == "lint" else run_fix, [Path(arg) for arg in operands], **chosen)


def _plain_plan(args: list[str]) -> Callable[[], int] | None:
    """``plan FILE [OPTION VALUE]...`` with values typer would take as they are, else None."""
    if (parsed := _parse(args, "plan")) is None or len(parsed[0]) != 1:
        return None
    (file,), chosen = parsed
    return functools.partial(run_plan, file, **chosen)


def _parse(args: list[str], name: str) -> tuple[list[str], dict[str, Any]] | None:
    """The operands of ``hacfg NAME ARGS``, and the keywords its options set as typer declares them;
    None for anything typer has to judge or refuse itself."""
    operands, chosen = [], dict[str, Any]()
    items = iter(args)
    for arg in items:
        if arg == "-" or not arg.startswith("-"):
            operands.append(arg)
            continue
        if (option := _declared_options(name).get(arg)) is None:
            return None
        if "sets" in option:
            chosen[option["keyword"]] = option["sets"]
            continue
        value, kind = next(items, None), option.get("value")
        if value is None or value.startswith("-") or kind is None:
            return None
        if (kind == "choice" and value not in option["takes"]) or (kind == "integer" and not _integer(value)):
            return None
        if option.get("many"):
            chosen.setdefault(option["keyword"], []).append(_CONVERT[kind](value))
        else:
            chosen[option["keyword"]] = _CONVERT[kind](value)
    return operands, chosen


def _integer(text: str) -> bool:
    """Digits that ``int`` reads as typer does: ASCII (``"²".isdigit()`` too), within Python's limit
    on digits (0: none). Typer says what is wrong with anything else."""
    limit = sys.get_int_max_str_digits()
    return text.isascii() and text.isdigit() and not 0 < limit < len(text)


@functools.cache
def _declared_options(name: str) -> dict[str, Any]:
    """The options of the command ``name`` in grammar.json. Only that command's part is parsed, a
    tenth of the file: its commands come last, one name a line at the second indent."""
    import json

    text = GRAMMAR.read_text(encoding="utf-8")
    start = text.index(f'\n  "{name}": ', text.index('\n "commands": '))
    command, _ = json.JSONDecoder().raw_decode(text, text.index("{", start))
    options: dict[str, Any] = command["options"]
    return options


def _print(text: str) -> int:
    print(text)
    return EXIT_OK


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
