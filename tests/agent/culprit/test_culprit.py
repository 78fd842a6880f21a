"""Naming the rank behind a hang: the analysis on evidence recorded from real gloo groups and on
synthetic summaries, and the hook and collector on real processes.

The recordings under tests/data/culprit/ are what ``inquiry.collect`` gathered from one emulated
node per rank of tests/children/gloo_ranks.py on CPU (torch 2.13, gloo), the last rank faulty:
``stuck`` before a collective, ``skip`` of one collective, ``stop`` by SIGSTOP, ``spin`` in a
pure-Python busy loop; ``size-2``, by bench/culprit.py, rank 0 all-reducing an empty tensor; and
``ddp-hang-2``, two agents around examples/resumable-training/train_ddp.py (torch 2.15, gloo), rank 1
made to hang at step 6 outside any collective, after DDP enqueued an all-reduce it had not waited for.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kit.paths import CHILDREN, REPO
from kit.processes import end, free_port

from hacfg.agent.culprit import hook, inquiry
from hacfg.agent.culprit.analysis import Attribution, NodeEvidence, RankEvidence, attribute

pytestmark = pytest.mark.torch  # the hook and evidence in real ranks, or what they recorded

RECORDED = REPO / "tests" / "data" / "culprit"


def recorded(name: str) -> list[NodeEvidence]:
    return [NodeEvidence.from_json(node) for node in json.loads((RECORDED / f"{name}.json").read_text())]


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("kind", ["stuck", "spin", "stop"])
def test_the_faulty_rank_is_named_from_recorded_evidence(kind, world):
    found = attribute(recorded(f"{kind}-{world}"), world).culprit
    assert found is not None and found.node == world - 1
    assert found.ranks in ((world - 1,), ())  # a stopped process cannot say its rank


def test_a_rank_behind_in_collectives_is_named_with_its_stack_top():
    found = attribute(recorded("stuck-2"), 2).culprit
    assert found is not None and found.ranks == (1,)
    assert "#6; the other ranks reached #7 (gloo:all_reduce)" in found.how
    assert found.stack[0].startswith("fault (") and "gloo_ranks.py" in found.stack[0]


def test_a_skipped_collective_among_four_ranks_names_the_odd_one():
    found = attribute(recorded("skip-4"), 4).culprit
    assert found is not None and found.node == 3 and "skipped collective" in found.how


def test_a_skipped_collective_between_two_ranks_is_named_by_the_jobs_rhythm():
    found = attribute(recorded("skip-2"), 2).culprit
    assert found is not None and (found.node, found.ranks) == (1, (1,))
    assert "waits in gloo:barrier where the job's collectives on process group 0, repeating every 5" in found.how


def test_a_rank_that_went_through_a_collective_alone_is_named_though_it_is_ahead():
    """Rank 0 all-reduced a tensor of no elements: gloo sent nothing, the call returned, and rank 0
    waits in #14 while rank 1 still waits in #13. The count alone would name rank 1 as behind."""
    found = attribute(recorded("size-2"), 2).culprit
    assert found is not None and (found.node, found.ranks) == (0, (0,))
    assert found.how.startswith("it completed collective #13 on process group 0 (gloo), which the other ranks still wait in")


def test_a_rank_behind_outside_any_collective_is_the_one_behind_whatever_it_saw_complete():
    """DDP enqueues its all-reduces and waits for them late: rank 1 hung in its own code before it
    saw #16 complete, which rank 0 did. Rank 1 is not inside #16: it is the one behind."""
    found = attribute(recorded("ddp-hang-2"), 2).culprit
    assert found is not None and (found.node, found.ranks) == (1, (1,)) and "is #16" in found.how


def test_without_completions_or_stacks_the_count_decides_as_before():
    inside = ("all_reduce (/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:3252)",)

    def waiting(number, seq, completed, stack=inside):
        return RankEvidence(number, 1000 + number, "sleeping", stack, {"0": seq}, "gloo:all_reduce", completed=completed)

    ahead = [NodeEvidence(0, (waiting(0, 14, {"0": 13}),)), NodeEvidence(1, (waiting(1, 13, {"0": 12}),))]
    assert attribute(ahead, 2).culprit.node == 0
    unknown = [NodeEvidence(0, (waiting(0, 14, None),)), NodeEvidence(1, (waiting(1, 13, None),))]
    assert attribute(unknown, 2).culprit.node == 1  # older summaries, or a recorder that keeps no completions
    stuck = [NodeEvidence(0, (waiting(0, 14, {"0": 13}),)), NodeEvidence(1, (waiting(1, 13, {"0": 13}),))]
    assert attribute(stuck, 2).culprit.node == 1  # rank 1 finished #13 and never reached #14
    unseen = [NodeEvidence(0, (waiting(0, 14, {"0": 13}),)), NodeEvidence(1, (waiting(1, 13, {"0": 12}, ()),))]
    assert attribute(unseen, 2).culprit.node == 1  # no stack: not known to be inside #13


INSIDE = ("all_reduce (/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:3252)",)
STUCK = ("fault (gloo_ranks.py:52)", "<module> (gloo_ranks.py:120)")


