"""The timeouts agree: on a hang, whichever timeout fires first decides what the round costs.

Four judges watch a stuck job: the agent (``hang.timeout``, ``hang.phases``), the platform
(``MA_HANG_DETECT_TIME``), the collective library's watchdog (NCCL's through ``TORCH_NCCL_*``, HCCL's
``HCCL_EXEC_TIMEOUT``) and, in effect, the save itself (``checkpoint.save_time``). Only the agent names
the culprit and counts a hang as a hang; the rules here say when another one speaks first.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any

from hacfg.plugin import (
    Fix,
    JobContext,
    LogicalPath,
    Problem,
    Rule,
    ScenarioContext,
    format_duration,
    hookimpl,
    parse_duration,
    rule,
)
from hacfg.plugin import modelarts as ma

# torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp, kProcessGroupNCCLDefaultTimeout; the same value as
# torch.distributed.constants.default_pg_nccl_timeout.
NCCL_TIMEOUT = timedelta(minutes=10)
# CANN's environment reference (envref_07_0078): HCCL_EXEC_TIMEOUT, default 1836 s on Atlas training products.
HCCL_EXEC_DEFAULT = timedelta(seconds=1836)

HEARTBEAT = "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"
MONITORING = "TORCH_NCCL_ENABLE_MONITORING"
ASYNC_ERROR_HANDLING = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
BLOCKING_WAIT = "TORCH_NCCL_BLOCKING_WAIT"
HCCL_EXEC = "HCCL_EXEC_TIMEOUT"
HCCL_CONNECT = "HCCL_CONNECT_TIMEOUT"

# Patterns, compiled (and kept by re's cache) only for a file that sets these variables.
_WHOLE = r"[0-9]{1,10}"  # torch reads these with std::stoi, into a C int
_C_INT_MAX = 2**31 - 1  # past it std::stoi throws; HCCL documents the same ceiling
_DECIMAL = r"[0-9]{1,10}(\.[0-9]{1,2})?"  # HCCL_EXEC_TIMEOUT takes hundredths on newer Atlas parts
_WITH_UNIT = r"([0-9]{1,6}[dhms]){1,4}"  # a hacfg duration, which these variables do not read
# c10d's getCvarBool, which refuses anything else
_SWITCH_WORDS = {
    **dict.fromkeys(("1", "y", "yes", "t", "true"), True),
    **dict.fromkeys(("0", "n", "no", "f", "false"), False),
}


class _Variable:
    """A timeout or switch the environment may set, and how it is read."""

    __slots__ = ("levels", "name", "pattern", "reads", "unit")

    def __init__(
        self,
        name: str,
        reads: str,
        pattern: str | None = None,
        unit: timedelta = timedelta(seconds=1),
        levels: range | None = None,
    ) -> None:
        self.name = name
        self.reads = reads  # what a readable value looks like, for the message
        self.pattern = pattern  # a number; None: a switch
        self.unit = unit
        self.levels = levels  # the values a numbered mode takes


_VARIABLES = {
    variable.name: variable
    for variable in (
        _Variable(HEARTBEAT, 'whole seconds, like "600"', _WHOLE),
        _Variable(HCCL_EXEC, 'seconds, like "1800" (0: never)', _DECIMAL),
        _Variable(HCCL_CONNECT, 'whole seconds, like "600"', _WHOLE),
        _Variable(ASYNC_ERROR_HANDLING, 'a mode 0 to 3, like "3"', _WHOLE, levels=range(4)),
        _Variable(MONITORING, 'a switch, "1" or "0"'),
        _Variable(BLOCKING_WAIT, 'a switch, "1" or "0"'),
    )
}
_PLATFORM_MINUTES = _Variable(ma.HANG_DETECT_TIME, 'whole minutes, like "30"', _WHOLE, timedelta(minutes=1))


def _text(value: Any) -> str | None:
    """An environment value as the process would see it; None for what no environment holds (a list, null)."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    return str(value).strip()


def _read(variable: _Variable, value: Any) -> timedelta | int | bool | None:
    """The value as torch, HCCL or the platform reads it; None when it cannot be read."""
    text = _text(value)
    if text is None:
        return None
    if variable.pattern is None:
        return _SWITCH_WORDS.get(text.lower())
    if not re.fullmatch(variable.pattern, text) or float(text) > _C_INT_MAX:
        return None
    if variable.levels is not None:
        return int(text) if int(text) in variable.levels else None
    return float(text) * variable.unit


