"""Stragglers: a rank that computes persistently slower than the group is named from when each rank
reached the collectives (torch's flight recorder), scored against the others, and priced.

The recorded samples under ``data/straggler/`` are what :func:`hacfg.agent.culprit.inquiry.arrivals`
took, once a second, from two real gloo ranks of ``children/gloo_ranks.py`` (one per emulated node),
rank 1 computing twice as long from step 6 (``slow-rank-1``), or neither (``unperturbed``).
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from kit.paths import CHILDREN, REPO
from pytest import approx

from hacfg.agent.culprit import inquiry
from hacfg.agent.culprit.straggler import THRESHOLD, WINDOW, Pace, Pacer
from hacfg.agent.records.goodput import breakdown
from hacfg.plan.model import straggler_price
from hacfg.restart.vocabulary import StragglerAction

pytestmark = pytest.mark.torch  # arrivals from real ranks' flight recorders, or recorded from them

RECORDED = REPO / "tests" / "data" / "straggler"
MS = 1_000_000


def replayed(name: str) -> list[list[Pace]]:
    """The paces after each recorded sample, as node 0 would have seen them."""
    pacer, seen = Pacer(), []
    for sample in json.loads((RECORDED / f"{name}.json").read_text()):
        pacer.add(sample["node"], {int(rank): entries for rank, entries in sample["arrivals"].items()})
        seen.append(pacer.paces())
    return seen


def test_a_rank_computing_twice_as_long_is_named_once_a_window_is_full():
    seen = replayed("slow-rank-1")
    flagged = [[(p.node, p.rank) for p in paces if p.straggles()] for paces in seen]
    first = next(index for index, found in enumerate(flagged) if found)
    assert all(found == [(1, 1)] for found in flagged[first:]) and first <= 5  # within 6 samples: 6 s
    slow = next(p for p in seen[-1] if p.rank == 1)
    assert slow.slowdown == approx(2, abs=0.25) and slow.score == approx(0.5, abs=0.07)


def test_an_unperturbed_pair_of_ranks_names_no_one():
    seen = replayed("unperturbed")
    assert all(not p.straggles() for paces in seen for p in paces)
    assert all(p.slowdown == approx(1, abs=0.1) for p in seen[-1])


def steps(pacer: Pacer, computes: dict[int, list[float]], *, nodes: dict[int, int] | None = None, first: int = 0) -> None:
    """Feed ``pacer`` synchronous steps from collective ``first`` on: each rank computes its
    milliseconds, then all-reduces."""
    ended = max(pacer.arrived[("0 (gloo)", first - 1)].values()) + MS if first else 0
    for seq, _ in enumerate(next(iter(computes.values())), start=first):
        arrivals = {rank: ended + int(ms[seq - first] * MS) for rank, ms in computes.items()}
        for rank, ns in arrivals.items():
            pacer.add((nodes or {}).get(rank, rank), {rank: [["0 (gloo)", seq, ns]]})
        ended = max(arrivals.values()) + 1 * MS  # the all-reduce itself


def test_a_one_off_spike_is_no_straggler():
    pacer = Pacer()
    spiky = [50.0] * 30
    spiky[20] = 500.0  # a garbage collection, a slow batch
    steps(pacer, {0: [50.0] * 30, 1: spiky})
    assert not any(p.straggles() for p in pacer.paces())


def test_a_slowdown_over_less_than_a_window_is_not_yet_a_straggler():
    pacer = Pacer()
    steps(pacer, {0: [50.0] * WINDOW, 1: [100.0] * WINDOW})  # WINDOW collectives: WINDOW - 1 pairs
    _, slow = pacer.paces()
    assert slow.slowdown == approx(2, rel=0.05) and not slow.straggles()
    steps(pacer, {0: [50.0], 1: [100.0]}, first=WINDOW)
    [slow] = [p for p in pacer.paces() if p.straggles()]  # a whole window
    assert slow.rank == 1 and slow.period == approx(0.101, abs=0.001) and slow.before == 0  # slow from the start


def test_among_four_ranks_on_two_nodes_the_slow_one_is_named_with_its_node():
    pacer = Pacer()
    computes = {0: [50.0] * 30, 1: [52.0] * 30, 2: [48.0] * 30, 3: [90.0] * 30}
    steps(pacer, computes, nodes={0: 0, 1: 0, 2: 1, 3: 1})
    named = [(p.node, p.rank, round(p.slowdown, 1)) for p in pacer.paces() if p.straggles()]
    assert named == [(1, 3, 1.8)]


def test_a_rank_not_seen_at_a_collective_leaves_that_collective_out():
    pacer = Pacer()
    steps(pacer, {0: [50.0] * 20, 1: [100.0] * 20})
    pacer.add(2, {2: [[0, 19, 10**12]]})  # a third rank, seen at one collective only
    assert pacer.paces() == []  # no collective every rank was seen at twice in a row


def test_no_move_on_one_rank_s_word():
    """Among two ranks a slowdown is one rank's stamps against the other's: worth a move, only warned of."""
    assert straggler_price(2.0, 3600.0, 600.0, ranks=3).action == StragglerAction.RESTART_ELSEWHERE
    two = straggler_price(2.0, 3600.0, 600.0, ranks=2)
    assert two.action == StragglerAction.WARN and two.reason.endswith("not moving on one rank's word")
    assert straggler_price(2.0, 300.0, 600.0, ranks=2).action == StragglerAction.KEEP  # nothing to refuse


def test_a_skewed_clock_names_a_healthy_rank_but_moves_nothing_while_the_jobs_own_pace_holds():
    """Three ranks computing 100 ms a step; rank 1 stamps its arrivals 80 ms early (a clock off, or a lie). Its
    healthy peers look slow, and are named; but each rank's period, timed on its own clock, is the job's step as
    before: no move. A rank that really turns slow lengthens every rank's period: the move stands."""
    pacer = Pacer()
    steps(pacer, {0: [100.0] * 40, 1: [100.0] * 40, 2: [100.0] * 40})
    skewed = Pacer()
    for key, stamps in pacer.arrived.items():
        for rank, ns in stamps.items():
            skewed.add(rank, {rank: [[key[0], key[1], ns - 80 * MS if rank == 1 else ns]]})
    named = [p for p in skewed.paces() if p.straggles()]
    assert {p.rank for p in named} == {0, 2} and named[0].period == approx(0.101, abs=0.002)
    held = straggler_price(named[0].slowdown, 36000.0, 60.0, named[0].ranks, (named[0].period, named[0].before))
    assert held.action == StragglerAction.WARN, held
    assert held.reason.endswith("but it was slow from the first collectives seen, so the job's pace before it is not "
                                "known: not moving")

    turned = Pacer()
    steps(turned, {0: [100.0] * 60, 1: [100.0] * 30 + [200.0] * 30, 2: [100.0] * 60})
    [slow] = [p for p in turned.paces() if p.straggles()]
    assert (slow.rank, slow.period, slow.before) == (1, approx(0.201, abs=0.002), approx(0.101, abs=0.002))
    assert straggler_price(slow.slowdown, 36000.0, 60.0, slow.ranks, (slow.period, slow.before)).action == StragglerAction.RESTART_ELSEWHERE


