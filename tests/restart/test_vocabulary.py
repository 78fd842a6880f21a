"""The agent's vocabulary: every word it writes is a member, and the log holds the plain strings."""

from __future__ import annotations

import json
import re

import pytest
from kit.agents import agent, read_events

from hacfg.restart import vocabulary
from hacfg.restart.vocabulary import Action, Cause, Ending, Event, Start

pytestmark = pytest.mark.slow


def test_a_member_is_written_as_the_very_string_the_log_always_held():
    record = {"event": Event.ATTEMPT_EXIT, "cause": Ending.PEER, "action": Action.JOB_RESCHEDULE}
    assert json.dumps(record) == '{"event": "attempt_exit", "cause": "peer", "action": "job_reschedule"}'


def test_every_cause_is_an_ending_and_only_three_actions_run_the_job_again():
    assert {Ending(cause) for cause in Cause} <= set(Ending)
    assert {action for action in Action if action.runs_again} == {"proc_restart", "pod_reschedule", "job_reschedule"}


def test_the_state_table_names_every_kind_of_event():
    table = vocabulary.__doc__ or ""
    assert set(re.findall(r"``([a-z_]+)``", table)) >= {event.value for event in Event if event != Event.PLUGIN_FAILURE}


@pytest.mark.parametrize(
    ("options", "child"),
    [
        (("--max-restarts", "1"), "crash.py"),
        (("--max-restarts", "2", "--unconditional"), "user_error.py"),
        (("--max-restarts", "1", "--hang-retry", "--hang-timeout", "1s", "--initial-hang-timeout", "1s"), "silent.py"),
    ],
    ids=["environment", "user", "hang"],
)
def test_every_word_a_real_agent_writes_is_in_the_vocabulary(tmp_path, options, child):
    agent(tmp_path, "--grace", "1", *options, child=child)
    for record in read_events(tmp_path / "state"):
        Event(record["event"])
        if record["event"] == Event.ATTEMPT_START:
            Start(record["start"])
        if record["event"] == Event.ATTEMPT_EXIT:
            Ending(record["cause"])
        if record["event"] == Event.DECISION:
            Action(record["action"])
            Ending(record["cause"])
