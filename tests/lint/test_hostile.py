"""Hostile input: every file gives one clear line with its position, in bounded time and memory."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys

import pytest
from hypothesis import strategies as st
from kit.cli import findings
from kit.paths import REPO

HOSTILE = REPO / "tests" / "data" / "hostile"
MEMORY_LIMIT = 1 << 30  # the whole hacfg process, parser included


def lint_confined(*paths, cwd=None, prefix=()) -> subprocess.CompletedProcess:
    def limits():
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    return subprocess.run([*prefix, sys.executable, "-m", "hacfg", "lint", *map(str, paths)], capture_output=True, text=True,
                          timeout=30, preexec_fn=limits, cwd=cwd)


EXPECTED = {
    "billion-laughs.yaml": ":1:55: HA100 error document expands", "binary.yaml": ":2:118: HA100 error invalid UTF-8 byte 0x80",
    "utf16.yaml": ":1:1: HA100 error file is UTF-16", "invalid-utf8.yaml": ":3:17: HA100 error invalid UTF-8 byte 0xe9",
    "nul-bytes.yaml": ":2:22: HA100 error NUL character", "tabs.yaml": ":4:1: HA100 error",
    "duplicate-keys.yaml": ":5:3: HA100 error duplicate key 'max' (first defined at line 4)",
    "python-tag.yaml": ":2:11: HA100 error YAML tag !!python/object/apply:os.system is not allowed",
    "merge-keys.yaml": ":5:3: HA100 error YAML merge keys (<<) are not supported", "anchors-across-documents.yaml": ":4:11: HA100 error found undefined alias",
    "multi-document.yaml": ":3:1: HA100 error", "empty.yaml": ":1:1: HA102 error", "only-comments.yaml": ":1:1: HA102 error",
    "not-a-mapping.yaml": ":1:1: HA102 error", "unterminated.json": ":1:41: HA100 error invalid JSON",
    "recursive-alias.yaml": ":3:6: HA100 error recursive alias",
    "control-character.yaml": ":2:22: HA100 error control character 0x08 is not allowed in YAML",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_hostile_file(name):
    result = lint_confined(HOSTILE / name)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith(f"{HOSTILE / name}{EXPECTED[name]}"), first
    assert not os.path.exists("/tmp/hacfg-pwned")


@pytest.mark.slow
def test_billion_laughs_is_refused_without_expanding():
    result = lint_confined(HOSTILE / "billion-laughs.yaml")
    assert "more than 100000 nodes (alias bomb?)" in result.stdout


def test_ten_thousand_deep_nesting(tmp_path):
    (tmp_path / "deep.yaml").write_text("a: " + "[" * 10000 + "]" * 10000 + "\n")
    (tmp_path / "deep-map.yaml").write_text("".join(" " * i + "k:\n" for i in range(3000)))
    result = lint_confined(tmp_path / "deep.yaml", tmp_path / "deep-map.yaml")
    # hacfg stops at 200 levels; a newer libyaml may stop first, at its own limit: either is one positioned line
    findings = [line for line in result.stdout.splitlines() if " HA100 error " in line]
    assert len(findings) == 2 and all("nesting" in line for line in findings), result.stdout + result.stderr


@pytest.mark.slow
def test_a_50_megabyte_file_is_refused_before_parsing(tmp_path):
    big = tmp_path / "big.yaml"
    with big.open("w") as handle:
        handle.write("version: 1\nscenario: single-node\njob:\n  environment:\n")
        for i in range(1_000_000):
            handle.write(f"    VAR_{i}: {'x' * 40}\n")
    assert big.stat().st_size > 50 << 20
    result = lint_confined(big)
    assert result.stdout.startswith(f"{big}:1:1: HA100 error file is larger than 16 MiB")


def test_a_directory_named_like_a_file(tmp_path):
    (tmp_path / "ha.yaml").mkdir()
    result = lint_confined(tmp_path / "ha.yaml")
    assert result.returncode == 0  # a directory is walked, and this one holds nothing to lint
    assert run_build(tmp_path / "ha.yaml").stderr == f"{tmp_path}/ha.yaml: is a directory, not a file\n"


def run_build(path):
    return subprocess.run([sys.executable, "-m", "hacfg", "build", str(path)], capture_output=True, text=True, timeout=30)


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv to drop root's DAC override")
def test_unreadable_file(tmp_path):
    secret = tmp_path / "ha.yaml"
    secret.write_text("version: 1\nscenario: single-node\n")
    secret.chmod(0)
    drop = ("setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search")
    result = lint_confined(secret, prefix=drop)
    assert (result.returncode, result.stderr) == (2, f"{secret}: cannot read: Permission denied\n")


def test_symlink_loop(tmp_path):
    (tmp_path / "loop.yaml").symlink_to(tmp_path / "loop.yaml")
    result = lint_confined(tmp_path / "loop.yaml")
    assert (result.returncode, result.stderr) == (2, f"{tmp_path}/loop.yaml: cannot read: Too many levels of symbolic links\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "back").symlink_to(tmp_path, target_is_directory=True)
    assert lint_confined(tmp_path / "sub").returncode == 0  # directory walks do not follow links


HUGE = "1" * 5000
SCENARIO = "version: 1\nscenario: single-node\nrestart:\n  max: {}\n"


@pytest.mark.parametrize(
    "name, text, where",
    [
        ("decimal.yaml", SCENARIO.format(HUGE), ":4:8:"),
        ("negative.yaml", SCENARIO.format("-" + HUGE), ":4:8:"),
        ("hex.yaml", SCENARIO.format("0x" + "f" * 4000), ":4:8:"),  # 4000 hex digits print as 4817 decimal ones
        ("octal.yaml", SCENARIO.format("0o" + "7" * 5000), ":4:8:"),
        ("tagged.yaml", SCENARIO.format("!!int " + HUGE), ":4:8:"),
        ("key.yaml", f"version: 1\nscenario: single-node\njob:\n  environment:\n    ? {HUGE}\n    : x\n", ":5:7:"),
        ("body.json", json.dumps({"kind": "job", "metadata": {"name": "a"}, "spec": {"resource": {"node_count": 0}}})
         .replace("0}", HUGE + "}"), ":1:80:"),
    ],
)
def test_an_integer_past_pythons_limit_is_one_positioned_line(cli, tmp_path, name, text, where):
    path = tmp_path / name
    path.write_text(text)
    message = "integer longer than 4300 digits"
    linted = cli("lint", path)
    assert (linted.code, linted.out.splitlines()[0]) == (1, f"{path}{where} HA100 error {message}")
    for command in ("build", "import"):
        result = cli(command, path)
        assert (result.code, result.err) == (2, f"{path}{where} {message}\n"), command
    assert cli("fix", path).code == 0  # nothing it can fix in a file it cannot read; lint says why
    assert path.read_text() == text


def test_the_largest_integer_python_prints_is_read(cli, tmp_path):
    path = tmp_path / "ha.yaml"
    path.write_text(SCENARIO.format("9" * 4300))
    assert "restart.max" in cli("lint", path).out  # a finding about the value, not about reading it


def test_huge_numbers_in_strings_are_findings_or_passthrough(cli, tmp_path):
    """Counts and durations written as strings reach int() and timedelta() further in."""
    duration = tmp_path / "ha.yaml"
    duration.write_text(f"version: 1\nscenario: single-node\nhang:\n  timeout: {HUGE}m\n")
    assert f"{duration}:4:12: HA102 error hang.timeout: a duration longer than 999999999 days" in cli("lint", duration).out
    body = tmp_path / "job.json"
    annotations = {"fault-tolerance/job-retry-num": HUGE, "fault-tolerance/pod-retry-num": HUGE}
    environment = {"MA_HANG_DETECT_TIME": "9" * 17}
    body.write_text(json.dumps({"kind": "job", "metadata": {"name": "a", "annotations": annotations},
                                "algorithm": {"environments": environment}}))
    imported = cli("import", body, "-o", tmp_path / "ha.yaml")
    assert imported.code == 0, imported.err
    assert cli("lint", tmp_path / "ha.yaml").code in (0, 1)
    assert HUGE in (tmp_path / "ha.yaml").read_text()  # kept verbatim in passthrough, as the platform reads it


@pytest.mark.parametrize("depth, written", [(199, True), (200, False)])
def test_import_writes_no_scenario_nested_past_what_hacfg_reads(cli, tmp_path, depth, written):
    nested: object = 1
    for _ in range(depth - 1):
        nested = {"k": nested}
    body = tmp_path / "job.json"
    body.write_text(json.dumps({"kind": "job", "metadata": {"name": "a"}, "x": nested}))
    assert cli("lint", body).code in (0, 1)  # the body itself is readable at either depth
    result = cli("import", body, "-o", tmp_path / "ha.yaml")
    assert (tmp_path / "ha.yaml").exists() is written
    if written:  # "x" is no field of the request model: lint says so, and nothing else
        assert result.code == 0 and findings(cli, tmp_path / "ha.yaml", keys="rule") == {"HA101"}
    else:
        assert result.code == 2
        assert re.fullmatch(rf"{body}:1:\d+: nested 200 levels deep: under passthrough .*\n", result.err)


def test_a_whole_float_past_a_doubles_range_is_infinite_as_1e400_is():
    from hacfg.scenario.source import parse

    text = f"a: !!float {'7' * 400}\nb: !!float -{'7' * 400}\nc: 1e400\nd: !!float 12\n"
    assert parse(text, "ha.yaml").data == {"a": float("inf"), "b": float("-inf"), "c": float("inf"), "d": 12.0}


def test_a_huge_number_in_a_training_log_is_no_plugin_failure():
    from hacfg.agent.classify import classify
    from hacfg.plugin import manager as plugin_manager
    from hacfg.plugin.recovery import Failure

    manager = plugin_manager.get()
    reported = len(manager.failures)
    for line in ("exitcode  : -" + "9" * 5000 + " (pid: 3)", "Signal " + "9" * 5000 + " (SIGKILL) received by PID 3"):
        verdict = classify(Failure(1, None, (line,)))
        assert verdict.cause == "user" and manager.failures[reported:] == [], line


# Settings and baselines: a value of any type where hacfg expects another is one line, exit 2.
# lint walks up to the nearest pyproject.toml, which may be any repository's.

SCENARIO_FILE = "version: 1\nscenario: single-node\ncheckpoint: {path: obs://b/c, resume: true}\n"


@pytest.mark.parametrize(
    ("name", "text", "where", "message"),
    [
        ("pyproject.toml", "tool = 5\n", ":1:1", "tool: expected a table, such as [tool.hacfg]"),
        ("pyproject.toml", '[project]\nname = "x"\n\n[tool]\nhacfg = true\n', ":5:1", "tool.hacfg: expected a table, [tool.hacfg]"),
        (".hacfg.toml", "tool = [1]\n", ":1:1", "tool: expected a table, such as [tool.hacfg]"),
        (".hacfg.toml", 'select = ["HA"]\nbaseline = "a\\u0000b"\n', ":2:1", "[tool.hacfg] baseline: expected the path of a baseline file"),
        (".hacfg.toml", 'select = [\n  "HA001",\n  5,\n]\n', ":1:1", "[tool.hacfg] select: expected a list of rule IDs"),
        ("pyproject.toml", '[tool.hacfg]\nseverity = {HA003 = 5}\n', ":2:13", "[tool.hacfg] severity.HA003: expected one of info, warning, error, got 5"),
        (".hacfg.toml", 'select = ["HA001"\n', ":2:1", "invalid TOML: Unclosed array"),
        ("pyproject.toml", '[tool.hacfg]\nper-file-ignores = {"a/*" = ["HA997"]}\n', ":2:21", "[tool.hacfg]: unknown rule 'HA997'; did you mean 'HA099'?"),
    ],
)
def test_settings_of_the_wrong_type_are_one_positioned_line(cli, tmp_path, monkeypatch, name, text, where, message):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "ha.yaml").write_text(SCENARIO_FILE)
    (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path / "sub")
    result = cli("lint", "ha.yaml")
    assert (result.code, result.err) == (2, f"{tmp_path / name}{where}: {message}\n")


def test_a_baseline_entry_that_is_half_a_surrogate_pair_is_one_positioned_line(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ha.yaml").write_text(SCENARIO_FILE)
    (tmp_path / "baseline.json").write_text('{"version": 1, "findings": [\n  {"path": "\\ud800", "rule": "HA001", "key": "x"}\n]}\n')
    result = cli("lint", "--baseline", "baseline.json", "ha.yaml")
    assert (result.code, result.err) == (2, "baseline.json:2:12: invalid JSON: \\ud800 is half of a surrogate pair, not a character\n")


def toml(value) -> str:
    """``value`` as a TOML inline value (tables inline, keys quoted)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value).replace("e+", "e")
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(map(toml, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)} = {toml(v)}" for k, v in value.items()) + "}"
    return value.isoformat()  # a date or time