def test_a_load_on_the_whole_machine_moves_no_one_a_skew_always_named():
    """Rank 1 stamps 80 ms early from the first collective, and only later a neighbour's load slows every rank's
    step by half: the pace worsened, but not when the named ranks turned slow, which they never did. A skewed rank's
    peers are slow since the first collectives seen, whenever they are named."""
    pacer = Pacer()
    steps(pacer, {rank: [60.0] * 40 + [90.0] * 40 for rank in range(3)})
    skewed = Pacer()
    for key, stamps in pacer.arrived.items():
        for rank, ns in stamps.items():
            skewed.add(rank, {rank: [[key[0], key[1], ns - 80 * MS if rank == 1 else ns]]})
    named = [p for p in skewed.paces() if p.straggles()]
    assert {p.rank for p in named} == {0, 2} and all(p.before == 0 and p.period > 1.25 * 0.061 for p in named), named
    assert all(straggler_price(p.slowdown, 36000.0, 60.0, p.ranks, (p.period, p.before)).action == StragglerAction.WARN
               for p in named)


def test_the_recorded_unperturbed_pair_kept_its_pace():
    steady = replayed("unperturbed")[-1][0]
    assert steady.before > 0 and steady.period < 1.1 * steady.before


def test_no_rank_is_read_as_more_than_a_hundred_times_slower():
    pacer = Pacer()
    steps(pacer, {0: [0.01] * 20, 1: [1000.0] * 20})
    assert max(p.slowdown for p in pacer.paces()) == 100.0


@pytest.mark.parametrize(
    ("slowdown", "remaining", "restart", "action"),
    [
        (2.0, 3600.0, 600.0, StragglerAction.RESTART_ELSEWHERE),  # an hour more, against 10 minutes
        (1.6, 1200.0, 600.0, StragglerAction.WARN),  # 720 s more: not clearly worth it
        (2.0, 300.0, 600.0, StragglerAction.KEEP),  # nearly done
        (2.0, None, 600.0, StragglerAction.WARN),
        (2.0, 3600.0, None, StragglerAction.WARN),
    ],
)
def test_the_action_is_priced_against_a_restart(slowdown, remaining, restart, action):
    price = straggler_price(slowdown, remaining, restart)
    assert price.action == action
    if remaining is None or restart is None:
        assert price.reason.startswith("cannot price it without ") and price.cost is None


