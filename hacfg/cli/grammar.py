"""The command line's grammar, from typer's app, for :mod:`hacfg.cli.complete` to answer TABs without it.

``python -m hacfg.cli.grammar`` writes ``grammar.json``; a test fails when it no longer matches the app.
"""

from __future__ import annotations

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
            takes: Any = None
            if not param.is_flag and not param.count:
                name = next(iter(param.opts))
                choices = _literal(param.type_descriptor.annotation)
                takes = _OPTION_KINDS.get(name) or ([str(choice) for choice in choices] if choices else "files")
            for name in (*param.opts, *param.secondary_opts):
                found[name] = {"takes": takes, "help": first_line(param.help)}
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


def _literal(annotation: Any) -> tuple[Any, ...] | None:
    """The values of a ``Literal`` annotation (``Optional`` or not), else None."""
    import typing

    for each in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(each) is typing.Literal:
            return typing.get_args(each)
    return None


def source() -> str:
    import json

    return json.dumps(grammar(), indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    from hacfg.fsutil import write_output

    write_output(GRAMMAR, source())
    print(f"wrote {GRAMMAR}")