class _Environment:
    """The job's environment, read for timeouts: each variable's value and where the file writes it."""

    __slots__ = ("base", "values")

    def __init__(self, values: Mapping[Any, Any], base: LogicalPath) -> None:
        self.values = values
        self.base = base

    def at(self, name: str) -> LogicalPath:
        return (*self.base, name)

    def get(self, name: str) -> Any:
        """The variable as its reader takes it; None when unset or unreadable (HA043 reports that)."""
        return _read(_VARIABLES[name], self.values[name]) if name in self.values else None


class _Judge:
    """Who would call the stuck job a hang, after how long, and where the file says so."""

    __slots__ = ("acts", "at", "cost", "shorten", "timeout", "who")

    def __init__(self, who: str, acts: str, timeout: timedelta, at: LogicalPath, cost: str, shorten: str) -> None:
        self.who = who  # with its time: "the agent's hang timeout (30m)"
        self.acts = acts  # what it would have done: "can name the culprit"
        self.timeout = timeout
        self.at = at
        self.cost = cost  # what it costs when something else fires first
        self.shorten = shorten  # the other way out, in the file's words


class _Watchdog:
    """A collective library's timer that ends a stuck process by itself."""

    __slots__ = ("at", "fix", "timeout", "who")

    def __init__(self, who: str, timeout: timedelta, at: LogicalPath | None, fix: str) -> None:
        self.who = who
        self.timeout = timeout
        self.at = at  # None: a default, not in the file
        self.fix = fix


def _watchdogs(env: _Environment, accelerator: str | None) -> Iterator[_Watchdog]:
    """The watchdogs that kill a stuck process on this accelerator, as far as the file tells."""
    if accelerator == "gpu":
        heartbeat = env.get(HEARTBEAT)
        if isinstance(heartbeat, timedelta) and env.get(MONITORING) is not False:
            yield _Watchdog(
                f"the NCCL heartbeat monitor ({HEARTBEAT}={_seconds(heartbeat)})",
                heartbeat,
                env.at(HEARTBEAT),
                f"raise {HEARTBEAT}",
            )
        # torch tears a process down at its group's timeout in these modes; the script's timeout= is not
        # in the file, so the rule speaks only where the file chooses the mode.
        chosen = next((name for name in (ASYNC_ERROR_HANDLING, BLOCKING_WAIT) if env.get(name)), None)
        if chosen:
            yield _Watchdog(
                f"the NCCL watchdog ({chosen}={_text(env.values[chosen])}, torch's default timeout"
                f" {format_duration(NCCL_TIMEOUT)} unless init_process_group is given timeout=)",
                NCCL_TIMEOUT,
                env.at(chosen),
                "pass init_process_group a timeout=",
            )
    elif accelerator == "npu":
        execution = env.get(HCCL_EXEC)
        if execution is None:
            yield _Watchdog(
                f"HCCL's execution timeout (default {_seconds(HCCL_EXEC_DEFAULT)} s)",
                HCCL_EXEC_DEFAULT,
                None,
                f"set {HCCL_EXEC}",
            )
        elif isinstance(execution, timedelta) and execution:  # 0: never times out
            yield _Watchdog(
                f"HCCL's execution timeout ({HCCL_EXEC}={_text(env.values[HCCL_EXEC])})",
                execution,
                env.at(HCCL_EXEC),
                f"raise {HCCL_EXEC}",
            )


def _seconds(duration: timedelta) -> str:
    return f"{duration.total_seconds():g}"


def _minutes(duration: timedelta) -> str:
    return f"{duration.total_seconds() / 60:g}"


def _judged_first(judges: list[_Judge], env: _Environment, accelerator: str | None) -> Iterator[Problem]:
    """One finding per watchdog that fires before any of ``judges``, naming the longest it beats: raising the
    watchdog above that one settles them all."""
    for watchdog in _watchdogs(env, accelerator):
        beaten = [judge for judge in judges if watchdog.timeout < judge.timeout]
        if beaten:
            judge = max(beaten, key=lambda judge: judge.timeout)
            over = f"{watchdog.fix} above {_seconds(judge.timeout)} s, or {judge.shorten}"
            yield Problem(
                watchdog.at or judge.at,
                f"{watchdog.who} kills the job before {judge.who} {judge.acts}: {judge.cost}; {over}",
            )


