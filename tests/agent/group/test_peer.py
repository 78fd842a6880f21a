"""A node's newest memory step copied to another node's agent over a real socket: fetched back
bit-identical after the node lost its tier, refused when forged, tampered or replayed, and never
torn when the sender is SIGKILLed or the link is cut midway."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from kit.relay import Relay
from kit.timing import at_most

from hacfg import memory
from hacfg.agent.checkpoints import BACKGROUND_NICE
from hacfg.agent.group import peer

JOB = "llama-pretrain"
KEY = peer.peer_key(b"s" * 32, JOB)
TIMEOUT = 10.0
TO_NODE_1 = peer.Ends(JOB, owner=0, keeper=1)


@pytest.fixture
def tiers() -> Iterator[tuple[Path, Path]]:
    """Node 0's and node 1's memory tiers, in /dev/shm."""
    made = [Path(tempfile.mkdtemp(dir=memory.ROOT, prefix="hacfg-test-")) for _ in range(2)]
    yield made[0], made[1]
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


class Heard:
    """What a receiver or sender said of each transfer that failed, awaited."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.event = threading.Event()

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        self.event.set()

    def wait(self) -> str:
        assert self.event.wait(at_most(TIMEOUT)), "no transfer failed"
        return self.lines[-1]


@pytest.fixture
def heard() -> Heard:
    """What node 1's receiver said."""
    return Heard()


@pytest.fixture
def receiver(tiers, heard) -> Iterator[peer.Receiver]:
    """Node 1's receiver."""
    with peer.Receiver(tiers[1], KEY, 1, job=JOB, timeout=TIMEOUT, echo=heard) as running:
        yield running


def a_state(step: int, rank: int, floats: int = 1000) -> dict:
    generator = torch.Generator().manual_seed(step * 100 + rank)
    return {
        "model": {"weight": torch.randn(floats, generator=generator), "bias": torch.arange(7, dtype=torch.int64)},
        "optimizer": {"momentum": torch.randn(3, 5, generator=generator, dtype=torch.float64)},
        "step": step,
    }


def save_step(tier: Path, step: int, ranks: int = 2, floats: int = 1000) -> Path:
    for rank in range(ranks):
        folder = memory.save(tier, step, a_state(step, rank, floats), rank=rank, ranks=ranks)
    return folder


def assert_holds(folder: Path, step: int, ranks: int = 2, floats: int = 1000) -> None:
    assert memory.complete(folder)
    for rank in range(ranks):
        loaded, saved = memory.load(memory.rank_file(folder, rank)), a_state(step, rank, floats)
        assert loaded["step"] == step
        assert torch.equal(loaded["model"]["weight"], saved["model"]["weight"])
        assert torch.equal(loaded["model"]["bias"], saved["model"]["bias"])
        assert torch.equal(loaded["optimizer"]["momentum"], saved["optimizer"]["momentum"])


def peer_entries(tier: Path, node: int = 0) -> list[str]:
    return sorted(entry.name for entry in peer.peer_folder(tier, node).iterdir())


def wait_until(condition: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + at_most(timeout)
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.01)


def test_a_node_that_lost_its_tier_gets_its_newest_step_back_bit_identical(tiers, receiver):
    own, _ = tiers
    with peer.Sender(own, receiver.address, KEY, TO_NODE_1, interval=0.05, timeout=TIMEOUT) as sender:
        save_step(own, 3)
        wait_until(lambda: sender.sent == 3)  # the receiver said it holds it (its folder shows a moment sooner)
    held = receiver.held(0)
    assert held is not None and held[0] == 3
    assert_holds(held[1], 3)
    # The node is lost: a new pod, an empty /dev/shm.
    shutil.rmtree(own)
    new = Path(tempfile.mkdtemp(dir=memory.ROOT, prefix="hacfg-test-"))
    try:
        fetched = peer.fetch(new, receiver.address, KEY, TO_NODE_1, timeout=TIMEOUT)
        assert fetched is not None and memory.newest_complete(new) == (3, fetched)
        assert_holds(fetched, 3)
        assert [entry.name for entry in new.iterdir()] == ["step_3"]
        # A node the receiver holds nothing of gets nothing, and nothing is written.
        assert peer.fetch(new, receiver.address, KEY, peer.Ends(JOB, owner=5, keeper=1), timeout=TIMEOUT) is None
        assert [entry.name for entry in new.iterdir()] == ["step_3"]
    finally:
        shutil.rmtree(new, ignore_errors=True)