def at(second: float) -> str:
    return f"2026-01-01T00:00:{second:06.3f}Z"


STRAGGLED = [
    {"time": at(0), "event": "agent_start", "node": 0},
    {"time": at(0), "event": "attempt_start", "node": 0, "attempt": 1},
    {"time": at(2), "event": "first_activity", "node": 0, "attempt": 1, "after": 2.0},
    {"time": at(14), "event": "straggler", "node": 1, "rank": 1, "score": 0.5, "slowdown": 2.0, "attempt": 1, "since": at(10),
     "collectives": 12, "action": "warn", "reason": "cannot price it without job.duration and reliability.restart_time"},
    {"time": at(30), "event": "attempt_exit", "node": 0, "cause": "success"},
    {"time": at(30), "event": "decision", "node": 0, "action": "success", "cause": "success"},
]


def test_fail_slow_time_is_badput_of_its_own():
    result = breakdown(STRAGGLED)
    # 20 s at half speed from the start of the window it was named on: 10 s is what the straggler added
    assert result.totals["fail_slow"] == approx(10) and result.totals["productive"] == approx(18)
    assert sum(result.totals.values()) == approx(result.wall)


def test_events_show_the_straggler_and_its_badput(tmp_path, cli):
    log = tmp_path / "events.jsonl"
    log.write_text("".join(json.dumps(event) + "\n" for event in STRAGGLED))
    result = cli("events", log)
    assert result.code == 0, result.err
    line = next(line for line in result.out.splitlines() if " straggler " in line)
    assert "node 1: rank 1 computes 2.0x as long as the others (score 0.5): warn" in line
    assert any(line.split()[:2] == ["fail-slow", "10.0s"] for line in result.out.splitlines())


def test_the_score_gauge_names_the_straggler(tmp_path):
    pytest.importorskip("prometheus_client")
    from prometheus_client import generate_latest

    from hacfg.agent.records.metrics import Metrics

    metrics = Metrics(STRAGGLED)
    text = generate_latest(metrics.registry).decode()
    assert 'hacfg_straggler_score{node="1",rank="1"} 0.5' in text
    assert 'hacfg_goodput_seconds{kind="fail_slow"} 10.0' in text


@pytest.mark.slow
@pytest.mark.parametrize(
    ("nodes", "faults"),
    [(3, ("slow:1:40",)), (3, ()), (2, ("slow:1:40",))],
    ids=["rank-1-twice-as-slow", "unperturbed", "two-ranks"],
)
def test_a_rank_with_twice_the_compute_is_named_and_moved_from_and_an_unperturbed_run_names_none(
    tmp_path, nodes, faults
):
    """Agents around train_ddp.py, one rank each; the scenario prices a move (10 hours left, 1-minute
    restarts): the straggler is named by node 0, and at the next checkpoint every node exits 138.
    With two ranks, each one's pace is the other's clock stamps alone: named, and only warned of.
    Steps of 0.1 s: a neighbour's load on a shared machine is small beside them, so the job's own
    pace (4 s of it before the fault) doubles as the straggler doubles it."""
    pytest.importorskip("torch")
    from kit.multinode import EVERY, TRAIN, Job

    config = tmp_path / "ha.yaml"
    config.write_text(
        f"version: 1\nscenario: multi-node\njob: {{nodes: {nodes}, accelerator: cpu, network: ethernet, duration: 10h}}\n"
        f"checkpoint: {{path: {tmp_path / 'ckpt'}, interval: 10m}}\nrestart: {{max: 3}}\n"
        "reliability: {restart_time: 1m}\n"
    )
    train = (str(TRAIN), "--ckpt", str(tmp_path / "ckpt"), "--out", str(tmp_path / "out"), "--steps", "80",
             "--every", str(EVERY), "--step-time", "0.1")
    job = Job(tmp_path, nodes, options=("--config", str(config), "--hang-timeout", "60s"), faults=faults, script=train)
    codes = job.run()
    named = [e for e in job.events(0) if e["event"] == "straggler"]
    if not faults:
        assert (codes, named) == (dict.fromkeys(range(nodes), 0), []), job.output(0)[-3000:]
        return
    if nodes == 2:  # a job only warned of runs on: the straggler may be named again later, and only warned of
        found = next((e for e in named if (e["node"], e["rank"]) == (1, 1)), None)
        assert found is not None and all(e["action"] == "warn" for e in named), named
        assert found["slowdown"] >= THRESHOLD and found["score"] <= 1 / THRESHOLD
        assert found["reason"].endswith("with 2 ranks, each one's pace rests on the other's clock stamps alone: "
                                        "not moving on one rank's word"), found
        assert codes == {0: 0, 1: 0}, job.output(0)[-3000:]
        return
    (found,) = named
    assert found["slowdown"] >= THRESHOLD and found["score"] <= 1 / THRESHOLD
    assert (found["node"], found["rank"], found["action"]) == (1, 1, "restart_elsewhere"), found
    assert codes == dict.fromkeys(range(nodes), 138), job.output(0)[-3000:]
    for node in range(nodes):
        (decision,) = job.decisions(node)
        assert (decision["cause"], decision["cause_node"], decision["action"]) == ("straggler", 1, "job_reschedule")
        assert decision["cause_reason"].startswith("straggler on node 1 rank 1: moving the job elsewhere after step ")


