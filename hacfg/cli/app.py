"""The ``hacfg`` command line in typer: options, help and completion over the library.

Each command only declares its options and calls its body in :mod:`hacfg.cli.commands` (or, for
the agent's side, :mod:`hacfg.cli.agent_commands`), which imports what it needs when it runs, so
``hacfg --help`` starts fast. A plain ``hacfg lint PATH...``, ``hacfg build FILE`` or
``hacfg plan FILE`` does not come here at all (see :mod:`hacfg.cli.main`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Optional, TypeVar

import typer
from typer.core import TyperArgument, TyperCommand

from hacfg.cli import agent_commands, commands
from hacfg.cli.commands import Format
from hacfg.scenario.names import Platform, Scenario, Severity

_F = TypeVar("_F", bound=Callable[..., Any])
FORCE_HELP = "Overwrite the output even if it is a read-only file."


class _Command(TyperCommand):
    """Help that names arguments by what they hold (FILE, PATH...), not by Python type (``<list[Path]>``)."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:  # click's Context
        arguments = [_argument_name(p, usage=True) for p in self.get_params(ctx) if isinstance(p, TyperArgument)]
        return [self.options_metavar or "", *arguments]

    def format_options(self, ctx: Any, formatter: Any) -> None:  # click's Context and HelpFormatter
        params = [(p, p.get_help_record(ctx)) for p in self.get_params(ctx)]
        arguments = [(_argument_name(p), r[1]) for p, r in params if r and isinstance(p, TyperArgument)]
        options = [record for p, record in params if record and not isinstance(p, TyperArgument)]
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


def _argument_name(param: Any, *, usage: bool = False) -> str:
    name = param.metavar or (param.name or "").upper()
    name += "..." if param.nargs != 1 and not name.endswith("...") else ""
    return f"[{name}]" if usage and not param.required else name