@pytest.mark.parametrize("trainer_on_the_keeper", ["flips a byte", "plants a step", "removes the signature"])
def test_a_copy_changed_on_the_keeping_node_is_never_fetched_back(tiers, receiver, trainer_on_the_keeper):
    """The keeper's trainer can write to its tier, where the copy lies: a fetch checks the bytes
    against the signature the owner sent them under, and takes nothing else."""
    own, keeper = tiers
    peer.send(save_step(own, 3), receiver.address, KEY, TO_NODE_1, timeout=TIMEOUT)
    kept = peer.peer_folder(keeper, 0) / "step_3"
    if trainer_on_the_keeper == "flips a byte":
        with open(kept / "rank_0.state", "r+b") as handle:
            handle.seek(-1, os.SEEK_END)
            last = handle.read(1)
            handle.seek(-1, os.SEEK_END)
            handle.write(bytes([last[0] ^ 1]))
    elif trainer_on_the_keeper == "plants a step":
        shutil.copytree(kept, kept.with_name("step_9"))  # a newer step, with the old one's signature
        shutil.rmtree(kept)
    else:
        (kept / peer.SIGNATURE).unlink()
    new = Path(tempfile.mkdtemp(dir=memory.ROOT, prefix="hacfg-test-"))
    try:
        with pytest.raises(peer.Refused):
            peer.fetch(new, receiver.address, KEY, TO_NODE_1, timeout=TIMEOUT)
        assert list(new.iterdir()) == []
    finally:
        shutil.rmtree(new, ignore_errors=True)


def test_the_peer_keeps_only_the_newest_step_of_each_node_and_fills_the_older_one_s_files_next(tiers, receiver):
    own, keeper = tiers
    kept = peer.peer_folder(keeper, 0)
    with peer.Sender(own, receiver.address, KEY, TO_NODE_1, interval=0.05, timeout=TIMEOUT) as sender:
        save_step(own, 1)
        wait_until(lambda: sender.sent == 1)
        first = [os.stat(kept / "step_1" / f"rank_{rank}.state").st_ino for rank in (0, 1)]
        save_step(own, 2)
        wait_until(lambda: sender.sent == 2)  # answered once the older copy is gone
        assert receiver.held(0) == (2, kept / "step_2")
        assert peer_entries(keeper) == [".spare_rank_0", ".spare_rank_1", "step_2"]  # step 1's files, to be filled
        assert_holds(kept / "step_2", 2)
        save_step(own, 3)
        wait_until(lambda: sender.sent == 3)
    assert [os.stat(kept / "step_3" / f"rank_{rank}.state").st_ino for rank in (0, 1)] == first
    assert_holds(kept / "step_3", 3)
    # The keeper's own tier is untouched by what it keeps for others.
    assert memory.newest_complete(keeper) is None


def test_in_a_ring_of_two_each_node_holds_its_own_newest_step_and_the_others_only(tiers, receiver):
    zero, one = tiers
    with (
        peer.Receiver(zero, KEY, 0, job=JOB, timeout=TIMEOUT) as receiver_zero,
        peer.Sender(zero, receiver.address, KEY, TO_NODE_1, interval=0.05, timeout=TIMEOUT) as from_zero,
        peer.Sender(one, receiver_zero.address, KEY, peer.Ends(JOB, owner=1, keeper=0), interval=0.05, timeout=TIMEOUT) as from_one,
    ):
        for step in (1, 2, 3):
            save_step(zero, step)
            save_step(one, step)
        wait_until(lambda: from_zero.sent == 3 and from_one.sent == 3)  # each answered once the older copy is gone
    for tier, other in ((zero, 1), (one, 0)):
        assert sorted(entry.name for entry in tier.iterdir() if not entry.name.startswith(".spare")) == [
            f"peer-{other}", "step_3"
        ]
        assert peer_entries(tier, other) == ["step_3"]
        assert_holds(peer.peer_folder(tier, other) / "step_3", 3)


@pytest.mark.parametrize(
    ("key", "ends", "why"),
    [
        (peer.peer_key(b"t" * 32, JOB), TO_NODE_1, "signature does not match"),  # not the job's secret
        (peer.peer_key(b"s" * 32, "other-job"), peer.Ends("other-job", 0, 1), "signature does not match"),
        (KEY, peer.Ends(JOB, owner=0, keeper=2), "not a transfer for node 1"),
    ],
    ids=["another-secret", "another-job", "another-node"],
)
def test_a_transfer_not_signed_for_this_job_and_node_is_refused_and_leaves_nothing(tiers, receiver, key, ends, why):
    own, keeper = tiers
    with pytest.raises(peer.Refused, match=why):
        peer.send(save_step(own, 1), receiver.address, key, ends, timeout=TIMEOUT)
    assert list(keeper.iterdir()) == []


