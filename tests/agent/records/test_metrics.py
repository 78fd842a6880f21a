"""Prometheus exposition of the agent's counters and goodput: a real textfile, a real scrape."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest
from kit.agents import agent, agent_argv
from kit.paths import CHILDREN
from kit.processes import ending
from kit.timing import at_most
from prometheus_client.parser import text_string_to_metric_families
from pytest import approx


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """Every sample of an exposition, keyed by name and labels, through prometheus_client's own parser."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.mark.slow
def test_the_textfile_holds_the_counters_and_the_goodput_of_the_whole_run(tmp_path, cli):
    prom = tmp_path / "textfile" / "hacfg.prom"
    prom.parent.mkdir()
    result = agent(tmp_path, "--max-restarts", "1", "--metrics-file", str(prom), child="crash.py")
    assert result.returncode == 138
    assert [p.name for p in prom.parent.iterdir()] == ["hacfg.prom"]  # written by rename: no temporary file left
    got = samples(prom.read_text())
    assert got[("hacfg_attempt", ())] == 2 and got[("hacfg_attempt_running", ())] == 0
    assert (got[("hacfg_restarts", ())], got[("hacfg_restarts_counted", ())], got[("hacfg_restarts_max", ())]) == (1, 1, 1)
    assert got[("hacfg_failures_total", (("cause", "environment"),))] == 2
    assert got[("hacfg_decisions_total", (("action", "proc_restart"),))] == 1
    assert got[("hacfg_decisions_total", (("action", "job_reschedule"),))] == 1
    assert got[("hacfg_hangs_total", ())] == 0
    goodput = json.loads(cli("events", tmp_path / "state" / "events.jsonl", "--format", "json").out)["goodput"]
    for kind, seconds in goodput["seconds"].items():
        assert got[("hacfg_goodput_seconds", (("kind", kind),))] == approx(seconds, abs=0.001)
    assert got[("hacfg_wall_seconds", ())] == approx(goodput["wall"], abs=0.001)
    assert got[("hacfg_ettr_ratio", ())] == approx(goodput["ettr"], abs=1e-3)


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        return samples(response.read().decode())


@contextlib.contextmanager
def serving(tmp_path, *options: str) -> Iterator[tuple[subprocess.Popen, str]]:
    """An agent running tests/children/wait_for_term.py with --metrics-port, and its /metrics URL once it is
    ready; ended, its pipes closed, when the block leaves."""
    argv = [*agent_argv(tmp_path / "state", "--metrics-port", "0", *options), sys.executable, str(CHILDREN / "wait_for_term.py")]
    with ending(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)) as agent:
        url = next(line.split()[-1] for line in agent.stderr if line.startswith("[hacfg] metrics on "))
        assert agent.stdout.readline() == "ready\n"
        yield agent, url


@pytest.mark.slow
@pytest.mark.parametrize("textfile", [False, True], ids=["port", "port-and-textfile"])
def test_the_port_is_scraped_while_the_command_runs_and_once_more_after_it_ended(tmp_path, textfile):
    # the textfile's last write collects the final values too, and is no scrape
    with serving(tmp_path, *(("--metrics-file", str(tmp_path / "hacfg.prom")) if textfile else ())) as (agent, url):
        try:
            assert url.startswith("http://127.0.0.1:") and not url.startswith("http://127.0.0.1:0/")  # a bare port: this machine only
            got = scrape(url)
            assert got[("hacfg_attempt", ())] == 1 and got[("hacfg_attempt_running", ())] == 1
            assert got[("hacfg_goodput_seconds", (("kind", "startup"),))] >= 0
        finally:
            agent.send_signal(signal.SIGTERM)
        log, deadline = tmp_path / "state" / "events.jsonl", time.monotonic() + 20
        while '"agent_exit"' not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert agent.poll() is None  # the agent has ended, and its final values wait for a scrape
        while True:  # the log is written a moment before the metrics hear of it: a scrape then is not the final one
            final = scrape(url)
            with contextlib.suppress(subprocess.TimeoutExpired):
                agent.wait(timeout=1)
            if agent.poll() is not None or time.monotonic() > deadline:
                break
        assert final[("hacfg_attempt_running", ())] == 0 and final[("hacfg_decisions_total", (("action", "stop"),))] == 1
        assert agent.returncode == 128 + signal.SIGTERM  # stopped as told; the server went with the agent


@pytest.mark.slow
def test_with_no_scrape_the_final_values_linger_only_as_long_as_asked(tmp_path):
    linger = 1.0
    with serving(tmp_path, "--metrics-linger", f"{linger:g}s") as (agent, _):
        agent.send_signal(signal.SIGTERM)
        started = time.monotonic()
        agent.wait(timeout=20)
        assert linger - 0.1 <= time.monotonic() - started < at_most(linger, starts=0)


