"""The group's parts without processes: where a node stands, how a round is judged, peer failures."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import pytest
from kit.agents import agent_argv, read_events
from kit.paths import CHILDREN, REPO
from kit.timing import at_most

from hacfg.agent import checkpoints
from hacfg.agent.classify import Failure, classify
from hacfg.agent.group.discovery import DEFAULT_PORT, resolve_spec
from hacfg.agent.group.signing import SECRET_ENV, SECRET_FILE_ENV, NoSecret, Rejected, Signer, forget, job_secret
from hacfg.agent.rounds import Outcome, Plan, verdict_for
from hacfg.plugin import manager as plugin_manager
from hacfg.restart.policy import Budgets, Policy
from hacfg.scenario.source import InputError


def spec(env: dict[str, str], **flags):
    options = {"nnodes": None, "node_rank": None, "endpoint": None, "timeout": 60.0, "config_nodes": None, **flags}
    return resolve_spec(env=env, **options)


def test_one_node_is_no_group():
    assert spec({}) is None
    assert spec({"VC_WORKER_NUM": "1"}) is None


def test_volcano_and_modelarts_variables_place_the_node():
    found = spec({"VC_WORKER_NUM": "4", "VC_TASK_INDEX": "2", "VC_WORKER_HOSTS": "job-worker-0.job,job-worker-1.job"})
    assert (found.nnodes, found.rank, found.host, found.port) == (4, 2, "job-worker-0.job", DEFAULT_PORT)
    assert not found.leader


def test_an_indexed_jobs_completion_index_is_the_rank():
    """What a JobSet's pod has: the Job controller's index, node 0's host on the agent's command line."""
    found = spec({"JOB_COMPLETION_INDEX": "1"}, config_nodes=2, endpoint="t-node-0-0.t")
    assert (found.nnodes, found.rank, found.host, found.port) == (2, 1, "t-node-0-0.t", DEFAULT_PORT)


def test_torchrun_variables_and_flags_win_over_the_platforms():
    env = {"MA_NUM_HOSTS": "2", "NODE_RANK": "1", "VC_TASK_INDEX": "0", "MASTER_ADDR": "10.0.0.5"}
    assert (spec(env).rank, spec(env).host) == (1, "10.0.0.5")
    found = spec(env, nnodes=3, node_rank=0, endpoint="node0:1234")
    assert (found.nnodes, found.rank, found.host, found.port, found.leader) == (3, 0, "node0", 1234, True)


def test_the_store_never_takes_the_trainings_master_port():
    assert spec({"MA_NUM_HOSTS": "2", "NODE_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": str(DEFAULT_PORT)}).port == DEFAULT_PORT + 1


def test_the_scenarios_node_count_is_the_default():
    assert spec({"NODE_RANK": "1", "MASTER_ADDR": "h"}, config_nodes=4).nnodes == 4


@pytest.mark.parametrize(
    ("env", "flags", "message"),
    [
        ({"MASTER_ADDR": "h"}, {"nnodes": 2}, "needs this node's rank"),
        ({"NODE_RANK": "2", "MASTER_ADDR": "h"}, {"nnodes": 2}, "outside a 2-node job"),
        ({"NODE_RANK": "1"}, {"nnodes": 2}, "needs node 0's address"),
        ({"NODE_RANK": "1"}, {"nnodes": 2, "endpoint": "h:port"}, "is not HOST:PORT"),
    ],
)
def test_what_cannot_be_told_is_one_clear_error(env, flags, message):
    with pytest.raises(InputError, match=message):
        spec(env, **flags)


PLAN = Plan(round=3, budgets=Budgets(attempt=3, restarts=2, counted=1))


def test_a_plans_resume_position_crosses_the_store_and_a_malformed_one_is_refused():
    plan = Plan(round=3, budgets=PLAN.budgets, resume_position=(2, 500, 1), resume_from="/ckpt/rank_0/net_1-2_500.ckpt")
    assert Plan.from_json(json.loads(json.dumps(plan.to_json()))) == plan
    for forged in ([], [2, "500"], [True], 7, "2_500"):
        with pytest.raises(ValueError, match="not a checkpoint position"):
            Plan.from_json({**plan.to_json(), "resume_position": forged})


def test_the_first_failure_that_is_not_a_consequence_is_the_rounds_cause():
    outcomes = [
        Outcome(0, "environment", "connection closed by peer", 1, peer=True),
        Outcome(1, "user", "ValueError", 1),
        Outcome(2, "environment", "SIGKILL", 137),
    ]
    policy = Policy(max_restarts=5, unconditional=True)
    verdict = verdict_for(PLAN, outcomes, policy, ended_by=1)
    assert (verdict.cause, verdict.rank, verdict.action, verdict.budgets.counted, verdict.budgets.user_streak) == ("user", 1, "proc_restart", 2, 1)
    # the node that ended the round (its signed stop) is the cause, whatever its rank; a consequence never is
    assert (verdict_for(PLAN, outcomes, policy, ended_by=2).cause, verdict_for(PLAN, outcomes, policy, ended_by=2).rank) == ("environment", 2)
    assert verdict_for(PLAN, outcomes, policy, ended_by=0).rank == 1


def test_only_consequences_seen_is_an_environment_fault():
    verdict = verdict_for(PLAN, [Outcome(0, "user", "stopped", 143, peer=True)], Policy(max_restarts=5))
    assert (verdict.cause, verdict.action, verdict.budgets.counted) == ("environment", "proc_restart", 2)


def test_a_round_succeeds_only_when_every_node_does():
    assert verdict_for(PLAN, [Outcome(0, "success", "", 0), Outcome(1, "success", "", 0)], Policy()).exit_code == 0
    verdict = verdict_for(PLAN, [Outcome(0, "success", "", 0), Outcome(1, "environment", "SIGKILL", 137)], Policy(max_restarts=2))
    assert verdict.action == "proc_restart"


def test_a_stopped_agent_stops_the_job_with_its_signal():
    verdict = verdict_for(PLAN, [Outcome(1, "stopped", "agent received SIGTERM", 143), Outcome(0, "environment", "x", 143, peer=True)], Policy(max_restarts=3), ended_by=1)
    assert (verdict.action, verdict.exit_code, verdict.rank) == ("stop", 143, 1)


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.1.2.3]:4242",
        "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete",
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.",
        "torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed.",
        "RuntimeError: NCCL error: remote process exited or there was a network error, NCCL version 2.21.5",
    ],
)
def test_what_a_rank_sees_when_another_died_is_a_peer_failure(line):
    verdict = classify(Failure(1, None, ("Traceback (most recent call last):", "  ...", line)))
    assert (verdict.cause, verdict.peer) == ("environment", True)


def test_a_signal_to_a_worker_under_torchrun_is_an_environment_fault():
    tail = (
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "train.py FAILED",
        "Root Cause (first observed failure):",
        "[0]:",
        "  exitcode  : -9 (pid: 4242)",
        "  error_file: <N/A>",
        "  traceback : Signal 9 (SIGKILL) received by PID 4242",
    )
    verdict = classify(Failure(1, None, tail))
    assert (verdict.cause, verdict.peer) == ("environment", False)
    assert "SIGKILL" in verdict.reason


def test_a_python_exception_under_torchrun_stays_a_user_error():
    tail = ("Traceback (most recent call last):", 'ValueError: bad config', "ChildFailedError:", "  exitcode  : 1 (pid: 4242)")
    assert classify(Failure(1, None, tail)).cause == "user"


def agent_without_torch(tmp_path, *options: str, child: str) -> subprocess.CompletedProcess:
    """`hacfg agent` in an image without torch: a torch that cannot be imported shadows the real one."""
    shadow = tmp_path / "no-torch" / "torch"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named torch')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow.parent), str(REPO)])}
    argv = [*agent_argv(tmp_path / "state", *options), sys.executable, str(CHILDREN / child)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)


def test_several_nodes_without_torch_hand_every_restart_to_the_platform(tmp_path):
    result = agent_without_torch(tmp_path, "--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "127.0.0.1:9", "--max-restarts", "3", child="crash.py")
    assert result.returncode == 138
    assert "torch is not installed, so the nodes cannot restart together in place" in result.stderr.splitlines()[0]
    assert result.stdout.splitlines() == ["attempt 1 restarts 0"]  # no restart in place
    decision = next(e for e in read_events(tmp_path / "state") if e["event"] == "decision")
    assert decision["action"] == "job_reschedule" and "the platform restarts the whole job" in decision["reason"]


@pytest.mark.slow
def test_a_user_error_without_torch_still_gives_up_with_the_commands_code(tmp_path):
    result = agent_without_torch(tmp_path, "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "127.0.0.1:9", "--max-restarts", "3", child="user_error.py")
    assert result.returncode == 1


@pytest.mark.slow
def test_standalone_keeps_restarting_in_place_whatever_the_jobs_size(tmp_path):
    result = agent_without_torch(tmp_path, "--standalone", "--nnodes", "4", "--max-restarts", "2", child="crash.py")
    assert result.returncode == 138
    assert result.stdout.splitlines() == ["attempt 1 restarts 0", "attempt 2 restarts 1", "attempt 3 restarts 2"]
    assert "torch is not installed" not in result.stderr


def test_a_workers_exception_under_torchs_rank_prefix_is_named():
    tail = ("[rank0]: Traceback (most recent call last):", '[rank0]:   File "train.py", line 9', "[rank0]: ValueError: bad config",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:", "  exitcode  : 1 (pid: 4242)")
    verdict = classify(Failure(1, None, tail))
    assert verdict.cause == "user" and "ValueError: bad config" in verdict.reason


SIGNER = Signer(b"s" * 32, rank=0)


def test_a_sealed_value_opens_only_for_its_key_round_and_writer():
    sealed = SIGNER.seal("r3/plan", 3, {"resume_from": "/ckpt/step_4"})
    assert Signer(b"s" * 32, rank=1).open("r3/plan", sealed.encode(), number=3, node=0) == (3, {"resume_from": "/ckpt/step_4"})
    mac, _, number, payload = sealed.split(" ", 3)
    for raw, reason in [
        (sealed.replace("step_4", "step_9"), "signature does not match"),  # the payload changed
        (Signer(b"t" * 32, rank=0).seal("r3/plan", 3, {}), "signature does not match"),  # another job's secret
        (Signer(b"s" * 32, rank=0, job="job-a").seal("r3/plan", 3, {}), "signature does not match"),  # another job, same secret
        (SIGNER.for_store("an earlier store").seal("r3/plan", 3, {}), "signature does not match"),  # before node 0 restarted
        (f"{mac} 1 {number} {payload}", "signature does not match"),  # claims another writer
        ("{not json", "not a signed value"),
        ("", "not a signed value"),
    ]:
        with pytest.raises(Rejected, match=reason):
            SIGNER.open("r3/plan", raw, number=3, node=0)
    with pytest.raises(Rejected, match="signature does not match"):
        SIGNER.open("r4/plan", sealed, number=3, node=0)  # moved to another key
    with pytest.raises(Rejected, match="stale: signed for round 3, not round 4"):
        SIGNER.open("r3/plan", sealed, number=4, node=0)
    with pytest.raises(Rejected, match="only node 1 writes it"):
        SIGNER.open("r3/plan", sealed, number=3, node=1)


def test_the_platforms_secret_wins(tmp_path):
    named = tmp_path / "mounted"
    named.write_text("k" * 40 + "\n")
    assert job_secret({SECRET_ENV: "e" * 20, SECRET_FILE_ENV: str(named)}, tmp_path, None, create=True, timeout=1) == (b"e" * 20, None)
    assert job_secret({SECRET_FILE_ENV: str(named)}, tmp_path, None, create=True, timeout=1) == (b"k" * 40, None)
    assert not (tmp_path / "group.secret").exists()
    with pytest.raises(InputError, match="at least 16"):
        job_secret({SECRET_ENV: "short"}, tmp_path, None, create=True, timeout=1)
    with pytest.raises(InputError, match="cannot read the group secret"):
        job_secret({SECRET_FILE_ENV: str(tmp_path / "absent")}, tmp_path, None, create=True, timeout=1)


def test_node_0_creates_a_private_secret_once_and_the_others_read_it(tmp_path):
    folder = tmp_path / "ckpt" / ".hacfg" / "node-0"
    secret, path = job_secret({}, folder, None, create=True, timeout=1)
    assert path == folder / "group.secret" and len(secret) == 64
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert job_secret({}, folder, None, create=True, timeout=1)[0] == secret  # a restarted node 0 keeps it
    assert job_secret({}, folder, None, create=False, timeout=1)[0] == secret
    assert [p.name for p in folder.iterdir()] == ["group.secret"]  # no draft left behind
    forget(path)
    assert job_secret({}, folder, None, create=True, timeout=1)[0] != secret  # the next job gets its own


def test_each_job_gets_a_secret_of_its_own_on_the_shared_storage(tmp_path):
    job_a, path_a = job_secret({}, tmp_path, "volcano-job-a", create=True, timeout=1)
    job_b, path_b = job_secret({}, tmp_path, "volcano-job-b", create=True, timeout=1)
    assert job_a != job_b and path_a != path_b  # a secret left behind after a 138 never signs for the next job
    assert job_secret({}, tmp_path, "volcano-job-a", create=False, timeout=1) == (job_a, path_a)


def test_a_secret_another_user_owns_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    folder = tmp_path / "node-0"
    folder.mkdir()
    planted = folder / "group.secret"
    planted.write_text("chosen by someone else" * 3)
    planted.chmod(0o600)
    os.chown(planted, 65534, 65534)
    with pytest.raises(InputError, match="the group secret belongs to user 65534, not to this agent's user 0"):
        job_secret({}, folder, None, create=True, timeout=1)


def test_a_follower_waits_for_the_secret_a_bounded_time(tmp_path):
    started, timeout = time.monotonic(), 0.5
    with pytest.raises(NoSecret, match=r"no group secret at .*group.secret within 0.5s"):
        job_secret({}, tmp_path, None, create=False, timeout=timeout)
    assert time.monotonic() - started < at_most(timeout, starts=0)


def test_a_linked_or_readable_secret_is_refused(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("x" * 64)
    target.chmod(0o600)
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "group.secret").symlink_to(target)
    with pytest.raises(InputError, match="a symlink is refused"):
        job_secret({}, linked, None, create=False, timeout=1)
    readable = tmp_path / "readable"
    readable.mkdir()
    (readable / "group.secret").write_text("x" * 64)
    (readable / "group.secret").chmod(0o644)
    with pytest.raises(InputError, match=r"only its owner can read \(600\), not -rw-r--r--"):
        job_secret({}, readable, None, create=False, timeout=1)


def test_a_checkpoint_linked_from_outside_the_checkpoint_path_is_never_chosen(tmp_path):
    root, outside = tmp_path / "ckpt", tmp_path / "attacker"
    for folder, step in ((root, 4), (outside, 99)):
        (folder / f"step_{step}").mkdir(parents=True)
        (folder / f"step_{step}" / ".complete").touch()
    (root / "step_100").symlink_to(outside / "step_99")
    (root / "latest").write_text("../attacker/step_99\n")
    assert checkpoints.newest_complete(root).path == root / "step_4"
    assert checkpoints.within(root / "step_4", root) and not checkpoints.within(root / "step_100", root)
    failures = [str(f) for f in plugin_manager.drain()]
    assert any("step_100 lies outside checkpoint.path" in f for f in failures), failures


@pytest.mark.parametrize(("host", "bound"), [("127.0.0.1", "127.0.0.1"), ("localhost", "127.0.0.1"), ("::1", "::1"), ("203.0.113.9", None)])
def test_the_store_listens_on_the_endpoints_address_where_it_is_this_machines(host, bound):
    from hacfg.agent.group.transport import listening_socket

    listen = listening_socket(host, 0)
    try:
        assert (listen.getsockname()[0] if listen else None) == bound  # None: torch's store takes every interface
    finally:
        if listen:
            listen.close()


@pytest.mark.torch
def test_a_round_stopped_elsewhere_is_seen_at_once_not_at_the_next_look(joined_pair, monkeypatch):
    """Node 1 waits on the round's stop key between its keep-alives: with looks 5 s apart, node 0's
    stop still reaches it within a fraction of that."""
    import threading

    from hacfg.agent.culprit.analysis import NodeEvidence
    from hacfg.agent.group import liveness

    leader, follower = joined_pair
    monkeypatch.setattr(liveness, "POLL", 5.0)
    heard, told = threading.Event(), []
    with follower.watch(lambda reason: (told.append(reason), heard.set()), lambda: NodeEvidence(1, ())):
        time.sleep(0.2)  # the watch is waiting on the key
        began = time.monotonic()
        leader.channel.stop_round(leader.channel.store, leader.plan.round, 0, "a worker of node 0 failed")
        assert heard.wait(liveness.POLL / 2)
        assert time.monotonic() - began < liveness.POLL / 5, told
    assert told == [f"round {leader.plan.round} ended by node 0: a worker of node 0 failed"]