def test_a_recorded_transfer_replayed_is_refused(tiers, receiver):
    own, keeper = tiers
    with Relay(receiver.address) as relay:
        peer.send(save_step(own, 1), relay.address, KEY, TO_NODE_1, timeout=TIMEOUT)
    assert receiver.held(0) is not None
    shutil.rmtree(peer.peer_folder(keeper, 0))  # even where the step is not held any more
    with socket.create_connection(receiver.address, timeout=TIMEOUT) as link:
        link.recv(peer.NONCE_BYTES, socket.MSG_WAITALL)
        link.sendall(bytes(relay.recorded))
        assert link.makefile("rb").readline().startswith(b"refused: its signature does not match")
    assert list(keeper.iterdir()) == []
    # The same step again, signed anew, is not newer than what is held.
    peer.send(memory.newest_complete(own)[1], receiver.address, KEY, TO_NODE_1, timeout=TIMEOUT)
    with pytest.raises(peer.Refused, match="not newer than step 1"):
        peer.send(memory.newest_complete(own)[1], receiver.address, KEY, TO_NODE_1, timeout=TIMEOUT)
    assert peer_entries(keeper) == ["step_1"]


def test_a_tampered_byte_is_refused_and_the_older_copy_stays(tiers, receiver):
    own, keeper = tiers
    peer.send(save_step(own, 1), receiver.address, KEY, TO_NODE_1, timeout=TIMEOUT)
    newer = save_step(own, 2)
    with Relay(receiver.address, flip_at=2000) as relay, pytest.raises(peer.Refused, match="do not match"):
        peer.send(newer, relay.address, KEY, TO_NODE_1, timeout=TIMEOUT)
    assert peer_entries(keeper) == ["step_1"]
    assert_holds(peer.peer_folder(keeper, 0) / "step_1", 1)


def test_a_header_claiming_more_than_the_tier_has_free_is_refused_before_a_byte_is_written(tiers, receiver):
    _, keeper = tiers
    free = shutil.disk_usage(keeper).free
    fields = {"kind": "step", "job": JOB, "owner": 0, "keeper": 1, "step": 1, "files": [["rank_0.state", free + 1]]}
    head = json.dumps(fields).encode()
    with socket.create_connection(receiver.address, timeout=TIMEOUT) as link:
        nonce = link.recv(peer.NONCE_BYTES, socket.MSG_WAITALL)
        link.sendall(struct.pack(">I", len(head)) + head + peer._mac(KEY, nonce, head).digest())
        assert b"GB free" in link.makefile("rb").readline()
    assert not any(peer.peer_folder(keeper, 0).iterdir())


SENDER = """\
import sys
from pathlib import Path
from hacfg.agent.group import peer
peer.send(Path(sys.argv[1]), ("127.0.0.1", int(sys.argv[2])), bytes.fromhex(sys.argv[3]), peer.Ends(sys.argv[4], 0, 1))
"""


def test_a_sender_killed_mid_copy_leaves_the_older_copy_and_no_partial_one(tiers, receiver, heard):
    own, keeper = tiers
    peer.send(save_step(own, 1), receiver.address, KEY, TO_NODE_1, timeout=TIMEOUT)
    # 64 MB per rank, held by the link after 1 MB: far more than the sockets' buffers take.
    newer = save_step(own, 2, floats=16 << 20)
    with Relay(receiver.address, hold_after=1 << 20) as relay:
        sender = subprocess.Popen(
            [sys.executable, "-c", SENDER, str(newer), str(relay.address[1]), KEY.hex(), JOB]
        )
        try:
            assert relay.holding.wait(at_most(TIMEOUT))
            wait_until(lambda: len(peer_entries(keeper)) == 2)  # the copy is coming in, under a hidden name
            os.kill(sender.pid, signal.SIGKILL)
            assert sender.wait(at_most(TIMEOUT)) == -signal.SIGKILL
        finally:
            sender.kill()
        relay.release()
        assert "link closed" in heard.wait()
    assert peer_entries(keeper) == ["step_1"]
    assert_holds(peer.peer_folder(keeper, 0) / "step_1", 1)


