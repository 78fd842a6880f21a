"""Prometheus exposition of the agent's counters and goodput: a real textfile, a real scrape."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from pytest import approx

from conftest import CHILDREN, agent, agent_argv


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """Every sample of an exposition, keyed by name and labels, through prometheus_client's own parser."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for family in text_string_to_metric_families(text) for s in family.samples}


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


def test_the_port_is_scraped_while_the_command_runs(tmp_path):
    agent = subprocess.Popen([*agent_argv(tmp_path / "state", "--metrics-port", "127.0.0.1:0"), sys.executable, str(CHILDREN / "wait_for_term.py")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = next(line.split()[-1] for line in agent.stderr if line.startswith("[hacfg] metrics on "))
        assert url.startswith("http://127.0.0.1:") and not url.startswith("http://127.0.0.1:0/")
        assert agent.stdout.readline() == "ready\n"
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.headers["Content-Type"].startswith("text/plain")
            got = samples(response.read().decode())
        assert got[("hacfg_attempt", ())] == 1 and got[("hacfg_attempt_running", ())] == 1
        assert got[("hacfg_goodput_seconds", (("kind", "startup"),))] >= 0
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)
    assert agent.returncode == 128 + signal.SIGTERM  # stopped as told; the server went with the agent


def test_metrics_options_fail_in_one_line(tmp_path, cli, monkeypatch):
    bad = cli("agent", "--metrics-port", "http", "--", "true")
    assert bad.code == 2 and "expected PORT or HOST:PORT" in bad.err
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if the extra were not installed
    missing = cli("agent", "--state-dir", tmp_path / "state", "--metrics-file", tmp_path / "m.prom", "--", "true")
    assert missing.code == 2
    assert missing.err == "hacfg: error: --metrics-file and --metrics-port need prometheus_client: pip install 'hacfg[metrics]'\n"


def test_a_busy_port_is_one_line_not_a_traceback(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = agent(tmp_path, "--metrics-port", f"127.0.0.1:{port}", child="crash.py")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == f"hacfg: error: cannot serve metrics on 127.0.0.1:{port}: Address already in use"