@rule("HA040", "watchdog-before-hang-timeout", "warning")
def watchdog_before_hang_timeout(ctx: ScenarioContext) -> Iterator[Problem]:
    """A collective watchdog ends a stuck job before the hang timeout can judge it, or a save can end.

    ## What it does
    Compares the agent's timeouts (`hang.timeout`, then each of `hang.phases`; in a request
    body, the platform's `MA_HANG_DETECT_TIME`, 30 minutes by default) and
    `checkpoint.save_time` with the timers of the collective library that end a stuck process
    by themselves:

    - GPU: `TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC` (torch's default 480 s, with
      `TORCH_NCCL_ENABLE_MONITORING` on, its default); and the process group's timeout, where
      the file sets `TORCH_NCCL_ASYNC_ERROR_HANDLING` to 1-3 or `TORCH_NCCL_BLOCKING_WAIT` on:
      10 minutes unless the script passes `init_process_group` a `timeout=`
      (`kProcessGroupNCCLDefaultTimeout` in torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp;
      `torch.distributed.constants.default_pg_nccl_timeout`).
    - NPU: `HCCL_EXEC_TIMEOUT`, 1836 s when unset (CANN environment variable reference,
      envref_07_0078; 0 means never).

    Fires, once per watchdog, when its time is the shorter. hacfg cannot see the `timeout=` a script
    passes, so on GPU it speaks only where the file sets the NCCL variables; torch's own
    default mode (`TORCH_NCCL_ASYNC_ERROR_HANDLING=3`) does tear down at the group's timeout.

    ## Why is this bad?
    The watchdog aborts the stuck ranks first. The round then ends as a crash with an NCCL or
    HCCL error: the agent never gets to name the rank that hung, the restart counts against
    `restart.max` like any environment fault, and the platform's restart upon suspension
    never applies. A save that outlasts the watchdog fails the same way: while one rank
    writes, the others wait for it in the next collective, which is what `HCCL_EXEC_TIMEOUT`
    bounds (CANN's reference names the case).

    ## Example
    ```yaml
    job: {accelerator: npu, environment: {HCCL_EXEC_TIMEOUT: "600"}}
    hang: {timeout: 30m}
    ```

    ## Fix
    Give the watchdog more time than the hang timeout (`HCCL_EXEC_TIMEOUT: "2400"`), or
    shorten the hang timeout and give the quiet phases their own (`hang.phases`).
    """
    config = ctx.config
    crash = "the round is a crash, counted against restart.max, not a hang"
    judges = []
    if config.hang.detect:
        hang = config.hang
        timeouts: list[tuple[str, LogicalPath, str, timedelta]] = [
            ("hang timeout", ("hang", "timeout"), "hang.timeout", hang.timeout)
        ]
        timeouts += [(f"{p} timeout", ("hang", "phases", p), f"hang.phases.{p}", t) for p, t in hang.phases.items()]
        judges = [
            _Judge(
                f"the agent's {name} ({format_duration(timeout)})",
                "can name the culprit",
                timeout,
                ctx.first_present(at, ("hang",), ("scenario",)),
                crash,
                f"shorten {key}",
            )
            for name, at, key, timeout in timeouts
        ]
    if config.checkpoint.save_time:
        judges.append(
            _Judge(
                f"a save ({format_duration(config.checkpoint.save_time)}, checkpoint.save_time)",
                "completes",
                config.checkpoint.save_time,
                ("checkpoint", "save_time"),
                "the ranks that wait for the saving one in a collective time out, the save is lost and the crash"
                " counts against restart.max",
                "save from every rank at once (a distributed checkpoint)",
            )
        )
    yield from _judged_first(judges, _Environment(ctx.environment, ctx.ENVIRONMENT), config.job.accelerator)


@watchdog_before_hang_timeout.job
def watchdog_before_hang_timeout_in_body(ctx: JobContext) -> Iterator[Problem]:
    env = _Environment(ctx.environment, ctx.ENVIRONMENT)
    if ma.HANG_DETECT_TIME in env.values:
        minutes = _read(_PLATFORM_MINUTES, env.values[ma.HANG_DETECT_TIME])
        if not isinstance(minutes, timedelta):
            return  # HA016 reports it
        at = env.at(ma.HANG_DETECT_TIME)
    else:
        minutes, at = timedelta(minutes=ma.DEFAULT_HANG_MINUTES), ctx.first_present(ctx.ENVIRONMENT, ("kind",))
    judge = _Judge(
        f"the platform's hang detection ({ma.HANG_DETECT_TIME}={_minutes(minutes)})",
        "calls it a hang",
        minutes,
        at,
        f"the job fails instead, {ma.HANG_RETRY} never applies and {ma.JOB_RETRY_NUM} pays for it",
        f"lower {ma.HANG_DETECT_TIME}",
    )
    yield from _judged_first([judge], env, ctx.body.accelerator)