CHARACTERS = st.characters(blacklist_categories=("Cs",))  # TOML and UTF-8 hold no lone surrogates
plain_strings = st.sampled_from(["", "ALL", "HA", "HA001", "ha7", "HA999", "*", "**/*.json", "legacy/*", ".", "..", "/", "/dev/null",
                                 "baseline.json", "missing/b.json", "a\0b", "error", "warning", "info", "otc", "huaweicloud", " "])
scalars = (
    plain_strings | st.text(CHARACTERS, max_size=12) | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats() | st.datetimes() | st.dates() | st.times()
)
toml_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(plain_strings | st.text(CHARACTERS, max_size=6), inner, max_size=3),
    max_leaves=8,
)
SETTINGS_KEYS = ["select", "ignore", "per-file-ignores", "severity", "fail-on", "platform", "include", "baseline"]
hacfg_tables = st.dictionaries(st.sampled_from([*SETTINGS_KEYS, "tool", "hacfg", "selct"]), toml_values, max_size=4)
settings_files = st.one_of(
    hacfg_tables.map(lambda table: (".hacfg.toml", table)),
    hacfg_tables.map(lambda table: (".hacfg.toml", {"tool": {"hacfg": table}})),
    st.one_of(hacfg_tables, toml_values).map(lambda table: ("pyproject.toml", {"tool": {"hacfg": table}})),
    toml_values.map(lambda tool: ("pyproject.toml", {"tool": tool})),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12) | plain_strings
    | st.sampled_from(["\ud800", "\udfff", "a\udc80b", "\U0001f600"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["path", "rule", "key", "version", "findings"]) | st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
entries = st.fixed_dictionaries({"path": json_values | plain_strings, "rule": json_values | plain_strings, "key": json_values | plain_strings})
baselines = st.one_of(
    json_values,
    st.fixed_dictionaries({"version": st.sampled_from([1, 1, 1, 2, "1", None, True]), "findings": st.lists(entries | json_values, max_size=4)}),
)


def one_line_or_success(code: int, err: str) -> None:
    """Exit 0, 1 or 2, and exit 2 is one line (after a warning for each damaged event record skipped)."""
    assert code in (0, 1, 2) and "Traceback" not in err and "internal error" not in err, err
    if code == 2:
        assert sum(not line.startswith("hacfg: warning: ") for line in err.splitlines()) == 1, err


@pytest.mark.slow
def test_settings_and_baselines_of_any_type_are_one_line_and_exit_2(tmp_path_factory, examples):
    from hypothesis import HealthCheck, given, settings
    from kit.cli import run_in_process

    folder = tmp_path_factory.mktemp("hostile-settings")
    (folder / "ha.yaml").write_text(SCENARIO_FILE)

    @settings(max_examples=examples // 2, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(settings_files, baselines, st.booleans())
    def property_(settings_file, baseline, ensure_ascii):
        name, data = settings_file
        config = folder / name
        config.write_text("\n".join(f"{json.dumps(k)} = {toml(v)}" for k, v in data.items()) + "\n")
        # unescaped, half a surrogate pair is a byte sequence UTF-8 refuses
        (folder / "baseline.json").write_bytes(json.dumps(baseline, ensure_ascii=ensure_ascii).encode("utf-8", "surrogatepass"))
        for args in (("--config", config), ("--baseline", folder / "baseline.json")):
            one_line_or_success(*run_in_process("lint", *map(str, args), str(folder / "ha.yaml")))

    property_()


AGENT_START = '{"time": "2026-12-01T07:00:00.000Z", "event": "agent_start", "node": 0}\n'
EXIT = '{"time": "2026-12-01T07:05:00.000Z", "event": "attempt_exit", "node": 0, "attempt": 1, "cause": "environment", '


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ('{"time": "2026-12-01T07:01:00Z", "event": "attempt_start", "node": [1]}', "node: expected a whole number, got [1]"),
        ('{"time": "2026-12-01T07:01:00", "event": "attempt_start", "node": 0}', '"time" has no time zone'),
        (EXIT + '"duration": "5m"}', 'duration: expected seconds, got "5m"'),
        (EXIT + '"checkpoints": [{"path": "/c/step_1", "time": "2026-12-01T07:04:00Z"}]}',
         'checkpoints: expected checkpoints, each with its step, path and zoned time, got [{"path": "/c/step_1", "time": "2026-...'),
    ],
)
def test_an_event_record_not_as_the_agent_writes_it_is_an_error_at_its_line(cli, tmp_path, record, message):
    events = tmp_path / "events.jsonl"
    events.write_text(AGENT_START + record + "\n")
    plan = tmp_path / "ha.yaml"
    plan.write_text("version: 1\nscenario: single-node\ncheckpoint: {save_time: 1m}\nreliability: {restart_time: 1m}\n")
    for args in (("events", events), ("plan", plan, "--from-events", events)):
        result = cli(*args)
        assert (result.code, result.err) == (2, f"{events}:2:1: not an agent event: {message}\n"), args