class _App(typer.Typer):
    def command(self, *args: Any, cls: Any = None, **kwargs: Any) -> Callable[[_F], _F]:
        decorator: Callable[[_F], _F] = super().command(*args, cls=cls or _Command, **kwargs)
        return decorator

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run a command line. typer builds its click command from the declarations on every call
        (about 35 ms); a process that runs many, as a test suite does, builds it once."""
        return _click_command(self)(*args, **kwargs)


@functools.cache
def _click_command(app: typer.Typer) -> Any:
    return typer.main.get_command(app)


app = _App(
    name="hacfg",
    help="Fault tolerance for ML training jobs: build, lint and supervise from one ha.yaml.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from hacfg import __version__

        typer.echo(f"hacfg {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show the traceback of an internal error."),
    plugin: list[str] = typer.Option(
        [], "--plugin", "-p", metavar="MODULE", help="Also load this importable module as a plugin (repeatable)."
    ),
) -> None:
    """Fault tolerance for ML training jobs: build, lint and supervise from one ha.yaml."""
    if plugin:
        from hacfg.plugin import manager as plugin_manager

        for module_name in plugin:
            plugin_manager.request(module_name)


@app.command()
def build(
    file: str = typer.Argument(..., help="A scenario file, or the name of a preset."),
    target: str = typer.Option(
        "modelarts", "--target", "-t", metavar="NAME", help="Compile target (see `hacfg plugins`)."
    ),
    platform: Optional[Platform] = typer.Option(
        None, "--platform", help="Override the file's platform (limits differ)."
    ),
    only: Optional[str] = typer.Option(
        None, "--only", metavar="PART", help="Print one part of the output, e.g. 'annotations'."
    ),
    into: Optional[Path] = typer.Option(
        None, "--into", readable=False, help="Merge into this existing request body (in place unless -o)."
    ),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write here instead of stdout (atomically)."),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
) -> None:
    """Compile a scenario file into a validated job request."""
    raise typer.Exit(
        commands.run_build(file, target=target, platform=platform, only=only, into=into, output=output, force=force)
    )


@app.command()
def schema(
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write here instead of stdout."),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
) -> None:
    """Print the JSON Schema of the scenario file format (for editors and CI)."""
    raise typer.Exit(commands.run_schema(output, force=force))


@app.command()
def init(
    scenario: Scenario = typer.Option("multi-node", "--scenario", "-s"),
    output: Path = typer.Option(Path("ha.yaml"), "--output", "-o", help="Where to write the file."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing file, even a read-only one."),
) -> None:
    """Write a commented starting scenario file."""
    raise typer.Exit(commands.run_init(scenario, output, force=force))


@app.command("import")
def import_command(
    body: Path = typer.Argument(
        ..., readable=False, help="A ModelArts create-training-job request body (JSON or YAML)."
    ),
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", help="Write the scenario file here instead of stdout."
    ),
    platform: Platform = typer.Option("huaweicloud", "--platform", help="Platform whose limits apply."),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
) -> None:
    """Turn an existing request body into a scenario file, keeping what it cannot express."""
    raise typer.Exit(commands.run_import(body, output, platform=platform, force=force))


@app.command("plugins")
def plugins_command() -> None:
    """List the loaded plugins: name, distribution and version, and what each provides."""
    raise typer.Exit(commands.run_plugins())


@app.command("lint")
def lint_command(
    paths: list[Path] = typer.Argument(
        None, readable=False, metavar="PATH", help="Files and directories (default: the current directory)."
    ),
    fmt: Optional[Format] = typer.Option(
        None,
        "--format",
        "-f",
        "--output-format",
        help="text (default; github under GitHub Actions), json, sarif, github.",
    ),
    fail_on: Optional[Severity] = typer.Option(
        None, "--fail-on", help="Exit 1 on findings at or above this severity (default: error)."
    ),
    exit_zero: bool = typer.Option(False, "--exit-zero", help="Exit 0 even with findings."),
    platform: Optional[Platform] = typer.Option(None, "--platform", help="Platform limits to check against."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the report here instead of stdout."),
    respect_gitignore: bool = typer.Option(
        True, "--respect-gitignore/--no-respect-gitignore", help="Skip files that .gitignore ignores."
    ),
    force_exclude: bool = typer.Option(
        False, "--force-exclude", help="Choose named files as in a directory walk (for pre-commit)."
    ),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    baseline: Optional[Path] = typer.Option(
        None, "--baseline", metavar="FILE", help="Report only findings not in this baseline (default: the settings')."
    ),
    write_baseline: Optional[Path] = typer.Option(
        None, "--write-baseline", metavar="FILE", help="Record today's findings as the baseline, and report none."
    ),
    stdin_filename: Optional[str] = typer.Option(
        None, "--stdin-filename", metavar="NAME", help="Lint standard input (PATH '-') as the file NAME."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print the findings only: no summary, no notes."),
    statistics: bool = typer.Option(False, "--statistics", help="Count the findings of each rule instead."),
    select: Optional[list[str]] = typer.Option(
        None, "--select", metavar="IDS", help="Run these rules (IDs or prefixes, comma-separated) instead."
    ),
    extend_select: Optional[list[str]] = typer.Option(
        None, "--extend-select", metavar="IDS", help="Run these rules too."
    ),
    ignore: Optional[list[str]] = typer.Option(None, "--ignore", metavar="IDS", help="Do not run these rules."),
    config: Optional[Path] = typer.Option(
        None, "--config", metavar="FILE", readable=False, help="Read the settings from this file only."
    ),
) -> None:
    """Check scenario files and ModelArts request bodies for risky fault-tolerance settings."""
    code = commands.run_lint(
        paths or [],
        fmt=fmt,
        fail_on=fail_on,
        exit_zero=exit_zero,
        platform=platform,
        output=output,
        respect_gitignore=respect_gitignore,
        force_exclude=force_exclude,
        force=force,
        baseline=baseline,
        write_baseline=write_baseline,
        stdin_filename=stdin_filename,
        quiet=quiet,
        statistics=statistics,
        select=select,
        extend_select=extend_select,
        ignore=ignore,
        config=config,
    )
    raise typer.Exit(code)


@app.command("fix")
def fix_command(
    paths: list[Path] = typer.Argument(
        None, readable=False, metavar="PATH", help="Files and directories (default: the current directory)."
    ),
    show_diff: bool = typer.Option(
        False, "--diff", help="Print the changes as a unified diff instead of writing them."
    ),
    platform: Optional[Platform] = typer.Option(None, "--platform"),
    respect_gitignore: bool = typer.Option(
        True, "--respect-gitignore/--no-respect-gitignore", help="Skip files that .gitignore ignores."
    ),
    force_exclude: bool = typer.Option(
        False, "--force-exclude", help="Choose named files as in a directory walk (for pre-commit)."
    ),
    force: bool = typer.Option(False, "--force", help="Also fix read-only files."),
) -> None:
    """Apply the safe automatic fixes in place, keeping everything else byte for byte."""
    code = commands.run_fix(
        paths or [],
        show_diff=show_diff,
        platform=platform,
        respect_gitignore=respect_gitignore,
        force_exclude=force_exclude,
        force=force,
    )
    raise typer.Exit(code)


@app.command("rules")
def rules_command(
    fmt: Literal["text", "json", "markdown"] = typer.Option(
        "text", "--format", "-f", help="markdown: the docs/rules.md page."
    ),
) -> None:
    """List every lint rule, built-in and from plugins, with where it comes from."""
    raise typer.Exit(commands.run_rules(fmt))


@app.command("explain")
def explain_command(rule_id: str = typer.Argument(..., metavar="ID", help="A rule ID, such as HA007.")) -> None:
    """Print a rule's documentation: what it does, why it matters, an example, the fix."""
    raise typer.Exit(commands.run_explain(rule_id))