def _platform_hang_minutes(ctx: ScenarioContext) -> tuple[int, LogicalPath]:
    """The ``MA_HANG_DETECT_TIME`` a built job carries, and where the file says it: the modelarts target
    writes ``hang.timeout`` in whole minutes over ``job.environment`` unless it is the platform's default."""
    minutes = ma.hang_minutes(ctx.config.hang.timeout)
    env = _Environment(ctx.environment, ctx.ENVIRONMENT)
    if minutes == ma.DEFAULT_HANG_MINUTES and ma.HANG_DETECT_TIME in env.values:
        written = _read(_PLATFORM_MINUTES, env.values[ma.HANG_DETECT_TIME])
        if isinstance(written, timedelta):
            return int(written.total_seconds() // 60), env.at(ma.HANG_DETECT_TIME)
    return minutes, ctx.first_present(("hang", "timeout"), ("hang",), ("scenario",))


@rule("HA041", "platform-hang-before-agent", "warning")
def platform_hang_before_agent(ctx: ScenarioContext) -> Iterator[Problem]:
    """The platform's hang detection restarts the job before the agent's timeout judges it.

    ## What it does
    On a GPU or NPU job with restart upon suspension (`restart.on_hang`), compares the
    platform's `MA_HANG_DETECT_TIME` (what `hacfg build` writes: `hang.timeout` in whole
    minutes, or a `job.environment` value when `hang.timeout` is the platform's default of 30
    minutes) with the agent's timeouts: `hang.timeout` and each of `hang.phases`. Fires on each
    agent timeout that is the longer.

    ## Why is this bad?
    The platform has one hang time for every phase. When a save or an evaluation stays quiet
    (no output, accelerators idle) past it, the platform kills the process and reruns the boot
    command before the agent has judged anything: the phase timeout never applies, the agent
    names no culprit, and the restart is the platform's, not one the agent decided.

    ## Example
    ```yaml
    job: {accelerator: gpu}
    restart: {max: 3, on_hang: true}
    hang: {timeout: 10m, phases: {checkpoint: 40m}}
    ```

    ## Fix
    Keep each phase within the platform's time, or raise `hang.timeout` to the longest phase
    (ModelArts takes a single value); drop a lower `MA_HANG_DETECT_TIME` from
    `job.environment`.
    """
    config = ctx.config
    if config.job.accelerator not in ("gpu", "npu") or not (config.restart.on_hang and config.hang.detect):
        return
    minutes, at = _platform_hang_minutes(ctx)
    platform = timedelta(minutes=minutes)
    said = f"the platform's hang detection ({ma.HANG_DETECT_TIME}={minutes})"
    if config.hang.timeout > platform:
        yield Problem(
            at,
            f"{said} restarts the job before the agent's hang timeout ({format_duration(config.hang.timeout)})"
            f" judges it: the platform's restart replaces the agent's verdict; remove {ma.HANG_DETECT_TIME}"
            " from job.environment",
        )
    for phase, timeout in config.hang.phases.items():
        if timeout > platform:
            yield Problem(
                ("hang", "phases", phase),
                f"{said} restarts the job {minutes}m into a quiet {phase} phase, before the agent's {phase}"
                f" timeout ({format_duration(timeout)}) judges it: keep {phase} within {minutes}m, or raise"
                f" hang.timeout to {format_duration(timeout)} (the platform takes one value for every phase)",
            )


@rule("HA042", "save-outlasts-hang-timeout", "warning")
def save_outlasts_hang_timeout(ctx: ScenarioContext) -> Iterator[Problem]:
    """A checkpoint save takes longer than the hang timeout that watches it.

    ## What it does
    Fires when `checkpoint.save_time` is as long as the agent's timeout for the save: the
    `checkpoint` phase of `hang.phases` when declared (`save_step` runs in it), else
    `hang.timeout`.

    ## Why is this bad?
    A save is quiet. Killed as a hang before it completes, it leaves no newer checkpoint: the
    restart resumes from the one before, trains to the same save, and is killed again, until
    the hang restarts run out (a production job restarted every 30 minutes for that reason is
    DLRover's pull request 1749).

    ## Example
    ```yaml
    checkpoint: {path: /mnt/sfs/ckpt, save_time: 15m}
    hang: {timeout: 10m}
    ```

    ## Fix
    Give saves a phase of their own, longer than a save: `hang.phases: {checkpoint: 30m}`.
    """
    config = ctx.config
    save = config.checkpoint.save_time
    if not (config.hang.detect and save):
        return
    declared = "checkpoint" in config.hang.phases
    timeout = config.hang.phases["checkpoint"] if declared else config.hang.timeout
    if save < timeout:
        return
    spoken = f"{format_duration(save)} (checkpoint.save_time)"
    if declared:
        yield Problem(
            ("hang", "phases", "checkpoint"),
            f"a save takes {spoken} and the agent's checkpoint timeout is {format_duration(timeout)}: every save"
            f" is killed as a hang and the job resumes from the one before, again and again; raise it above"
            f" {format_duration(save)}",
        )
    else:
        yield Problem(
            ctx.first_present(("hang", "timeout"), ("checkpoint", "save_time")),
            f"a save takes {spoken} and the agent's hang timeout is {format_duration(timeout)}: every save is"
            " killed as a hang and the job resumes from the one before, again and again; give saves their own:"
            f" hang.phases: {{checkpoint: {format_duration(2 * save)}}}",
        )


@rule("HA043", "timeout-unreadable", "error")
def timeout_unreadable(ctx: ScenarioContext) -> Iterator[Problem]:
    """A timeout or watchdog switch in the job's environment that its reader cannot read.

    ## What it does
    Fires for `TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC`, `HCCL_EXEC_TIMEOUT`, `HCCL_CONNECT_TIMEOUT`
    (seconds; HCCL's connect default is 120 s), `TORCH_NCCL_ASYNC_ERROR_HANDLING` (a mode,
    0 to 3), `TORCH_NCCL_ENABLE_MONITORING` and `TORCH_NCCL_BLOCKING_WAIT` (switches), and, in
    a scenario file, `MA_HANG_DETECT_TIME` (whole minutes; in a request body HA016 reads it),
    when the value is not one of those.

    ## Why is this bad?
    torch reads these with C++'s `std::stoi`, which takes `10m` as 10 seconds and refuses
    `ten`; HCCL and the platform read plain numbers too. Either the job fails at its first
    collective or a timeout is not what it says, and none of the other timeout rules can tell
    who fires first.

    ## Example
    ```yaml
    job: {environment: {TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC: 10m}}
    ```

    ## Fix
    A plain number in the variable's unit: `TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC: "600"`. `hacfg fix`
    rewrites a duration with a unit (`10m`) into that number.
    """
    return _unreadable(_Environment(ctx.environment, ctx.ENVIRONMENT), (*_VARIABLES.values(), _PLATFORM_MINUTES))


@timeout_unreadable.job
def timeout_unreadable_in_body(ctx: JobContext) -> Iterator[Problem]:
    return _unreadable(_Environment(ctx.environment, ctx.ENVIRONMENT), tuple(_VARIABLES.values()))


def _unreadable(env: _Environment, variables: tuple[_Variable, ...]) -> Iterator[Problem]:
    for variable in variables:
        if variable.name not in env.values or _read(variable, env.values[variable.name]) is not None:
            continue
        value = env.values[variable.name]
        import json  # only to quote a value in a finding: a lint with none does without the module

        shown = json.dumps(value, default=str) if len(str(value)) <= 40 else "a value"
        yield Problem(
            env.at(variable.name),
            f"{variable.name} is {shown}; it must be {variable.reads}",
            fix=_in_unit(variable, value, env.at(variable.name)),
        )


def _in_unit(variable: _Variable, value: Any, at: LogicalPath) -> Fix | None:
    """A duration written with a unit (``10m``), as the plain number ``variable`` reads, when it is whole."""
    text = _text(value)
    if variable.pattern is None or variable.levels is not None or text is None or not re.fullmatch(_WITH_UNIT, text):
        return None
    try:
        count, left = divmod(parse_duration(text), variable.unit)
    except ValueError:  # units out of order: no duration hacfg reads either
        return None
    if left:
        return None
    import json

    number = json.dumps(str(count))
    return Fix(at, number, f"write {number}")


@hookimpl
def hacfg_rules() -> list[Rule]:
    return [watchdog_before_hang_timeout, platform_hang_before_agent, save_outlasts_hang_timeout, timeout_unreadable]