@pytest.mark.slow
def test_event_logs_of_any_type_are_one_line_and_exit_2(tmp_path_factory, examples):
    """Records with the agent's event names and any JSON in the fields its readers compute with,
    through `hacfg events` and `hacfg plan --from-events`."""
    from hypothesis import HealthCheck, example, given, settings
    from kit.cli import run_in_process

    from hacfg.restart.vocabulary import Event

    folder = tmp_path_factory.mktemp("hostile-events")
    plan = folder / "ha.yaml"
    plan.write_text("version: 1\nscenario: single-node\njob: {duration: 1d}\ncheckpoint: {save_time: 1m}\nreliability: {restart_time: 1m}\n")
    fields = ["node", "round", "attempt", "exit_code", "cause", "action", "after", "idle", "timeout", "duration", "stopping",
              "gathering", "step", "checkpoints", "progressed", "resume_from", "reason", "signal", "start", "pid", "cause_node", "command",
              "rank", "score", "slowdown", "since", "phase", "culprit", "culprit_note"]
    times = st.sampled_from(["2026-12-01T07:00:00+00:00", "2026-12-01T08:00:00.5Z", "2026-12-01T07:00:00", "0001-01-01T00:00:00+00:00",
                             "9999-12-31T23:59:59+00:00", "2026-12-01T07:00:00-23:59", "2026-12-01", "soon"])
    checkpoint = st.fixed_dictionaries({"step": json_values | st.integers(), "path": json_values | plain_strings, "time": times | json_values},
                                       optional={"save_s": json_values | st.floats()})
    value = json_values | st.lists(checkpoint, max_size=2) | st.sampled_from(["hang", "environment", "user", "SIGKILL", "proc_restart"])
    record = st.fixed_dictionaries({"time": times, "event": st.sampled_from([e.value for e in Event])},
                                   optional=dict.fromkeys(fields, value))

    at = "2026-12-01T07:00:00+00:00"
    unknown_node = [{"time": at, "event": "agent_start"}, {"time": at, "event": "agent_start", "node": None}]
    unknown_attempt_and_idle = [{"time": at, "event": "attempt_start", "attempt": None}, {"time": at, "event": "hang", "idle": None}]
    malformed = [{"time": at, "event": "attempt_start"}, {"time": at, "event": "straggler", "since": "x", "slowdown": "x"},
                 {"time": at, "event": "decision", "round": 1, "action": "proc_restart", "culprit": {"node": None}}]

    # records meet each other in pairs (a sort, a merge, a round's start and end): a few per log will do,
    # and each takes its fields from a deep strategy that costs more to draw than the commands to run
    @settings(max_examples=examples // 2, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.lists(record, min_size=1, max_size=4))
    @example(unknown_node)  # sorted by node once: null beside 0 broke the sort
    @example(unknown_attempt_and_idle)  # null, "not known", in the fields the readers convert
    @example(malformed)  # a straggler's time and slowdown, a hang's culprit: refused like the rest
    def property_(records):
        events = folder / "events.jsonl"
        events.write_text("".join(json.dumps(r) + "\n" for r in records))
        for args in (("events", events), ("plan", plan, "--from-events", events)):
            one_line_or_success(*run_in_process(*map(str, args)))

    property_()


DEEP = "[" * 200_000 + "]" * 200_000
# what a trainer's exception message or a log line can hold: set the window's title, clear the screen, ring the bell
ESCAPES = "boom\x1b]0;pwned\x07\x1b[2J\x1b[H\x9b31m\tend"
SHOWN = "boom\\e]0;pwned\\a\\e[2J\\e[H\\x9b31m\\tend"
RECORDED_JOB = REPO / "tests" / "data" / "culprit" / "job"  # a real two-node hang's state folders


def printable(text: str) -> bool:
    return all(ch.isprintable() or ch == "\n" for ch in text)


def hang_evidence(folder, summary: str | None = None) -> None:
    """A real hang's evidence under ``folder``, and beside it, when given, another attempt's summary."""
    shutil.copytree(RECORDED_JOB, folder, dirs_exist_ok=True)
    if summary is not None:
        (folder / "node-0" / "evidence" / "attempt-2").mkdir()
        (folder / "node-0" / "evidence" / "attempt-2" / "summary.json").write_text(summary)


def test_nesting_in_an_events_log_a_summary_or_a_baseline_is_no_exit_3(cli, tmp_path):
    """200,000 nested brackets on one line were a RecursionError traceback, exit 3."""
    events = tmp_path / "events.jsonl"
    events.write_text(AGENT_START + DEEP + "\n")
    plan = tmp_path / "ha.yaml"
    plan.write_text("version: 1\nscenario: single-node\ncheckpoint: {save_time: 1m}\nreliability: {restart_time: 1m}\n")
    result = cli("events", events)
    assert result.code == 0 and result.err == f"hacfg: warning: {events}:2: a damaged event record, skipped\n"
    assert cli("plan", plan, "--from-events", events).code == 0
    hang_evidence(tmp_path, DEEP)
    result = cli("diagnose", tmp_path)
    assert result.code == 0 and result.out.startswith(f"{tmp_path}: attempt-1: the hang's culprit is node 1"), result.err
    assert "attempt-2" not in result.out  # not a summary the agent writes: left out
    (tmp_path / "baseline.json").write_text(DEEP)
    result = cli("lint", "--baseline", tmp_path / "baseline.json", plan)
    assert result.code == 2 and result.err.count("\n") == 1 and "nesting deeper than 200 levels" in result.err


def test_nothing_printed_from_a_log_an_event_or_evidence_holds_a_control_character(cli, tmp_path):
    events = tmp_path / "events.jsonl"
    events.write_text(AGENT_START + EXIT + f'"reason": {json.dumps(ESCAPES)}, "exit_code": 1}}\n')
    result = cli("events", events)
    assert result.code == 0 and printable(result.out) and SHOWN in result.out
    log = tmp_path / "train.log"
    log.write_text(f'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\nValueError: {ESCAPES}\n')
    result = cli("diagnose", log)
    assert result.code == 1 and printable(result.out) and f"ValueError: {SHOWN}" in result.out
    summary = json.loads((RECORDED_JOB / "node-1" / "evidence" / "attempt-1" / "summary.json").read_text())
    summary["ranks"][0]["stack"][0] = ESCAPES
    summary["ranks"][0]["last_op"] = ESCAPES
    hang_evidence(tmp_path, json.dumps(summary))
    result = cli("diagnose", tmp_path)
    assert result.code == 0 and printable(result.out) and SHOWN in result.out


@pytest.mark.slow
def test_events_reads_a_400_megabyte_line_in_bounded_memory(tmp_path):
    """`hacfg events` held the whole log: one 400 MB line took 1.6 GB. It reads a line at a time, and a
    record longer than 1 MiB is a damaged record, read past without being held."""
    events = tmp_path / "events.jsonl"
    with events.open("w") as handle:
        handle.write(AGENT_START)
        handle.write('{"time": "2026-12-01T07:01:00.000Z", "event": "attempt_exit", "reason": "')
        for _ in range(400):
            handle.write("x" * (1 << 20))
        handle.write('"}\n' + EXIT + '"exit_code": 1}\n')
    argv = ["/usr/bin/time", "-f", "maxrss=%M", sys.executable, "-m", "hacfg", "events", str(events)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"{events}:2: a damaged event record, skipped" in result.stderr
    table = result.stdout.splitlines()[1:3]
    assert " agent_start " in table[0] and " attempt_exit " in table[1], table
    maxrss_kb = int(result.stderr.rsplit("maxrss=", 1)[1].split()[0])
    assert maxrss_kb < 100_000, f"hacfg events held {maxrss_kb} KiB for a 400 MB line"


@pytest.mark.slow
def test_the_agents_own_lines_hold_no_control_character(tmp_path):
    """The command's output is relayed untouched; what the agent says of it is escaped."""
    from kit.agents import agent_argv

    script = f"raise ValueError({ESCAPES!r})"
    result = subprocess.run([*agent_argv(tmp_path / "state"), sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    ours = [line for line in result.stderr.splitlines() if line.startswith("[hacfg]")]
    assert ours and all(printable(line) for line in ours) and any(SHOWN in line for line in ours), ours
    assert ESCAPES in result.stderr  # the traceback itself, as the command wrote it


@pytest.mark.slow
def test_event_lines_and_summaries_of_any_bytes_are_no_exit_3(tmp_path_factory, examples):
    """Hostile lines among real records through `hacfg events` and `plan --from-events`, and summaries
    of any JSON, of a real hang's shape with any values, or of any bytes through `hacfg diagnose`."""
    from hypothesis import HealthCheck, given, settings
    from kit.cli import run_in_process

    folder = tmp_path_factory.mktemp("hostile-readers")
    plan = folder / "ha.yaml"
    plan.write_text("version: 1\nscenario: single-node\ncheckpoint: {save_time: 1m}\nreliability: {restart_time: 1m}\n")
    hang_evidence(folder / "job")
    summary = folder / "job" / "node-1" / "evidence" / "attempt-1" / "summary.json"
    real = json.loads(summary.read_text())
    fragments = st.sampled_from([DEEP, "[" * 40 + "]" * 40, "1" * 401, "1e400", "NaN", "-Infinity", ESCAPES, "\x00", "\ud800",
                                 '{"time": "2026-12-01T07:00:00Z", "event": "hang", "idle": 1e400}', "{", "\\"])
    lines = st.lists(fragments | st.text(max_size=20) | json_values.map(json.dumps), max_size=4)
    summaries = st.one_of(json_values, st.builds(lambda key, value: {**real, key: value},
                                                 st.sampled_from(["node", "ranks", "step"]), json_values | fragments),
                          st.builds(lambda value: {**real, "ranks": [{**real["ranks"][0], "rank": value, "pid": value}]},
                                    json_values | st.sampled_from([10**30, 2**64, -1, 1 << 70])))

    @settings(max_examples=examples // 2, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(lines, summaries, st.binary(max_size=30), st.booleans())
    def property_(hostile, document, raw, as_bytes):
        events = folder / "events.jsonl"
        events.write_bytes(AGENT_START.encode() + "".join(f"{line}\n" for line in hostile).encode("utf-8", "surrogatepass")
                           + (raw if as_bytes else b""))
        for args in (("events", events), ("plan", plan, "--from-events", events)):
            one_line_or_success(*run_in_process(*map(str, args)))
        summary.write_bytes(raw if as_bytes else json.dumps(document).encode("utf-8", "surrogatepass"))
        code, err = run_in_process("diagnose", str(folder / "job"))
        one_line_or_success(code, err)

    property_()