@pytest.mark.slow
def test_every_cause_and_action_is_exported_at_zero_before_the_first_failure(tmp_path):
    with serving(tmp_path, "--metrics-linger", "0s") as (agent, url):
        try:
            got = scrape(url)
        finally:
            agent.send_signal(signal.SIGTERM)
            agent.wait(timeout=20)
        assert {labels[0][1]: value for (name, labels), value in got.items() if name == "hacfg_failures_total"} == {
            "disk_full": 0, "environment": 0, "hang": 0, "peer": 0, "stopped": 0, "straggler": 0, "user": 0,
        }
        actions = {labels[0][1]: value for (name, labels), value in got.items() if name == "hacfg_decisions_total"}
        assert actions == dict.fromkeys(["give_up", "job_reschedule", "pod_reschedule", "proc_restart", "stop", "success"], 0)


@pytest.mark.slow
def test_wall_time_and_ettr_move_between_events(tmp_path):
    with serving(tmp_path, "--metrics-linger", "0s") as (agent, url):
        try:
            first = scrape(url)
            time.sleep(1.5)
            second = scrape(url)
        finally:
            agent.send_signal(signal.SIGTERM)
            agent.wait(timeout=20)
        assert second[("hacfg_wall_seconds", ())] - first[("hacfg_wall_seconds", ())] >= 1.4
        assert second[("hacfg_ettr_ratio", ())] > first[("hacfg_ettr_ratio", ())]  # the running attempt is productive so far


def test_the_textfile_is_refreshed_between_events(tmp_path):
    from hacfg.agent.records.metrics import Metrics

    prom = tmp_path / "hacfg.prom"
    started = {"time": "2026-01-01T00:00:00.000+00:00", "event": "agent_start"}
    metrics = Metrics([], textfile=prom, refresh=0.2)
    try:
        metrics.record(started)
        before = after = samples(prom.read_text())[("hacfg_wall_seconds", ())]
        deadline = time.monotonic() + 20  # a loaded machine may starve the refresher for a while, never forever
        while after - before < 0.3 and time.monotonic() < deadline:
            time.sleep(0.05)
            after = samples(prom.read_text())[("hacfg_wall_seconds", ())]
    finally:
        metrics.close()
    assert after - before >= 0.3, "no event came, yet the textfile's wall time did not move"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (Debian: apt-get install prometheus)")
def test_promtool_finds_nothing_to_say_of_the_exposition(tmp_path):
    prom = tmp_path / "hacfg.prom"
    result = agent(tmp_path, "--max-restarts", "1", "--metrics-file", str(prom), child="crash.py")
    assert result.returncode == 138
    checked = subprocess.run(["promtool", "check", "metrics"], input=prom.read_text(), capture_output=True, text=True)
    assert (checked.returncode, checked.stdout + checked.stderr) == (0, "")


def test_metrics_options_fail_in_one_line(tmp_path, cli, monkeypatch):
    bad = cli("agent", "--metrics-port", "http", "--", "true")
    assert bad.code == 2 and "expected PORT or HOST:PORT" in bad.err
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if the extra were not installed
    missing = cli("agent", "--state-dir", tmp_path / "state", "--metrics-file", tmp_path / "m.prom", "--", "true")
    assert missing.code == 2
    assert missing.err == "hacfg: error: --metrics-file and --metrics-port need prometheus_client: pip install 'hacfg[metrics]'\n"


def test_a_busy_port_is_a_warning_and_an_event_and_the_training_runs(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = agent(tmp_path, "--metrics-port", str(port), "--max-restarts", "1", child="crash.py")
    warning = f"[hacfg] warning: cannot serve metrics on 127.0.0.1:{port}: Address already in use; the training starts without them"
    assert warning in result.stderr.splitlines()
    assert result.stdout.splitlines() == ["attempt 1 restarts 0", "attempt 2 restarts 1"]  # trained, and restarted, all the same
    assert result.returncode == 138
    events = [json.loads(line) for line in (tmp_path / "state" / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events][:2] == ["agent_start", "metrics_unavailable"]
    assert events[1]["listen"] == f"127.0.0.1:{port}" and events[1]["reason"] == "Address already in use"


def test_a_bare_port_is_this_machine_only():
    from hacfg.agent.settings import parse_listen

    assert parse_listen("9464") == ("127.0.0.1", 9464)
    assert parse_listen("0.0.0.0:9464") == ("0.0.0.0", 9464)
    assert parse_listen("[::1]:9464") == ("::1", 9464)


def test_the_values_are_final_once_the_agents_exit_is_recorded():
    """A scrape right after the exit record is the final one, and lets the agent go: none waits
    for the metrics to close first."""
    from hacfg.agent.records.metrics import Metrics

    metrics = Metrics([])
    port = metrics.serve("127.0.0.1", 0)
    try:
        metrics.record({"time": "2026-01-01T00:00:00.000+00:00", "event": "agent_start"})
        scrape(f"http://127.0.0.1:{port}/metrics")
        assert not metrics.final_scrape.is_set()
        metrics.record({"time": "2026-01-01T00:00:01.000+00:00", "event": "agent_exit", "exit_code": 0})
        scrape(f"http://127.0.0.1:{port}/metrics")
        assert metrics.final_scrape.wait(at_most(1.0, starts=0))
    finally:
        metrics.close()