@pytest.mark.parametrize(("claimed", "completed"), [(14, {"0": 9}), (15, None)], ids=["completions-kept", "no-completions"])
def test_a_rank_that_claims_to_be_past_the_collective_its_peer_waits_in_is_not_believed(claimed, completed):
    """Rank 1 hung before #13 and says it enqueued #14 (or #15 where no completions are kept); rank 0 waits in
    #13, which cannot complete without rank 1. The count would name rank 0 as behind, as a fact: it names no
    one, and says whose record it set aside; a heartbeat that shows node 1 behind still names it."""
    waiting = RankEvidence(0, 1000, "sleeping", INSIDE, {"0": 13}, "gloo:all_reduce", completed={"0": 12} if completed else None)
    liar = RankEvidence(1, 1001, "sleeping", STUCK, {"0": claimed}, "gloo:all_reduce", completed=completed)
    found = attribute([NodeEvidence(0, (waiting,)), NodeEvidence(1, (liar,))], 2)
    assert found.culprit is None
    assert found.note == (f"rank 1 (node 1) says it reached #{claimed} on process group 0, past #13, which rank 0 (node 0) "
                          "still waits in: a collective completes only with every member, so its own record is not believed "
                          "and the counts name no one")
    stepped = attribute([NodeEvidence(0, (waiting,), step=40), NodeEvidence(1, (liar,), step=39)], 2)
    assert stepped.culprit is not None and stepped.culprit.node == 1 and "says it reached" in stepped.note
    honest = RankEvidence(1, 1001, "sleeping", STUCK, {"0": 12}, "gloo:all_reduce", completed={"0": 12} if completed else None)
    assert attribute([NodeEvidence(0, (waiting,)), NodeEvidence(1, (honest,))], 2).culprit.node == 1  # behind, as it says


def rank(number, *, seq=7, op="gloo:all_reduce", state="sleeping", stack=("all_reduce (d.py:10)", "<module> (t.py:5)")):
    return RankEvidence(number, 1000 + number, state, stack, {"0": seq} if seq is not None else None, op)


RHYTHM = ("gloo:all_reduce",) * 4 + ("gloo:barrier",)  # a step's collectives, as gloo_ranks.py calls them


def split(before: tuple[str, ...], zero: str, one: str) -> list[NodeEvidence]:
    """Two ranks at the same collective number, waiting in different ones after ``before``."""
    def waiting(number: int, op: str) -> RankEvidence:
        history = (*before, op)
        return RankEvidence(number, 1000 + number, "sleeping", (), {"0": len(history)}, op, {"0": history})

    return [NodeEvidence(0, (waiting(0, zero),)), NodeEvidence(1, (waiting(1, one),))]


@pytest.mark.parametrize("faulty", [0, 1])
def test_of_two_ranks_split_between_collectives_the_one_off_the_rhythm_is_named(faulty):
    """Twice over the rhythm calls all_reduce next: the rank in barrier skipped one, whichever it is."""
    ops = ["gloo:all_reduce", "gloo:all_reduce"]
    ops[faulty] = "gloo:barrier"
    found = attribute(split(RHYTHM * 2 + RHYTHM[:2], *ops), 2).culprit
    assert found is not None and (found.node, found.ranks) == (faulty, (faulty,))
    assert "call gloo:all_reduce: it skipped or added a collective" in found.how


@pytest.mark.parametrize(
    "before",
    [RHYTHM + RHYTHM[:3], ("gloo:all_reduce", "gloo:barrier", "gloo:broadcast")],
    ids=["seen-once", "no-rhythm"],
)
def test_of_two_ranks_split_without_a_rhythm_seen_twice_no_one_is_named(before):
    result = attribute(split(before, "gloo:all_reduce", "gloo:barrier"), 2)
    assert result.culprit is None and "neither a majority nor the job's repeating pattern shows whose" in result.note


def test_the_rhythm_counts_only_what_both_ranks_recorded_alike():
    """Rank 1's older entries differ (a different recorder window): the run both agree on is too
    short to show a rhythm, so no one is named."""
    nodes = split(RHYTHM * 2, "gloo:all_reduce", "gloo:barrier")
    other = ("gloo:broadcast",) * 6 + RHYTHM[1:] + ("gloo:barrier",)
    nodes[1] = NodeEvidence(1, (RankEvidence(1, 1001, "sleeping", (), {"0": 11}, "gloo:barrier", {"0": other}),))
    assert attribute(nodes, 2).culprit is None


def test_the_recorders_entries_give_each_groups_newest_run_of_collectives():
    entries = [
        {"process_group": ["0", "default_pg"], "collective_seq_id": 1, "profiling_name": "gloo:broadcast"},
        {"process_group": ["0", "default_pg"], "collective_seq_id": 3, "profiling_name": "gloo:all_reduce"},
        {"process_group": ["1", "tp"], "collective_seq_id": 7, "profiling_name": "gloo:all_gather"},
        {"process_group": ["0", "default_pg"], "collective_seq_id": 4, "profiling_name": "gloo:barrier"},
        {"process_group": ["0", "default_pg"], "collective_seq_id": 0, "is_p2p": True, "profiling_name": "gloo:send"},
    ]
    status = {"0": {"last_enqueued_collective": "4"}, "1": {"last_enqueued_collective": "7"}}
    counts, last, history = inquiry._collectives({"gloo": {"pg_status": status, "entries": entries}})
    assert counts == {"0 (gloo)": 4, "1 (gloo)": 7} and last == "gloo:send"
    assert history == {"0 (gloo)": ("gloo:all_reduce", "gloo:barrier"), "1 (gloo)": ("gloo:all_gather",)}  # #2 missing