@app.command("server")
def server_command() -> None:
    """Run the language server on stdin and stdout, for editors (needs: pip install 'hacfg[server]')."""
    raise typer.Exit(commands.run_server())


def _with_settings(body: _F) -> _F:
    """``body``'s options followed by one per agent setting, made from :data:`hacfg.agent.settings.SETTINGS`
    (typer reads a command's options from its signature); the settings reach ``body`` as ``given``."""
    import inspect

    from hacfg.agent import settings

    own = [p for p in inspect.signature(body).parameters.values() if p.name != "given"]
    made = [
        inspect.Parameter(
            setting.field,
            inspect.Parameter.KEYWORD_ONLY,
            default=typer.Option(
                None, *setting.flag.split(" "), min=setting.minimum, max=setting.maximum, metavar=setting.metavar,
                help=setting.help,
            ),
            annotation=settings.annotation(setting),
        )
        for setting in settings.SETTINGS
    ]

    @functools.wraps(body)
    def command(**values: Any) -> Any:
        return body(**{p.name: values.pop(p.name) for p in own}, given=values)

    command.__signature__ = inspect.Signature([*own, *made])  # type: ignore[attr-defined]
    return command  # type: ignore[return-value]


@app.command("agent", context_settings={"allow_interspersed_args": False})
@_with_settings
def agent_command(
    command: list[str] = typer.Argument(..., help="The command to supervise, after --: hacfg agent -- python train.py"),
    config: Optional[Path] = typer.Option(
        None, "--config", "-c", readable=False, help="The scenario file (restart budgets, hang timeout, checkpoints)."
    ),
    *,
    given: dict[str, Any],
) -> None:
    """Run a training command under supervision: pre-checks, restarts, hang detection, resume, events.

    With several nodes, the agents form one group through torch's c10d store (hosted by node 0's
    agent): a failure anywhere restarts every node from the same checkpoint, with one budget."""
    raise typer.Exit(agent_commands.run_agent(command, config, given))