def test_a_spare_the_keeper_s_trainer_swapped_for_a_link_is_not_written_through(tiers, receiver):
    """The keeper's tier is one its trainer can write: a spare replaced by a hard link or a symlink to
    another file is dropped, and the copy goes to a new file; the linked files keep their bytes."""
    own, keeper = tiers
    kept = peer.peer_folder(keeper, 0)
    hard, soft = keeper / "hard-target", keeper / "soft-target"
    with peer.Sender(own, receiver.address, KEY, TO_NODE_1, interval=0.05, timeout=TIMEOUT) as sender:
        for step in (1, 2):
            save_step(own, step)
            wait_until(lambda step=step: sender.sent == step)
        for target, spare in ((hard, kept / ".spare_rank_0"), (soft, kept / ".spare_rank_1")):
            target.write_bytes(b"not the agent's")
            spare.unlink()
        os.link(hard, kept / ".spare_rank_0")
        (kept / ".spare_rank_1").symlink_to(soft)
        save_step(own, 3)
        wait_until(lambda: sender.sent == 3)
    assert hard.read_bytes() == soft.read_bytes() == b"not the agent's" and os.stat(hard).st_nlink == 1
    assert_holds(kept / "step_3", 3)


def test_a_link_cut_mid_copy_leaves_the_older_copy_and_the_next_copy_is_whole(tiers, receiver, heard):
    own, keeper = tiers
    peer.send(save_step(own, 1), receiver.address, KEY, TO_NODE_1, timeout=TIMEOUT)
    newer = save_step(own, 2, floats=16 << 20)
    failed = Heard()
    with Relay(receiver.address, hold_after=1 << 20) as relay:
        cut = threading.Thread(target=lambda: (relay.holding.wait(at_most(TIMEOUT)), relay.cut()))
        cut.start()
        with peer.Sender(own, relay.address, KEY, TO_NODE_1, timeout=TIMEOUT, echo=failed):
            failed.wait()
        cut.join()
        heard.wait()
    assert peer_entries(keeper) == ["step_1"]
    # Never resumed: the next transfer sends the step whole.
    peer.send(newer, receiver.address, KEY, TO_NODE_1, timeout=TIMEOUT)
    assert peer_entries(keeper) == [".spare_rank_0", ".spare_rank_1", "step_2"]
    assert_holds(peer.peer_folder(keeper, 0) / "step_2", 2, floats=16 << 20)


def test_a_step_pruned_while_it_goes_out_is_abandoned_not_sent_torn(tiers, receiver, heard):
    own, keeper = tiers
    going = save_step(own, 1, floats=16 << 20)
    failed = Heard()
    with Relay(receiver.address, hold_after=1 << 20) as relay:
        # It looks once: step 2 is not sent through this relay, which takes one connection.
        with peer.Sender(own, relay.address, KEY, TO_NODE_1, interval=at_most(TIMEOUT), timeout=TIMEOUT, echo=failed):
            assert relay.holding.wait(at_most(TIMEOUT))
            save_step(own, 2, floats=16 << 20)  # step 1's files become the ranks' spares, rewritten
            assert not going.exists()
            relay.release()
            assert "step 1 was replaced while it was sent" in failed.wait()
        heard.wait()
    assert not any(peer.peer_folder(keeper, 0).iterdir())


def test_a_receiver_removes_what_one_killed_midway_left(tiers):
    _, keeper = tiers
    left = peer.peer_folder(keeper, 0) / ".incoming-step_4.abcd"
    left.mkdir(parents=True)
    (left / "rank_0.state").write_bytes(b"half")
    with peer.Receiver(keeper, KEY, 1, job=JOB):
        assert not left.exists()


def test_a_keeper_takes_only_copies_of_steps_it_holds_itself_and_keeps_those(tiers):
    """A copy of node 0's step 4 resumes together with node 1's own step 4: node 1's receiver pins
    its own step 4 while it keeps the copy (its trainer's saves do not prune it), refuses a copy of
    a step it no longer holds (the older copy stays), and moves the pin with the next copy."""
    own, keeper = tiers
    for step in (3, 4):
        save_step(keeper, step)
    with peer.Receiver(keeper, KEY, 1, job=JOB, keeps_own=True) as receiver:
        peer.send(save_step(own, 4), receiver.address, KEY, TO_NODE_1, timeout=TIMEOUT)
        for step in (5, 6):
            save_step(keeper, step)
        assert memory.held(keeper) == [6, 4]  # step 4 pinned, 3 and 5 pruned as usual
        with pytest.raises(peer.Refused, match="no longer holds its own step 5"):
            peer.send(save_step(own, 5), receiver.address, KEY, TO_NODE_1, timeout=TIMEOUT)
        assert receiver.copies() == {0: 4} and memory.pinned(keeper) == {4}
        peer.send(save_step(own, 6), receiver.address, KEY, TO_NODE_1, timeout=TIMEOUT)
        assert receiver.copies() == {0: 6} and memory.pinned(keeper) == {6}
        save_step(keeper, 7)
        assert memory.held(keeper) == [7, 6]