def test_a_group_two_backends_serve_is_two_groups_and_the_newest_entry_is_the_last_op():
    """``cpu:gloo,cuda:nccl`` (init_process_group's default on a GPU machine): gloo and NCCL number
    their collectives apart, each in its own recorder, under the same process group."""
    def entry(seq, name, ns):
        return {"process_group": ["0", "default_pg"], "collective_seq_id": seq, "profiling_name": name, "time_created_ns": ns}

    recorders = {
        "gloo": {"pg_status": {"0": {"last_enqueued_collective": 2}}, "entries": [entry(2, "gloo:barrier", 50)]},
        "nccl": {"pg_status": {"0": {"last_enqueued_collective": 90}}, "entries": [entry(90, "nccl:all_reduce", 40)]},
    }
    counts, last, history = inquiry._collectives(recorders)
    assert counts == {"0 (gloo)": 2, "0 (nccl)": 90} and last == "gloo:barrier"
    assert history == {"0 (gloo)": ("gloo:barrier",), "0 (nccl)": ("nccl:all_reduce",)}


def test_a_node_that_sent_nothing_leaves_the_culprit_unknown():
    result = attribute([NodeEvidence(0, (rank(0),))], 2)
    assert result == Attribution(None, "no evidence from node 1 before the deadline")


def test_a_stopped_rank_is_named_even_when_another_node_is_silent():
    found = attribute([NodeEvidence(1, (rank(1, state="stopped", seq=None),))], 2).culprit
    assert found is not None and found.node == 1 and "stopped" in found.how


def test_a_rank_without_a_count_keeps_the_lag_from_naming_anyone():
    nodes = [NodeEvidence(0, (rank(0), rank(1, seq=6))), NodeEvidence(1, (rank(2, seq=None),))]
    note = "rank 2 on node 1 did not report its collectives before the deadline, and may be the one behind"
    assert attribute(nodes, 2) == Attribution(None, note)


def test_ranks_behind_on_two_nodes_name_no_single_node():
    nodes = [NodeEvidence(0, (rank(0, seq=6), rank(1))), NodeEvidence(1, (rank(2, seq=6), rank(3)))]
    result = attribute(nodes, 2)
    assert result.culprit is None and "several nodes" in result.note


def test_the_outlier_stack_names_a_rank_when_collectives_agree():
    odd = rank(3, stack=("load (data.py:40)", "<module> (t.py:3)"))
    nodes = [NodeEvidence(0, (rank(0), rank(1, stack=("all_reduce (d.py:10)", "<module> (t.py:9)")))),
             NodeEvidence(1, (rank(2), odd))]
    found = attribute(nodes, 2).culprit
    assert found is not None and (found.node, found.ranks) == (1, (3,)) and "stack differs" in found.how


def test_the_oldest_step_names_a_node_when_nothing_else_does():
    nodes = [NodeEvidence(0, (rank(0),), step=40), NodeEvidence(1, (rank(1),), step=39)]
    found = attribute(nodes, 2).culprit
    assert found is not None and found.node == 1 and "last reported step is 39" in found.how


def test_identical_evidence_names_no_one():
    result = attribute([NodeEvidence(0, (rank(0),), 5), NodeEvidence(1, (rank(1),), 5)], 2)
    assert result.culprit is None and "same collective" in result.note


def test_a_summary_survives_its_trip_through_json():
    node = recorded("stuck-4")[3]
    assert NodeEvidence.from_json(json.loads(json.dumps(node.to_json()))) == node


def armed_child(tmp_path, code):
    """A Python process armed as the agent arms its command, one rank of a job (``RANK=0``)."""
    folder = inquiry.folder_for(tmp_path / "state", 1)
    env = inquiry.armed({**os.environ, "RANK": "0"}, folder)
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    except BaseException:
        end(proc)
        raise
    return proc, folder


RANK = """
import time, torch, torch.distributed as dist
{start}
for _ in range(3):
    dist.all_reduce(torch.ones(2))
{then}
print('ready', flush=True)
time.sleep(60)
"""


def asked(tmp_path, start, then=""):
    """What the hook of a one-rank job, three all-reduces in (and ``then``), said: its arrivals, its
    answer to a hang's question and its evidence."""
    proc, folder = armed_child(tmp_path, RANK.format(start=start, then=then))
    try:
        arrived = inquiry.arrivals(folder, deadline=30)
        answer = inquiry.ask(folder, [proc.pid], time.monotonic() + 30)[proc.pid]
        found = inquiry.collect(proc.pid, folder, node=0, step=None)
    finally:
        end(proc)
    (only,) = found.ranks
    return arrived, answer, only


def forged(pid: int) -> bytes:
    """An answer for ``pid`` another process of the same user made up: its rank far ahead."""
    status = {"0": {"last_enqueued_collective": "99", "last_completed_collective": "99"}}
    return json.dumps({"pid": pid, "taken": time.time(), "rank": 0, "question": "0" * 16,
                       "flight_recorders": {"gloo": {"pg_status": status, "entries": []}}}).encode()


@pytest.mark.torch
def test_an_answer_written_over_by_another_process_is_seen_and_not_believed(tmp_path):
    """The agent reads a rank's answer from a pipe it holds: a forged answer beside the rank's own is a
    second answer, and neither is believed; the summary says why. Without the forger, the rank's own is."""
    start = f"dist.init_process_group('gloo', init_method='tcp://127.0.0.1:{free_port()}', rank=0, world_size=1)"
    proc, folder = armed_child(tmp_path, RANK.format(start=start, then=""))
    try:
        honest = inquiry.ask(folder, [proc.pid], time.monotonic() + 30)[proc.pid]
        forger = os.open(folder / f"{proc.pid}.answer", os.O_RDWR | os.O_NONBLOCK)  # needs no reader to open
        os.write(forger, forged(proc.pid))  # waits in the pipe for the agent's next question
        try:
            doubted = inquiry.collect(proc.pid, folder, node=0, step=None)
        finally:
            os.close(forger)
    finally:
        end(proc)
    assert isinstance(honest, dict) and honest["pid"] == proc.pid and honest["rank"] == 0
    (rank,) = doubted.ranks
    assert rank.collectives is None and rank.doubt == (
        "its answer was written over: more than one answer to this question came through its pipe")
    peer = NodeEvidence(1, (RankEvidence(1, 1001, "sleeping", INSIDE, {"0 (gloo)": 3}, "gloo:all_reduce"),))
    verdict = attribute([doubted, peer], 2)  # its count unknown: no count names anyone, and the note says why
    assert verdict.culprit is None and verdict.note.startswith("rank 0 on node 0: its answer was written over"), verdict