@app.command("precheck")
def precheck_command(
    config: Optional[Path] = typer.Option(
        None,
        "--config",
        "-c",
        readable=False,
        help="The scenario file (accelerator and network decide which checks apply).",
    ),
) -> None:
    """Run the environment pre-checks alone; exit 138 when one fails, as the agent would."""
    raise typer.Exit(agent_commands.run_precheck(config))


@app.command("events")
def events_command(
    files: Optional[list[Path]] = typer.Argument(
        None,
        readable=False,
        metavar="EVENTS.jsonl...",
        help="Event logs, one per node (default: CHECKPOINT/.hacfg/node-*/events.jsonl, else .hacfg/node-*/...).",
    ),
    config: Optional[Path] = typer.Option(
        None, "--config", "-c", readable=False, help="The scenario file whose checkpoint.path holds the logs."
    ),
    fmt: Literal["table", "json"] = typer.Option(
        "table", "--format", "-f", help="json: the time breakdown and the events, for scripts."
    ),
    plot: Optional[Path] = typer.Option(
        None, "--plot", help="Also draw the job on one time axis, one lane per node (.svg or .png)."
    ),
) -> None:
    """Show the agent's recovery events and where the time went: start-up, productive, lost work,
    hang detection, grace, restarts, and the ETTR; several nodes' logs make one job."""
    raise typer.Exit(agent_commands.run_events(files or [], config=config, fmt=fmt, plot=plot))


@app.command("plan")
def plan_command(
    file: str = typer.Argument(..., metavar="FILE", help="A scenario file, or a preset name."),
    from_events: Optional[list[Path]] = typer.Option(
        None, "--from-events", metavar="EVENTS.jsonl", help="The agent's event logs (repeat for each): measured inputs."
    ),
    fmt: Literal["text", "json"] = typer.Option("text", "--format", "-f"),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Also draw ETTR against the interval (.svg or .png)."),
    nodes: Optional[int] = typer.Option(None, "--nodes", help="What if the job had this many nodes."),
    node_mtbf: Optional[str] = typer.Option(
        None, "--node-mtbf", metavar="DURATION", help="What if one node failed this often."
    ),
    interval: Optional[str] = typer.Option(None, "--interval", metavar="DURATION", help="What if it saved this often."),
    save_time: Optional[str] = typer.Option(
        None, "--save-time", metavar="DURATION", help="What if a save took this long."
    ),
    restart_time: Optional[str] = typer.Option(
        None, "--restart-time", metavar="DURATION", help="What if a restart took this long."
    ),
    duration: Optional[str] = typer.Option(
        None, "--duration", metavar="DURATION", help="What if the run needed this much compute."
    ),
    memory_save_time: Optional[str] = typer.Option(
        None, "--memory-save-time", metavar="DURATION",
        help="A memory checkpoint's save time (save_memory): price the memory and disk tiers side by side.",
    ),
) -> None:
    """Forecast what the configuration will cost: failures, the optimum checkpoint interval,
    wall time, ETTR and the chance the restart budget runs out, with the lines to change."""
    raise typer.Exit(
        commands.run_plan(
            file, from_events or [], fmt=fmt, plot=plot, nodes=nodes, node_mtbf=node_mtbf, interval=interval,
            save_time=save_time, restart_time=restart_time, duration=duration, memory_save_time=memory_save_time,
        )
    )


@app.command("diagnose")
def diagnose_command(
    logs: list[Path] = typer.Argument(
        ...,
        readable=False,
        metavar="LOG",
        help="Training logs (a job's downloaded log, torchrun output); - is stdin. A folder (a node's state"
        " folder, a job's .hacfg): the evidence its agents gathered of each hang, and the culprit it names.",
    ),
    config: Optional[str] = typer.Option(
        None, "--config", "-c", help="Scenario file or preset whose restart rules apply (default: no restarts)."
    ),
    fmt: Literal["text", "json"] = typer.Option("text", "--format", "-f"),
) -> None:
    """Say why a job failed from its log: the cause, the evidence lines, and what the restart rules would do."""
    raise typer.Exit(agent_commands.run_diagnose(logs, config, fmt=fmt))
