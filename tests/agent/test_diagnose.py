"""`hacfg diagnose`: the cause, evidence and restart decision for logs of jobs run without the agent.

The logs in tests/data/logs are real runs (see generate.py there); the tests that regenerate
some of them run the real commands again.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kit.cli import run_hacfg
from kit.paths import REPO

from hacfg.agent import diagnose

LOGS = REPO / "tests" / "data" / "logs"
PLUGINS = REPO / "tests" / "data" / "plugins"


def generate(tmp_path, *names: str, steps: int | None = None):
    """Run generate.py for real into tmp_path; returns the paths of the logs."""
    subprocess.run(
        [sys.executable, LOGS / "generate.py", "--into", tmp_path, *names], check=True, capture_output=True, timeout=300
    )
    return [tmp_path / name for name in names]


def diagnose_json(cli, *args):
    result = cli("diagnose", "-f", "json", *args)
    return result, json.loads(result.out)


# log -> cause, exit status as read (signal or exit code, how), evidence line numbers, first decision with no config
FIXTURES = {
    "python-traceback.log": ("user", (1, None, "inferred", 4), [4, 10], ("give_up", 1)),
    "shell-killed.log": ("environment", (None, "SIGKILL", "read", 5), [5], ("give_up", 137)),
    "modelarts-exit-137.log": ("environment", (137, None, "read", 5), [5], ("give_up", 137)),
    "torchrun-exception.log": ("user", (1, None, "read", 39), [9, 39], ("give_up", 1)),
    "torchrun-sigkill.log": ("environment", (None, "SIGKILL", "read", 35), [35], ("give_up", 137)),
    "torchrun-peer-killed.log": ("environment", (None, "SIGKILL", "read", 57), [57], ("give_up", 137)),
    "modelarts-torchrun-sigkill.log": ("environment", (None, "SIGKILL", "read", 36), [36], ("give_up", 137)),
}


@pytest.mark.parametrize("name", FIXTURES)
def test_each_real_log_gets_its_cause_evidence_and_decision(cli, name):
    cause, (code, signal, how, line), evidence, (action, exit_code) = FIXTURES[name]
    result, [report] = diagnose_json(cli, LOGS / name)
    assert result.code == 1, result.err
    assert report["outcome"] == "failure" and report["cause"] == cause and report["peer"] is False
    status = report["exit_status"]
    assert (status["exit_code"], status["signal"], status["how"], status["from"]["line"]) == (code, signal, how, line)
    text = (LOGS / name).read_text().splitlines()
    assert [(e["line"], e["text"]) for e in report["evidence"]] == [(n, text[n - 1]) for n in evidence]
    assert (report["decisions"][0]["action"], report["decisions"][0]["exit_code"]) == (action, exit_code)
    assert report["policy"] == "no --config: restart.max 0"


def test_text_report_names_the_line_the_evidence_and_the_rules(cli):
    result = cli("diagnose", LOGS / "torchrun-sigkill.log", "--config", "multi-node")
    assert result.code == 1
    assert result.out == (
        f"{LOGS / 'torchrun-sigkill.log'}:35: environment fault: killed by SIGKILL\n"
        "  exit status: killed by SIGKILL, read from line 35\n"
        "  classifier:  hacfg\n"
        "  evidence:\n"
        f"    35 | {(LOGS / 'torchrun-sigkill.log').read_text().splitlines()[34]}\n"
        "  restart rules (multi-node: restart.max 3, unconditional, on_hang): proc_restart: environment fault: restart 1 of 3\n"
        "  if it keeps failing this way: proc_restart x3, then job_reschedule (exit 138): restart budget of 3 spent: retry elsewhere\n"
    )


def test_the_scenario_file_decides_what_the_rules_would_do(cli, write):
    config = write(
        "ha.yaml",
        """
        version: 1
        scenario: single-node
        checkpoint: {path: /mnt/sfs/ckpt, resume: true}
        restart: {max: 8, unconditional: true, pod_reschedules: 1}
    """,
    )
    _, [user] = diagnose_json(cli, "--config", config, LOGS / "python-traceback.log")
    assert user["policy"] == f"{config}: restart.max 8, unconditional, pod_reschedules 1"
    assert [d["action"] for d in user["decisions"]] == ["proc_restart"] * 3 + ["give_up"]
    assert user["decisions"][-1] == {"action": "give_up", "reason": "3 unconditional restarts in a row", "exit_code": 1}
    _, [environment] = diagnose_json(cli, "--config", config, LOGS / "modelarts-exit-137.log")
    assert [d["action"] for d in environment["decisions"]] == ["proc_restart"] * 8 + ["pod_reschedule"]
    assert environment["decisions"][-1]["exit_code"] == 138


def test_a_log_that_ends_in_success_exits_0(cli):
    result, [report] = diagnose_json(cli, LOGS / "modelarts-success.log")
    assert result.code == 0
    assert report["outcome"] == "success" and report["cause"] is None and report["decisions"] == []
    assert report["exit_status"]["exit_code"] == 0 and report["evidence"][0]["line"] == 5
    assert cli("diagnose", LOGS / "modelarts-success.log").out == (
        f"{LOGS / 'modelarts-success.log'}:5: success: exit 0, read from line 5\n"
    )


def test_several_logs_exit_1_when_any_failed(cli):
    result, reports = diagnose_json(cli, LOGS / "modelarts-success.log", LOGS / "shell-killed.log")
    assert result.code == 1
    assert [r["outcome"] for r in reports] == ["success", "failure"]


def test_live_runs_without_torch(tmp_path, cli):
    traceback, killed, oom, success = generate(
        tmp_path, "python-traceback.log", "shell-killed.log", "modelarts-exit-137.log", "modelarts-success.log"
    )
    _, reports = diagnose_json(cli, traceback, killed, oom, success)
    assert [(r["cause"], r["exit_status"]["exit_code"], r["exit_status"]["signal"]) for r in reports] == [
        ("user", 1, None),
        ("environment", None, "SIGKILL"),
        ("environment", 137, None),
        (None, 0, None),
    ]
    assert [e["text"] for e in reports[0]["evidence"]] == ["Traceback (most recent call last):", "KeyError: 'labels'"]
    assert (
        reports[1]["evidence"][0]["text"].startswith("run.sh: line 3: ")
        and " Killed " in reports[1]["evidence"][0]["text"]
    )


KILL_SELF = "import os; os.kill(os.getpid(), {})"


@pytest.mark.parametrize(
    ("command", "signal", "printed"),
    [
        (
            [sys.executable, "-X", "faulthandler", "-c", "import ctypes; ctypes.string_at(0)"],
            "SIGSEGV",
            "Fatal Python error: Segmentation fault",
        ),
        (["bash", "-c", f"{sys.executable} -c '{KILL_SELF.format(11)}'; true"], "SIGSEGV", "bash: line 1: "),
        (["bash", "-c", f"{sys.executable} -c '{KILL_SELF.format(15)}'; true"], "SIGTERM", "Terminated"),
        (["bash", "-c", f"{sys.executable} -c '{KILL_SELF.format(6)}'; true"], "SIGABRT", "bash: line 1: "),
    ],
    ids=["faulthandler", "bash segfault", "bash terminated", "bash aborted"],
)
def test_signals_as_shells_and_python_print_them(cli, tmp_path, command, signal, printed):
    log = tmp_path / "job.log"
    with log.open("w") as out:
        subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False, timeout=60)
    _, [report] = diagnose_json(cli, log)
    assert (report["cause"], report["exit_status"]["signal"]) == ("environment", signal)
    assert report["exit_status"]["from"]["text"].startswith(printed)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torchrun needs torch==2.13.0")
def test_live_torchrun_worker_killed_by_a_signal(tmp_path, cli):
    [log] = generate(tmp_path, "torchrun-sigkill.log")
    _, [report] = diagnose_json(cli, log)
    assert (report["cause"], report["exit_status"]["signal"]) == ("environment", "SIGKILL")
    assert "Signal 9 (SIGKILL) received by PID" in report["evidence"][-1]["text"]


def test_line_numbers_count_the_whole_log_though_only_the_tail_is_classified(cli, tmp_path):
    log = tmp_path / "long.log"
    run = subprocess.run(
        [sys.executable, LOGS / "train.py", "raise", "500"], capture_output=True, text=True, check=False
    )
    log.write_text(run.stdout + run.stderr)
    _, [report] = diagnose_json(cli, log)
    assert report["lines"] == 507
    assert [e["line"] for e in report["evidence"]] == [501, 507]


def test_nothing_recognised_is_an_assumed_exit_1(cli, tmp_path):
    log = tmp_path / "quiet.log"
    log.write_text(
        subprocess.run([sys.executable, LOGS / "train.py", "ok"], capture_output=True, text=True, check=False).stdout
    )
    result, [report] = diagnose_json(cli, log)
    assert result.code == 1
    assert report["exit_status"] == {"exit_code": 1, "signal": None, "how": "assumed", "from": None}
    assert report["cause"] == "user" and report["evidence"] == [] and report["classifier"] == "hacfg"
    text = cli("diagnose", log).out
    assert "exit 1 assumed: the log does not say how the command ended" in text
    assert "evidence:    none; no line was recognised" in text


def test_rank_log_without_the_launcher_report_is_classified_from_its_lines(cli, tmp_path):
    """What node 0 logs when the killed rank ran on another node: only its own collective failing."""
    lines = (LOGS / "torchrun-peer-killed.log").read_text().splitlines(keepends=True)
    log = tmp_path / "node0.log"
    log.write_text("".join(lines[:18]))
    _, [report] = diagnose_json(cli, log)
    assert report["cause"] == "environment" and report["peer"] and report["exit_status"]["how"] == "inferred"
    assert report["evidence"][-1] == {"line": 18, "text": lines[17].rstrip("\n")}
    assert "  consequence: another rank failed first; the log of its node holds the cause\n" in cli("diagnose", log).out


def test_plugin_classifiers_are_asked_and_their_evidence_found(tmp_path):
    lines = (LOGS / "torchrun-peer-killed.log").read_text().splitlines(keepends=True)
    log = tmp_path / "node0.log"
    log.write_text("".join(lines[:18]))
    env = {"PYTHONPATH": str(PLUGINS)}
    result = run_hacfg("--plugin", "remote_rank", "--plugin", "raising", "diagnose", "-f", "json", log, env=env)
    [report] = json.loads(result.out)
    assert (report["classifier"], report["reason"]) == (
        "remote_rank",
        "a rank on another process or node died first (gloo lost its peer)",
    )
    assert [e["line"] for e in report["evidence"]] == [8, 18]  # the traceback (exit 1) and gloo's error
    assert result.err.count("plugin 'raising' raised in hacfg_classify_failure: ValueError: classifier bug") == 1


def test_a_log_piped_on_stdin():
    piped = subprocess.run(
        [sys.executable, "-m", "hacfg", "diagnose", "-f", "json", "-"],
        input=b"\xff\n" + (LOGS / "shell-killed.log").read_bytes(),
        capture_output=True,
        check=False,
        timeout=60,
    )
    [report] = json.loads(piped.stdout)
    assert (
        report["log"] == "-"
        and report["exit_status"]["signal"] == "SIGKILL"
        and report["exit_status"]["from"]["line"] == 6
    )


def test_bad_input_exits_2_with_one_line(cli, tmp_path, write):
    missing = cli("diagnose", tmp_path / "nope.log")
    assert (missing.code, missing.err) == (2, f"{tmp_path / 'nope.log'}: cannot read: No such file or directory\n")
    directory = cli("diagnose", tmp_path)
    # a folder is read for the evidence of hangs (tests/test_culprit.py); this one has none
    assert (directory.code, directory.err) == (2, f"{tmp_path}: no hang evidence (evidence/attempt-N/summary.json) under it\n")
    config = write("ha.yaml", "version: 1\nscenario: single-node\nrestart: {max: lots}\n")
    bad = cli("diagnose", "--config", config, LOGS / "shell-killed.log")
    assert bad.code == 2 and bad.err.startswith(f"{config}:3:")
    assert cli("diagnose").code == 2


def test_undecodable_bytes_do_not_stop_it(cli, tmp_path):
    log = tmp_path / "binary.log"
    log.write_bytes(b"\xff\xfe step 1\n" + (LOGS / "shell-killed.log").read_bytes())
    _, [report] = diagnose_json(cli, log)
    assert report["exit_status"]["signal"] == "SIGKILL" and report["exit_status"]["from"]["line"] == 6


def test_the_readme_example_is_what_it_prints():
    readme = (REPO / "README.md").read_text()
    shown = readme.split("without it, no restarts) would decide")[1].split("```\n")[1]
    result = run_hacfg("diagnose", "--config", "multi-node", "tests/data/logs/torchrun-sigkill.log", cwd=REPO)
    assert result.out == shown


# Reading a log in chunks: the same lines as a text file gives, whatever the chunk size, and
# memory bounded however long one line is.

line_text = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=30)
line_break = st.sampled_from(["\n", "\r\n", "\r"])
log_text = st.lists(st.tuples(line_text, line_break), max_size=40).map(lambda pairs: "".join(a + b for a, b in pairs))


def test_chunks_give_the_lines_a_text_file_gives(tmp_path_factory, examples):
    folder = tmp_path_factory.mktemp("chunks")

    @settings(max_examples=examples // 10, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(log_text, st.booleans(), st.sampled_from([1, 2, 3, 7, 64]))
    def same_lines(text, unterminated, chunk_bytes):
        path = folder / "train.log"
        path.write_bytes((text + ("tail" if unterminated else "")).encode())
        with path.open(encoding="utf-8", errors="replace") as stream:  # universal newlines, as before
            expected = [diagnose.Line(n, line.rstrip("\r\n")) for n, line in enumerate(stream, 1)]
        log = diagnose.read_log(path, chunk_bytes=chunk_bytes)
        assert (log.total, list(log.tail)) == (len(expected), expected[-diagnose.WINDOW :])

    same_lines()


def test_a_long_line_is_cut_and_says_how_much(tmp_path):
    log = tmp_path / "train.log"
    log.write_bytes(b"start\n" + b"x" * 10_000 + b"\r\nTraceback (most recent call last):\nValueError: bad\n")
    read = diagnose.read_log(log, chunk_bytes=1000)
    assert read.total == 4
    assert read.tail[1].text == "x" * diagnose.LINE_BYTES + f" [... {10_000 - diagnose.LINE_BYTES} more bytes]"
    assert [line.text for line in read.tail[2:]] == ["Traceback (most recent call last):", "ValueError: bad"]


PEAK = """
import resource, sys, time
from hacfg.cli.main import main
started = time.perf_counter()
code = main(["diagnose", "-f", "json", sys.argv[1]])
print(code, time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
"""


def diagnose_cost(log) -> tuple[float, int]:
    """Seconds and peak resident KiB of a real ``hacfg diagnose LOG`` process."""
    proc = subprocess.run([sys.executable, "-c", PEAK, log], capture_output=True, text=True, timeout=300)
    code, seconds, peak = proc.stderr.split()[-3:]
    assert code == "1" and "Traceback" not in proc.stderr.rsplit("\n", 2)[0], proc.stderr
    return float(seconds), int(peak)


ENDING = b"Traceback (most recent call last):\n  File \"train.py\", line 3\nRuntimeError: CUDA error: misaligned address\n"


@pytest.mark.slow
def test_a_64_mib_line_costs_what_a_64_mib_log_does(tmp_path):
    one_line, many_lines, small = tmp_path / "one-line.log", tmp_path / "many-lines.log", tmp_path / "small.log"
    size = 64 << 20
    one_line.write_bytes(b"x" * size + b"\n" + ENDING)
    row = b"step 12345 loss 0.1234 lr 0.0001 tokens/s 123456 " + b"y" * 29 + b"\n"
    many_lines.write_bytes(row * (size // len(row)) + ENDING)
    small.write_bytes(row * 100 + ENDING)
    (long_time, long_peak), (normal_time, normal_peak), (_, small_peak) = map(diagnose_cost, (one_line, many_lines, small))
    assert long_peak - small_peak < 16 << 10, (long_peak, small_peak)  # KiB: the line is never held whole
    assert normal_peak - small_peak < 16 << 10, (normal_peak, small_peak)
    assert long_time < 3 * normal_time + 1, (long_time, normal_time)


@pytest.mark.parametrize(
    "line",
    ["Training end with return code: 137", "[ModelArts Service Log][INFO] Training end with return code: 137"],
    ids=["bare", "with the level tag"],
)
def test_the_modelarts_end_line_is_read_with_or_without_its_tags(cli, write, line):
    log = write("job.log", f"step 10 loss 0.3\n{line}\n")
    config = write("ha.yaml", "version: 1\nscenario: single-node\nrestart:\n  max: 3\n")
    _, [report] = diagnose_json(cli, "--config", config, log)
    assert (report["cause"], report["exit_status"]["exit_code"], report["exit_status"]["how"]) == ("environment", 137, "read")
    assert report["decisions"][0]["action"] == "proc_restart"  # not give_up on an assumed exit 1
