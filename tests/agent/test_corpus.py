"""Real failure logs from public issue threads, judged by the agent's classifier and by `hacfg diagnose`.

Each log in tests/data/failure-logs is kept verbatim with its source and its expected verdict
(verdicts.toml). The agent sees a failed attempt as its exit status and the last lines of its
output; `diagnose` sees the whole log and reads the exit status from it. Both must reach the
expected verdict, and the same one, resting on lines they both name.
"""

from __future__ import annotations

import json
import tomllib

import pytest
from kit.cli import run_hacfg
from kit.paths import REPO

from hacfg.agent.classify import classify
from hacfg.plugin.recovery import TAIL_LINES, Failure

CORPUS = REPO / "tests" / "data" / "failure-logs"
EXPECTED = tomllib.loads((CORPUS / "verdicts.toml").read_text())


def test_every_log_has_its_source_and_verdict_and_there_are_enough():
    assert sorted(EXPECTED) == sorted(path.name for path in CORPUS.glob("*.log"))
    assert len(EXPECTED) >= 25
    assert len([name for name in EXPECTED if name.startswith(("npu-", "hccl-", "mindspore-"))]) >= 20  # Ascend's
    assert all(entry["source"].startswith("https://github.com/") for entry in EXPECTED.values())


@pytest.fixture(scope="module")
def diagnosed() -> dict[str, dict]:
    """Every log through one real `hacfg diagnose -f json` process."""
    result = run_hacfg("diagnose", "-f", "json", *sorted(CORPUS.glob("*.log")))
    assert result.code == 1, result.err
    return {report["log"].rsplit("/", 1)[-1]: report for report in json.loads(result.out)}


def _under_the_agent(name: str):
    """The agent's verdict: the command's exit status, and the last lines of its output."""
    entry = EXPECTED[name]
    tail = tuple((CORPUS / name).read_text().splitlines()[-TAIL_LINES:])
    code = entry["exit"]
    return classify(Failure(code if code >= 0 else None, -code if code < 0 else None, tail))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_agent_and_diagnose_give_the_expected_verdict_on_the_same_lines(name, diagnosed):
    entry = EXPECTED[name]
    report, verdict = diagnosed[name], _under_the_agent(name)
    expected = (entry["cause"], entry.get("peer", False), entry.get("relocate", False))
    assert (report["cause"], report["peer"], report["relocate"]) == expected, report["reason"]
    assert (verdict.cause, verdict.peer, verdict.relocate) == expected, verdict.reason
    assert verdict.evidence, verdict.reason  # every verdict names its lines
    assert set(verdict.evidence) <= {line["text"] for line in report["evidence"]}
    if "cites" in entry:  # the root cause, not a line that follows from it
        assert entry["cites"] in verdict.evidence[-1], verdict.evidence
    if "says" in entry:  # what the line tells beyond its kind: the remote rank it names
        assert entry["says"] in verdict.reason and entry["says"] in report["reason"], (verdict.reason, report["reason"])