def test_copies_yield_to_training_and_fetches_do_not(tiers, receiver):
    """A copy is seconds of hashing per GB: its threads take the lowest CPU priority, so a busy
    node trains first. A fetch, which a recovery waits for, is served at the usual one."""
    own, _ = tiers

    def priority() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    assert peer.in_background(priority) == BACKGROUND_NICE
    with pytest.raises(peer.Refused, match="as it is"):
        peer.in_background(lambda: (_ for _ in ()).throw(peer.Refused("as it is")))
    with peer.Sender(own, receiver.address, KEY, TO_NODE_1, interval=0.05, timeout=TIMEOUT) as sender:
        save_step(own, 3)
        wait_until(lambda: sender.sent == 3)
        assert os.getpriority(os.PRIO_PROCESS, sender._thread.native_id) == BACKGROUND_NICE
    assert os.getpriority(os.PRIO_PROCESS, receiver._thread.native_id) == os.getpriority(os.PRIO_PROCESS, 0)


def test_the_ledger_pays_for_what_copies_cost_at_their_share_of_the_training_s_time():
    ledger = peer.Ledger(share=0.5)
    assert ledger.owed() == 0
    ledger.charge(1.0)
    ledger.charge(0.5)  # a copy while another was owed: paid after it
    assert 2.9 < ledger.owed() <= 3.0


@pytest.mark.parametrize(
    ("took", "during", "pace", "lost"),
    [
        (2.0, 10, 5.0, 0.0),  # as many steps as usual: it cost nothing (idle cores)
        (2.0, 5, 5.0, 1.0),  # half the usual: one second of training lost
        (2.0, 0, 5.0, 2.0),  # training stood still the whole copy
        (2.0, 20, 5.0, 0.0),  # faster than usual: nothing, never a credit
        (2.0, 3, None, 2.0),  # the usual pace not known: all of it
        (2.0, -4, 5.0, 2.0),  # a step number gone backwards: no more than the copy itself
    ],
)
def test_a_copy_costs_the_steps_it_kept_the_training_from_and_never_more_than_itself(took, during, pace, lost):
    assert peer.lost_to_copy(took, during, pace) == pytest.approx(lost)


def test_the_usual_pace_is_taken_from_steps_seen_before_and_not_from_too_few():
    progress = peer.Progress()
    for at, step in [(0.0, 1), (0.5, 2), (1.0, 3), (1.0, 3), (1.5, 4), (2.0, 5), (2.0, 2)]:  # a repeat, a step back
        progress.look(step, at)
    assert progress.pace(0.0, 2.0) == pytest.approx(2.0)
    assert progress.pace(1.2, 2.0) is None  # two steps: too few
    assert progress.pace(0.0, 0.4) is None
    progress.look(None, 2.5)  # nothing complete yet: no step
    assert progress.pace(0.0, 2.5) == pytest.approx(2.0)


def test_a_copy_waits_until_the_copies_before_are_paid_for_then_the_newest_goes(tiers, heard):
    """Once the ledger owes, the next copy points wait for it, and the newest then goes. With no steps
    seen before it, a copy is charged its whole time: the training's pace is not known."""
    own, keeper = tiers

    class Ledger(peer.Ledger):
        def __init__(self) -> None:
            super().__init__(share=1.0)
            self.charges: list[float] = []

        def charge(self, seconds: float) -> None:
            self.charges.append(seconds)
            super().charge(seconds)

    ledger = Ledger()
    with (
        peer.Receiver(keeper, KEY, 1, job=JOB, timeout=TIMEOUT, echo=heard) as receiver,
        peer.Sender(own, receiver.address, KEY, TO_NODE_1, interval=0.02, timeout=TIMEOUT, ledger=ledger) as sender,
    ):
        began = time.monotonic()  # before the step exists: the copy cannot start before it
        save_step(own, 1)
        wait_until(lambda: sender.sent == 1 and ledger.charges)
        assert 0 < ledger.charges[0] <= time.monotonic() - began  # the copy's own time
        ledger.charge(1.0)  # as if it had cost a second of training
        owed = time.monotonic()
        save_step(own, 2)
        save_step(own, 3)
        time.sleep(0.5)
        assert sender.sent == 1 and receiver.held(0)[0] == 1  # owed: steps 2 and 3 wait
        wait_until(lambda: sender.sent == 3)  # the newest once paid for; step 2 never went
        assert time.monotonic() - owed >= 0.9
    assert_holds(peer.peer_folder(keeper, 0) / "step_3", 3)