@pytest.mark.parametrize("claimed", ["1", True, -3, 1.5, [0]])
def test_an_answer_whose_rank_is_no_rank_number_makes_no_rank(tmp_path, claimed):
    assert inquiry._rank(tmp_path, os.getpid(), 0, {"pid": os.getpid(), "rank": claimed}) is None
    assert inquiry._rank(tmp_path, os.getpid(), 0, {"pid": os.getpid(), "rank": 3}).rank == 3


def test_a_late_answer_to_an_earlier_question_beside_the_answer_is_no_forgery():
    late, now = ({"pid": 7, "question": question, "taken": 1.0} for question in ("a" * 16, "b" * 16))
    said = (json.dumps(late) + json.dumps(now)).encode()
    assert inquiry._believed(said, 7, "b" * 16, {"a" * 16, "b" * 16}) == now
    assert inquiry._believed(said, 7, "b" * 16, {"b" * 16}).startswith("its answer was written over")
    assert inquiry._believed(json.dumps(now).encode(), 8, "b" * 16, {"b" * 16}).startswith("its pipe carried another")
    odd = (json.dumps({**late, "question": [[]]}) + json.dumps(now)).encode()  # a question no set can hold
    assert inquiry._believed(odd, 7, "b" * 16, {"a" * 16, "b" * 16}).startswith("its answer was written over")


@pytest.mark.torch
def test_every_flight_recorder_the_installed_torch_keeps_is_read(tmp_path):
    """A CUDA build of torch keeps NCCL's recorder beside the generic one gloo records into; the
    collectives of a gloo group are in the second, whichever the first holds."""
    from torch._C import _distributed_c10d as c10d

    start = f"dist.init_process_group('gloo', init_method='tcp://127.0.0.1:{free_port()}', rank=0, world_size=1)"
    arrived, answer, only = asked(tmp_path, start)
    expected = {"gloo"} | ({"nccl"} if hasattr(c10d, "_dump_nccl_trace_json") else set())
    assert set(answer["flight_recorders"]) == expected and only.recorders == tuple(sorted(expected))
    assert only.stack_by == ("the rank" if only.stack else None)
    assert only.collectives == {"0 (gloo)": 3} and only.last_op == "gloo:all_reduce"
    assert [entry[:2] for entry in arrived[0]] == [["0 (gloo)", n] for n in (1, 2, 3)]


@pytest.mark.torch
def test_a_backend_torch_records_through_its_hook_is_read_under_its_own_name(tmp_path):
    """``FlightRecorderHook.attach`` records any backend's collectives into the generic recorder
    (torch 2.14); from torch 2.15 that recorder is kept per backend and read by its name."""
    from torch._C import _distributed_c10d as c10d

    if not hasattr(c10d, "FlightRecorderHook"):
        pytest.skip("this torch has no FlightRecorderHook")
    start = (
        "from torch.testing._internal.distributed.fake_pg import FakeStore\n"
        "dist.init_process_group('fake', store=FakeStore(), rank=0, world_size=2)\n"
        "hooked = torch._C._distributed_c10d.FlightRecorderHook.attach(dist.group.WORLD)"
    )
    arrived, answer, only = asked(tmp_path, start)
    assert "fake" in answer["flight_recorders"] and only.collectives is not None
    assert "0 (fake)" in only.collectives and only.last_op == "fake:all_reduce"
    assert only.history is not None and only.history["0 (fake)"] == ("fake:all_reduce",) * 3
    assert [entry[:2] for entry in arrived[0]] == [["0 (fake)", n] for n in (1, 2, 3)]


STANDINS = REPO / "tests" / "data" / "standins"  # modules this machine cannot install: torch_npu's recorder


@pytest.mark.torch
@pytest.mark.parametrize("ring", [None, "2"])
def test_torch_npus_hccl_recorder_is_sized_and_read_beside_torchs(tmp_path, monkeypatch, ring):
    """torch_npu keeps HCCL's recorder apart from torch's, empty unless TORCH_HCCL_TRACE_BUFFER_SIZE
    sizes it: the agent sizes it unless the job did, and the hook reads it once the script has
    imported torch_npu. No NPU here: a stand-in with torch_npu's dump function and JSON."""
    from torch._C import _distributed_c10d as c10d

    if ring is not None:
        monkeypatch.setenv("TORCH_HCCL_TRACE_BUFFER_SIZE", ring)
    start = f"dist.init_process_group('gloo', init_method='tcp://127.0.0.1:{free_port()}', rank=0, world_size=1)"
    then = f"time.sleep(0.01); sys.path.insert(0, {str(STANDINS)!r}); import torch_npu"  # HCCL's are the newest
    arrived, answer, only = asked(tmp_path, start, then=f"import sys\n{then}")
    assert set(answer["flight_recorders"]) == {"gloo", "hccl"} | ({"nccl"} if hasattr(c10d, "_dump_nccl_trace_json") else set())
    # torch_npu names the group group_name_0 in its entries and keys its status by id (0): one group here
    assert only.collectives is not None and only.completed is not None
    assert (only.collectives["group_name_0 (hccl)"], only.completed["group_name_0 (hccl)"]) == (3, 2)
    assert only.last_op == "gloo:all_reduce"  # HCCL's entries name no collective: the newest that does
    hccl = [entry[:2] for entry in arrived[0] if entry[0].endswith("(hccl)")]
    kept = 3 if ring is None else 2  # the job's own size wins
    assert hccl == [["group_name_0 (hccl)", n] for n in (1, 2, 3)][-kept:]


