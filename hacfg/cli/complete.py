"""Shell completion, answered without importing typer: a TAB has to be quick to be any use.

The shells call ``hacfg`` with ``_HACFG_COMPLETE`` set, as typer's own scripts do
(``hacfg --install-completion``). The command line's grammar (commands, their options, which take
a value and what kind) is generated from typer's app into ``grammar.json`` by :mod:`hacfg.cli.grammar`,
and a test fails when it drifts (``python -m hacfg.cli.grammar`` writes it again); the values hacfg knows by
name come from where the commands read them: targets and presets from the plugins, rule IDs from
the linter's registry.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

COMPLETE_VAR = "_HACFG_COMPLETE"
SHELLS = ("complete_bash", "complete_zsh", "complete_fish")  # typer answers the others (PowerShell)
GRAMMAR = Path(__file__).with_name("grammar.json")

Item = tuple[str, str]  # a value and its help


def answer(environ: Mapping[str, str]) -> str | None:
    """What to print for the shell's request in ``environ``, or None when typer should answer."""
    shell = environ.get(COMPLETE_VAR, "")
    if shell not in SHELLS:
        return None
    import shlex  # here: every command imports this module for COMPLETE_VAR

    if shell == "complete_bash":
        words = shlex.split(environ.get("COMP_WORDS", ""))
        index = int(environ.get("COMP_CWORD", "0") or 0)
        args, incomplete = words[1:index], words[index] if index < len(words) else ""
    else:
        line = environ.get("_TYPER_COMPLETE_ARGS", "")
        args = shlex.split(line)[1:]
        incomplete = args.pop() if args and not line.endswith(" ") else ""
    items = list(complete(args, incomplete))
    if shell == "complete_bash":
        return "\n".join(value for value, _ in items)
    if shell == "complete_fish":
        return "\n".join(f"{value}\t{' '.join(about.split())}" if about else value for value, about in items)
    if not items:
        return "_files"
    quoted = "\n".join(f'"{_zsh(value)}":"{_zsh(about)}"' if about else f'"{_zsh(value)}"' for value, about in items)
    return f"_arguments '*: :(({quoted}))'"


def complete(args: list[str], incomplete: str) -> Iterator[Item]:
    """The completions of ``incomplete`` after the words ``args`` (without the program's name)."""
    import json

    tables = json.loads(GRAMMAR.read_text())
    commands = tables["commands"]
    options, command, words = tables["options"], None, iter(args)
    for word in words:
        if word == "--":
            return  # the supervised command's own words: the shell completes them
        if word in options:
            if options[word]["takes"]:
                next(words, None)
        elif command is None and word in commands:
            command = commands[word]
            options = command["options"]
    if args and args[-1] in options and options[args[-1]]["takes"]:
        yield from _matching(_values(options[args[-1]]["takes"]), incomplete)
    elif incomplete.startswith("-"):
        yield from _matching(((name, spec["help"]) for name, spec in options.items()), incomplete)
    elif command is None:
        yield from _matching(((name, spec["help"]) for name, spec in commands.items()), incomplete)
    elif command["argument"]:
        yield from _matching(_values(command["argument"], incomplete), incomplete)


def _matching(items: Iterator[Item] | list[Item], incomplete: str) -> Iterator[Item]:
    return (item for item in items if item[0].startswith(incomplete))


def _values(kind: str | list[str], incomplete: str = "") -> Iterator[Item]:
    if isinstance(kind, list):
        return ((choice, "") for choice in kind)
    return _KINDS.get(kind, _nothing)(incomplete)


def _targets(incomplete: str) -> Iterator[Item]:
    from hacfg.plugin import provided

    return ((name, target.description) for name, target in provided.targets().items())


def _presets(incomplete: str) -> Iterator[Item]:
    from hacfg.plugin import provided

    yield from ((name, "preset") for name in provided.presets())
    yield from _files(incomplete)


def _rules(incomplete: str) -> Iterator[Item]:
    from hacfg.lint import engine

    return ((rule_id, source.rule.name) for rule_id, source in engine.registry().items())


def _files(incomplete: str) -> Iterator[Item]:
    """Paths, as the shell's own file completion would offer them (it is not asked when hacfg answers)."""
    import glob

    for path in sorted(glob.glob(glob.escape(os.path.expanduser(incomplete)) + "*")):
        yield (path + "/" if os.path.isdir(path) else path), ""


def _nothing(incomplete: str) -> Iterator[Item]:
    return iter(())


_KINDS: dict[str, Callable[[str], Iterator[Item]]] = {
    "targets": _targets,
    "presets": _presets,
    "rules": _rules,
    "files": _files,
}


def _zsh(text: str) -> str:
    for plain, escaped in (('"', '""'), ("'", "''"), ("$", "\\$"), ("`", "\\`"), (":", r"\\:")):
        text = text.replace(plain, escaped)
    return text