@pytest.mark.slow
def test_a_rank_whose_clock_runs_80_ms_early_among_three_moves_no_one(tmp_path):
    """Three agents around train_ddp.py, every rank computing alike; node 1's flight recorder stamps 80 ms early
    (tests/children/lying_recorder.py). Its healthy peers may be named, but the job's own pace holds: no move, and
    every node ends 0."""
    pytest.importorskip("torch")
    from kit.multinode import EVERY, TRAIN, Job

    config = tmp_path / "ha.yaml"
    config.write_text(
        "version: 1\nscenario: multi-node\njob: {nodes: 3, accelerator: cpu, network: ethernet, duration: 10h}\n"
        f"checkpoint: {{path: {tmp_path / 'ckpt'}, interval: 10m}}\nrestart: {{max: 3}}\nreliability: {{restart_time: 1m}}\n"
    )
    train = (str(CHILDREN / "lying_recorder.py"), "1", "80", "0", str(TRAIN), "--ckpt", str(tmp_path / "ckpt"), "--out", str(tmp_path / "out"),
             "--steps", "120", "--every", str(EVERY))
    job = Job(tmp_path, 3, options=("--config", str(config), "--hang-timeout", "60s"), script=train)
    assert job.run() == {0: 0, 1: 0, 2: 0}, job.output(0)[-3000:]
    named = [e for e in job.events(0) if e["event"] == "straggler"]
    assert named and {e["rank"] for e in named} <= {0, 2}, named  # the skew makes the others look slow
    # Slow from the first collectives seen (no pace before it to weigh), or, when a busy machine let
    # the peers' slow run begin later, slow while the job's pace held: a warning either way.
    held = ("it was slow from the first collectives seen, so the job's pace before it is not known: not moving",
            "the job's own pace has not worsened")
    for found in named:
        assert found["action"] == "warn" and any(why in found["reason"] for why in held), found


@pytest.mark.slow
def test_samples_meet_at_node_0_signed_and_a_forged_one_is_left_out(joined_pair):
    """Two real group members on a real TCPStore: node 1's signed sample reaches node 0; a value
    written under node 1's key by anyone else is not read."""
    leader, follower = joined_pair
    mine, theirs = {0: [["0 (gloo)", 7, 1000]]}, {1: [["0 (gloo)", 7, 2000]]}
    assert follower.pace(1, theirs) is None
    assert leader.pace(0, mine) == [(0, mine), (1, theirs)]
    follower.channel.store.set("r1/pace/1", json.dumps({"1": [["0 (gloo)", 7, 1]]}))  # unsigned
    assert leader.pace(0, mine) == [(0, mine)]


def test_the_flight_recorder_is_cut_to_what_the_hook_reads_unless_the_job_sized_it(tmp_path):
    from hacfg.agent.culprit import inquiry

    assert inquiry.armed({}, tmp_path)["TORCH_FR_BUFFER_SIZE"] == str(inquiry.RECORDED)
    assert inquiry.armed({"TORCH_NCCL_TRACE_BUFFER_SIZE": "20000"}, tmp_path).get("TORCH_FR_BUFFER_SIZE") is None
    assert inquiry.armed({"TORCH_FR_BUFFER_SIZE": "5000"}, tmp_path)["TORCH_FR_BUFFER_SIZE"] == "5000"


def test_a_sample_asks_only_the_living_among_the_pipes_it_finds(tmp_path):
    """Ranks are found from their pipes in the attempt's folder, not from all of /proc, every
    second: a rank that exited leaves its pipe behind, and is not waited for."""
    exited = subprocess.Popen(["true"])
    exited.wait()
    os.mkfifo(tmp_path / f"{exited.pid}.fifo")
    (tmp_path / "summary.json").write_text("{}")
    started, deadline = time.monotonic(), 30.0
    assert inquiry.arrivals(tmp_path, deadline=deadline) == {}
    assert time.monotonic() - started < deadline / 3, "waited for an exited rank's answer"