def test_the_hccl_recorder_is_sized_unless_the_job_sized_it(tmp_path):
    assert inquiry.armed({}, tmp_path)["TORCH_HCCL_TRACE_BUFFER_SIZE"] == str(inquiry.RECORDED)
    assert inquiry.armed({"TORCH_HCCL_TRACE_BUFFER_SIZE": "2000"}, tmp_path)["TORCH_HCCL_TRACE_BUFFER_SIZE"] == "2000"


def test_a_recorder_reached_through_its_backend_object_is_read_too():
    """XCCL's recorder (XPU builds) is dumped through the backend of a process group, not a function
    of torch's: a stand-in for the group (no XPU here) shows it is found and named by its backend."""
    from types import SimpleNamespace

    trace = {"pg_status": {"0": {"last_enqueued_collective": 5}}, "entries": [{"process_group": ["0", ""]}]}

    class Xccl:
        def _dump_xccl_trace_json(self, includeCollectives, onlyActive):  # torch's keyword names
            return json.dumps(trace)

    class Group:
        group_name, _device_types = "0", ("xpu",)

        def _get_backend(self, device):
            return Xccl()

    group = Group()
    dist = SimpleNamespace(distributed_c10d=SimpleNamespace(_world=SimpleNamespace(pg_map={group: ("xccl", None)})),
                           get_backend=lambda g: "xccl")
    found = dict(hook._recorders(dist))
    assert "xccl" in found and json.loads(found["xccl"]()) == trace
    assert hook._owners(dist, "xccl", trace) == {"xccl": {"0"}}


def test_the_hook_dumps_a_busy_loop_that_holds_the_gil(tmp_path):
    proc, folder = armed_child(tmp_path, "def spin():\n    print('ready', flush=True)\n    while True: pass\nspin()")
    try:
        found = inquiry.collect(proc.pid, folder, node=0, step=None)
    finally:
        end(proc)
    (only,) = found.ranks
    assert (only.rank, only.pid, only.state) == (0, proc.pid, "running") and only.stack[0] == "spin (<string>:3)"
    assert only.collectives is None  # no torch.distributed in this process: no counts, not zero counts
    assert json.loads((folder / inquiry.SUMMARY).read_text()) == found.to_json()


def test_a_stopped_process_is_seen_stopped_and_not_signalled(tmp_path):
    proc, folder = armed_child(tmp_path, "import time\nprint('ready', flush=True)\ntime.sleep(60)")
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        found = inquiry.collect(proc.pid, folder, node=0, step=None)
        assert os.waitpid(proc.pid, os.WNOHANG) == (0, 0)  # still there: nothing sent it a fatal signal
    finally:
        end(proc)
    assert [(r.pid, r.state, r.stack) for r in found.ranks] == [(proc.pid, "stopped", ())]


def test_py_spy_gives_a_stopped_rank_the_stack_it_cannot_write(tmp_path):
    py_spy = shutil.which("py-spy", path=os.path.dirname(sys.executable))
    if py_spy is None:
        pytest.skip("py-spy is not installed beside this Python (pip install py-spy)")
    proc, folder = armed_child(tmp_path, "import time\ndef wait():\n    print('ready', flush=True)\n    time.sleep(60)\nwait()")
    os.kill(proc.pid, signal.SIGSTOP)
    os.waitpid(proc.pid, os.WUNTRACED)  # stopped before it is asked: a rank asked first spends the deadline
    try:
        found = inquiry.collect(proc.pid, folder, node=0, step=None, py_spy=py_spy)
    finally:
        end(proc)
    (only,) = found.ranks
    assert only.state == "stopped" and only.stack[-1] == "<module> (<string>:5)" and only.stack_by == "py-spy"
    assert only.stack[0] in ("wait (<string>:3)", "wait (<string>:4)")  # stopped in its print, or after
    assert (folder / f"{proc.pid}.py-spy").read_text().startswith(f"Process {proc.pid}: ")


