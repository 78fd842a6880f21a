"""The command line's grammar, from typer's app, read where typer would cost too much to import: by
:mod:`hacfg.cli.complete` to answer TABs, and by :mod:`hacfg.cli.main` to run a plain lint, fix or plan.

``python -m hacfg.cli.grammar`` writes ``grammar.json``; a test fails when it no longer matches the app.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hacfg.cli.complete import GRAMMAR

# What an option's or argument's value is, beyond click's own choices: hacfg's names by kind.
_OPTION_KINDS = {"--target": "targets", "--select": "rules", "--extend-select": "rules", "--ignore": "rules"}
_ARGUMENT_KINDS = {("build", "file"): "presets", ("plan", "file"): "presets", ("explain", "rule_id"): "rules"}


def grammar() -> dict[str, Any]:
    """The command line as typer declares it: every command, its options and what each takes."""
    import typer.main
    from typer.core import TyperArgument, TyperGroup, TyperOption

    from hacfg.cli.app import app

    def first_line(text: str | None) -> str:
        return (text or "").strip().splitlines()[0] if text else ""

    def options(command: Any) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for param in command.params:
            if not isinstance(param, TyperOption) or param.hidden:
                continue
            if param.is_flag or param.count:
                for names, sets in ((param.opts, True), (param.secondary_opts, False)):
                    for name in names:
                        found[name] = {"takes": None, "help": first_line(param.help), "keyword": param.name}
                        if param.is_flag:
                            found[name]["sets"] = sets
                continue
            name = next(iter(param.opts))
            choices = _literal(param.type_descriptor.annotation)
            takes = _OPTION_KINDS.get(name) or ([str(choice) for choice in choices] if choices else "files")
            value = "choice" if isinstance(takes, list) else _plain_value(param)
            for name in param.opts:
                found[name] = {"takes": takes, "help": first_line(param.help), "keyword": param.name, "value": value}
                if param.multiple:
                    found[name]["many"] = True
        return dict(sorted(found.items()))

    root = typer.main.get_command(app)
    assert isinstance(root, TyperGroup)
    commands = {}
    for name, command in sorted(root.commands.items()):
        arguments = [p for p in command.params if isinstance(p, TyperArgument)]
        argument = None
        if arguments:
            argument = _ARGUMENT_KINDS.get((name, arguments[0].name or ""), "files")
        commands[name] = {"help": first_line(command.help), "options": options(command), "argument": argument}
    return {"options": options(root), "commands": commands}


def _plain_value(param: Any) -> str | None:
    """How a value is taken as it is: "text", "path" or "integer"; None when typer checks it (a
    readable path, a range, a callback) or converts it some other way, which only typer can do."""
    info, annotation = param.type_descriptor.parameter_info, param.type_descriptor.annotation
    if param.callback is not None or info.parser is not None:
        return None
    if annotation in (str, list[str]):
        return "text"
    if annotation in (int, list[int]) and param.min is None and param.max is None:
        return "integer"
    unchecked = not (info.exists or info.readable or info.writable or info.resolve_path or info.allow_dash)
    if annotation in (Path, list[Path]) and unchecked and info.file_okay and info.dir_okay:
        return "path"
    return None


def _literal(annotation: Any) -> tuple[Any, ...] | None:
    """The values of a ``Literal`` annotation (``Optional`` or not), else None."""
    import typing

    for each in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(each) is typing.Literal:
            return typing.get_args(each)
    return None


def source() -> str:
    import json

    # one key a line: hacfg.cli.main finds a command's part by the indent of its name
    return json.dumps(grammar(), indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    from hacfg.fsutil import write_output

    write_output(GRAMMAR, source())
    print(f"wrote {GRAMMAR}")