def test_py_spy_asked_for_where_there_is_none_is_one_line_and_exit_2(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # nothing beside it either
    result = cli("agent", "--py-spy", "--state-dir", tmp_path / "state", "--", "true")
    assert result.code == 2 and result.err.splitlines() == [
        "hacfg: error: --py-spy: no py-spy on PATH or beside this Python (pip install py-spy)"
    ]


def test_an_unarmed_process_is_left_alone(tmp_path):
    folder = inquiry.folder_for(tmp_path / "state", 1)
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert inquiry.collect(proc.pid, folder, node=0, step=None).ranks == ()
        assert proc.poll() is None
    finally:
        end(proc)


def test_a_worker_a_launcher_started_in_a_session_of_its_own_is_asked_too(tmp_path):
    """torch's elastic agent starts each worker with ``start_new_session=True`` (its
    SubprocessHandler), so the attempt's session holds torchrun but not the ranks."""
    folder = inquiry.folder_for(tmp_path / "state", 1)
    worker = "def work():\n    print('ready', flush=True)\n    while True: pass\nwork()"
    launcher = (
        "import os, subprocess, sys, time\n"
        f"w = subprocess.Popen([sys.executable, '-c', {worker!r}], env={{**os.environ, 'RANK': '3'}}, start_new_session=True)\n"
        "print(w.pid, flush=True)\ntime.sleep(60)"
    )
    env = inquiry.armed({k: v for k, v in os.environ.items() if k != "RANK"}, folder)
    proc = subprocess.Popen([sys.executable, "-c", launcher], env=env, start_new_session=True, stdout=subprocess.PIPE)
    worker_pid = None
    try:
        assert proc.stdout is not None
        worker_pid = int(proc.stdout.readline())
        assert proc.stdout.readline() == b"ready\n"  # the worker's, through the launcher's stdout
        found = inquiry.collect(proc.pid, folder, node=0, step=None)
    finally:
        if worker_pid is not None:
            os.kill(worker_pid, signal.SIGKILL)
        end(proc)
    (only,) = found.ranks  # the launcher armed itself too, but is no rank
    assert (only.rank, only.pid, only.stack[:1]) == (3, worker_pid, ("work (<string>:3)",))


def test_the_hook_stays_off_without_its_folder_and_keeps_a_users_sitecustomize(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import builtins\nbuiltins.THEIRS = True\n")
    code = "import builtins, sys; print(getattr(builtins, 'THEIRS', False), '_hacfg_evidence' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": f"{inquiry.SITE}{os.pathsep}{tmp_path}"}
    env.pop(hook.ENV, None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out == "True True\n"
    assert not list(tmp_path.glob("*.fifo"))


def test_only_the_newest_attempts_keep_their_evidence(tmp_path):
    for attempt in range(1, 6):
        inquiry.folder_for(tmp_path, attempt)
    kept = sorted(p.name for p in (tmp_path / inquiry.FOLDER).iterdir())
    assert kept == [f"attempt-{n}" for n in range(6 - inquiry.KEEP, 6)]


def gloo_pair(tmp_path: Path, kind: str, *, wrap: tuple[str, ...] = (), named: bool = True) -> Attribution:
    """Two real gloo ranks, each armed as on a node of its own, rank 1 misbehaving (``kind``), its command run
    under ``wrap``: the verdict once the ranks stand still, the same twice 0.2 s apart (naming someone, if
    ``named``)."""
    procs, port = [], str(free_port())
    for number in range(2):
        folder = inquiry.folder_for(tmp_path / f"node-{number}", 1)
        env = inquiry.armed({**os.environ}, folder)
        argv = [str(CHILDREN / "gloo_ranks.py"), str(number), "2", port, kind, "1"]
        argv = [*wrap, *argv] if number == 1 else argv
        procs.append((subprocess.Popen([sys.executable, *argv], env=env, start_new_session=True, stdout=subprocess.PIPE), folder))
    try:
        for line in procs[1][0].stdout:
            if line == f"rank 1 fault {kind}\n".encode():
                break
        result, before = Attribution(None, ""), None
        for _ in range(100):
            result = attribute([inquiry.collect(p.pid, f, n, None) for n, (p, f) in enumerate(procs)], 2)
            if result == before and (result.culprit is not None or not named):
                break
            before = result
            time.sleep(0.2)
    finally:
        for proc, _ in procs:
            end(proc)
    return result


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["stuck", "skip"])
def test_a_real_gloo_group_names_the_rank_stuck_before_its_collective_or_that_skipped_one(tmp_path, kind):
    result = gloo_pair(tmp_path, kind)
    assert result.culprit is not None and (result.culprit.node, result.culprit.ranks) == (1, (1,))


@pytest.mark.slow
@pytest.mark.parametrize("ahead", [0, 2])
def test_a_real_gloo_rank_stuck_before_its_collective_that_claims_to_be_past_it_frames_no_one(tmp_path, ahead):
    """Rank 1 stuck before its collective, its recorder numbering every collective ``ahead`` further on
    (tests/children/lying_recorder.py): rank 0 is not named for it. Told the truth, rank 1 is named."""
    result = gloo_pair(tmp_path, "stuck", wrap=(str(CHILDREN / "lying_recorder.py"), "all", "0", str(ahead)), named=not ahead)
    if ahead:
        assert result.culprit is None and "rank 1 (node 1) says it reached #" in result.note, result
    else:
        assert result.culprit is not None and (result.culprit.node, result.culprit.ranks) == (1, (1,)), result


JOB = RECORDED / "job"  # the state folders of a real two-node run of train_ddp.py --fault hang:1:6:1


def test_events_say_the_culprit_in_words_with_its_stack_top(cli):
    result = cli("events", *sorted(JOB.glob("node-*/events.jsonl")))
    decisions = [line for line in result.out.splitlines() if " decision " in line and "hang on node" in line]
    assert len(decisions) == 2  # one per node, the same verdict
    assert all("the hang's culprit is node 1 rank 1: its newest collective on process group 0 is #16" in line for line in decisions)
    assert all(line.endswith("stack top: fire (/work/wt/culprit/examples/resumable-training/train_ddp.py:132)") for line in decisions)


def test_diagnose_reads_the_evidence_the_agents_kept(cli):
    result = cli("diagnose", JOB)
    lines = result.out.splitlines()
    assert result.code == 0 and lines[0].startswith(f"{JOB}: attempt-1: the hang's culprit is node 1 rank 1: ")
    assert "  node 0 rank 0: sleeping, pid 11003, collective #18 on group 0, gloo:all_reduce" in lines
    assert lines[lines.index("  node 1 rank 1: sleeping, pid 11005, collective #16 on group 0, gloo:all_reduce") + 1].startswith("    fire (")


def test_diagnose_says_which_recorders_each_rank_was_read_from(cli, tmp_path):
    for report in recorded("size-2"):  # each node's summary in its own state folder, as the agents keep them
        folder = tmp_path / f"node-{report.node}" / inquiry.FOLDER / "attempt-1"
        folder.mkdir(parents=True)
        (folder / inquiry.SUMMARY).write_text(json.dumps(report.to_json()))
    lines = cli("diagnose", tmp_path).out.splitlines()
    assert "  node 0 rank 0: sleeping, pid 19884, collective #14 on group 0 (gloo), gloo:all_reduce, recorders read: gloo" in lines


def test_diagnose_says_who_saw_what_of_each_rank(cli, tmp_path):
    """The state is the agent's own look at /proc; a stack is py-spy's from outside or the rank's own; an answer
    set aside says why."""
    folder = tmp_path / "node-0" / inquiry.FOLDER / "attempt-1"
    folder.mkdir(parents=True)
    spied = RankEvidence(0, 100, "stopped", ("wait (t.py:3)",), stack_by="py-spy")
    doubted = RankEvidence(1, 101, "sleeping", ("step (t.py:9)",), stack_by="the rank", doubt="its answer was written over")
    (folder / inquiry.SUMMARY).write_text(json.dumps(NodeEvidence(0, (spied, doubted)).to_json()))
    lines = cli("diagnose", tmp_path).out.splitlines()
    assert "  node 0 rank 0: stopped, pid 100, stack read by py-spy" in lines
    assert "  node 0 rank 1: sleeping, pid 101, stack read by the rank, not believed: its answer was written over" in lines


def test_diagnose_of_a_folder_without_evidence_is_one_line_and_exit_2(cli, tmp_path):
    result = cli("diagnose", tmp_path)
    assert result.code == 2 and result.err.strip().endswith("no hang evidence (evidence/attempt-N/summary.json) under it")


@pytest.mark.slow
def test_a_single_node_hang_names_its_only_rank_with_its_stack(tmp_path):
    """With the frame it hangs in, unless the stack came after the deadline: a CPU-bound machine (the suite on
    two cores) can delay a dump, and the verdict then leaves it out rather than wait."""
    from kit.agents import agent, read_events

    result = agent(tmp_path, "--hang-timeout", "1s", "--initial-hang-timeout", "30s", child="silent.py", env={"RANK": "0"})
    (decision,) = [e for e in read_events(tmp_path / "state") if e["event"] == "decision"]
    culprit = decision["culprit"]
    assert (culprit["node"], culprit["ranks"], culprit["how"]) == (0, [0], "the job's only rank")
    assert "the hang's culprit is node 0 rank 0" in result.stderr
    assert not culprit["stack"] or "silent.py" in culprit["stack"][-1], culprit
    assert (tmp_path / "state" / "evidence" / "attempt-1" / inquiry.SUMMARY).exists()


@pytest.mark.slow
def test_stopping_counts_from_the_stop_signal_and_the_evidence_gathered_before_it_is_its_own_figure(tmp_path):
    """A rank in C code that holds the GIL (a regular expression backtracking) keeps its hook's
    thread from answering: the evidence waits for it until its deadline, and only then is the stop
    signal sent, which ends the rank at once."""
    from kit.agents import agent, read_events

    child = tmp_path / "holds_the_gil.py"
    child.write_text("import re\nprint('started', flush=True)\nre.match(r'(a+)+$', 'a' * 64 + 'b')\n")
    result = agent(tmp_path, "--hang-timeout", "1s", "--initial-hang-timeout", "30s", child=str(child), env={"RANK": "0"})
    (ended,) = [e for e in read_events(tmp_path / "state") if e["event"] == "attempt_exit"]
    assert ended["gathering"] >= inquiry.DEADLINE / 2 > ended["stopping"], result.stderr


@pytest.mark.slow
def test_with_py_spy_a_stopped_ranks_verdict_carries_its_stack(tmp_path):
    from kit.agents import agent, read_events

    if shutil.which("py-spy", path=os.path.dirname(sys.executable)) is None:
        pytest.skip("py-spy is not installed beside this Python (pip install py-spy)")
    options = ("--hang-timeout", "2s", "--initial-hang-timeout", "120s", "--grace", "1", "--py-spy")
    result = agent(tmp_path, *options, child="gloo_ranks.py", args=(0, 1, free_port(), "stop", 0), timeout=240)
    (decision,) = [e for e in read_events(tmp_path / "state") if e["event"] == "decision"]
    culprit = decision["culprit"]
    assert culprit["how"].startswith("its process is stopped"), result.stderr
    assert culprit["stack"][0].startswith("fault (") and "gloo_ranks.py" in culprit["stack"][0]


def test_a_hangs_node_is_its_culprits_whichever_detector_fired_first(tmp_path, cli):
    """Every rank goes quiet when one hangs: node 0's detector fired first here, but the hung rank is
    on node 1; with no culprit, the decision does not name a node either."""
    from hacfg.agent.records.events import EventLog
    from hacfg.agent.rounds import Verdict, with_culprit
    from hacfg.restart.policy import Budgets
    from hacfg.restart.vocabulary import Action, Ending, Event

    hang = Verdict(round=1, cause=Ending.HANG, reason="hang", rank=0, action=Action.PROC_RESTART, detail="", budgets=Budgets())
    named = with_culprit(hang, recorded("stuck-2"), 2)
    assert named.culprit is not None and named.rank == named.culprit.node == 1
    unknown = with_culprit(hang, recorded("stuck-2")[:1], 2)
    assert (unknown.culprit, unknown.rank) == (None, None)
    log = EventLog(tmp_path / "events.jsonl", node=0)
    log.write(Event.DECISION, round=1, cause="hang", cause_node=None, action="proc_restart", reason="restart",
              culprit=None, culprit_note=unknown.culprit_note)
    shown = cli("events", tmp_path / "events.jsonl").out
    assert "proc_restart: restart (round 1, hang); the hang's culprit is unknown: no evidence from node 1" in shown


@pytest.mark.slow
def test_evidence_that_fails_its_check_leaves_its_node_unknown_and_says_so(joined_pair):
    """Two real group members on a real TCPStore: node 1's signed summary is read, a value written
    under node 0's key by anyone else is not, and the verdict says why node 0 is unknown."""
    from hacfg.agent.rounds import Verdict, with_culprit
    from hacfg.restart.policy import Budgets
    from hacfg.restart.vocabulary import Action, Ending

    leader, follower = joined_pair
    node1 = recorded("stuck-2")[1]
    follower.testimony.testify(follower.channel.store, 1, lambda: node1)
    follower.channel.store.set("r1/evidence/0", json.dumps(recorded("stuck-2")[0].to_json()))  # unsigned
    reports, refused = leader.testimony.evidence(1)
    assert reports == [node1] and refused == ["node 0's evidence was refused (not a signed value)"]
    hang = Verdict(round=1, cause=Ending.HANG, reason="hang", rank=0, action=Action.PROC_RESTART, detail="", budgets=Budgets())
    judged = with_culprit(hang, reports, 2, refused)
    assert judged.culprit is None
    assert judged.culprit_note == "no evidence from node 0 before the deadline; node 0's evidence was refused (not a signed value)"


@pytest.mark.slow
def test_the_second_asker_of_a_nodes_evidence_waits_until_it_is_sent(joined_pair):
    """A node's own detector and its monitor (seeing another node end the round) both ask for its
    evidence; whichever comes second goes on to stop the workers, so it must not return while
    the first is still asking them."""

    _, follower = joined_pair
    inside, second_done, seen = threading.Event(), threading.Event(), []

    def slow_witness():
        inside.set()
        second_done.wait(3)  # over at once when the second asker does not wait for this one
        return recorded("stuck-2")[1]

    def second():
        follower.testimony.testify(follower.channel.store.clone(), 1, lambda: recorded("stuck-2")[1])
        seen.append(follower.channel.store.check(["r1/evidence/1"]))  # what it would stop the workers on
        second_done.set()

    first = threading.Thread(target=follower.testimony.testify, args=(follower.channel.store, 1, slow_witness))
    first.start()
    inside.wait()
    asker = threading.Thread(target=second)
    asker.start()
    first.join()
    asker.join()
    assert seen == [True]


@pytest.mark.slow
def test_a_warm_attempt_is_armed_as_a_cold_one(tmp_path):
    """Attempt 1 starts cold and hangs once the warm interpreter is ready; attempt 2 is forked from
    it and hangs too: in both, the rank's hook answers and the verdict names the rank, with the frame
    it hangs in unless the stack came after the deadline (a CPU-bound machine can delay a dump; the
    verdict then leaves it out rather than wait)."""
    from kit.agents import agent, read_events

    ready_then = CHILDREN / "warm" / "ready_then.py"
    options = ("--hang-timeout", "2s", "--initial-hang-timeout", "120s", "--hang-retry", "--grace", "2")
    result = agent(tmp_path, *options, child=str(ready_then), args=(CHILDREN / "hang_until_third.py",),
                   env={"RANK": "0"}, timeout=240)
    found = read_events(tmp_path / "state")
    assert [e["start"] for e in found if e["event"] == "attempt_start"][:2] == ["cold", "warm"], result.stderr
    hangs = [e for e in found if e["event"] == "decision" and e["cause"] == "hang"]
    assert len(hangs) == 2
    for decision in hangs:
        folder = tmp_path / "state" / inquiry.FOLDER / f"attempt-{decision['attempt']}"
        pipes = sorted(path.name.split(".")[1] for path in folder.iterdir() if path.is_fifo())
        assert pipes == ["answer", "fifo"], pipes  # armed: one process, its hook's pipes made
        assert decision["culprit"]["ranks"] == [0], decision
        if decision["culprit"]["stack"]:
            assert decision["culprit"]["stack"][0].startswith("wait_here ("), decision


@pytest.mark.parametrize("state", ["gone", "zombie"])
def test_a_rank_that_exited_before_it_was_asked_leaves_the_culprit_unknown_and_says_where(state):
    nodes = [NodeEvidence(0, (rank(0, seq=16),)), NodeEvidence(1, (RankEvidence(None, 1001, state),))]
    assert attribute(nodes, 2) == Attribution(None, "a process on node 1 exited before it could be asked")


def test_a_rank_stopped_before_its_node_asked_it_is_said_to_have_exited():
    """Recorded by the benchmark: node 1's rank was a zombie when its agent asked, stopped by the
    agent's own monitor while its main thread still asked (each node now asks before any stop)."""
    result = attribute(recorded("exited-2"), 2)
    assert result == Attribution(None, "a process on node 1 exited before it could be asked")


def test_a_rank_outside_a_subgroup_is_not_behind_in_it():
    def member(number, counts):
        return RankEvidence(number, 1000 + number, "sleeping", (), counts, "gloo:all_reduce")

    # ranks 0 and 1 form subgroup "1", where rank 1 is behind; rank 2 is not in it at all
    nodes = [NodeEvidence(0, (member(0, {"0": 9, "1": 4}),)), NodeEvidence(1, (member(1, {"0": 9, "1": 3}), member(2, {"0": 9})))]
    found = attribute(nodes, 2).culprit
    assert found is not None and (found.node, found.ranks) == (1, (1,)) and "process group 1 is #3" in found.how
