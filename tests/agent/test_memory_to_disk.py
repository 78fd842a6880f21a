"""Steps of the memory tier written to disk by the agent in the background (``save_memory(...,
to_disk=True)``): complete or absent on disk, kept in the tier until written, never copied from a
file the trainer changed meanwhile, and the job's last one written before the agent ends."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from kit.agents import agent_argv, read_events
from kit.paths import CHILDREN

from hacfg import checkpoint, memory
from hacfg.agent.checkpoints import ROOT_ENV, MemoryTier, Written, write_to_disk
from hacfg.agent.journal import Journal
from hacfg.checkpoint import MARKER, load_state, save_memory


def steps_on(disk: Path) -> list[str]:
    return sorted((entry.name for entry in disk.iterdir()), key=lambda name: (len(name), name))


def test_the_agent_writes_the_steps_asked_for_to_disk_and_the_last_before_it_ends(shm, tmp_path):
    disk = tmp_path / "ckpt"
    argv = [*agent_argv(tmp_path / "state", "--checkpoint-path", str(disk)), sys.executable,
            str(CHILDREN / "memory_trainer.py"), "12", str(tmp_path / "final.pt"), "16", str(disk), "4"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=120, env={**os.environ, ROOT_ENV: str(shm)})
    assert done.returncode == 0, done.stderr
    assert "[hacfg]" not in done.stderr  # no step written by the trainer itself, nothing refused
    # Step 12 is saved as the trainer ends: the agent writes it once the workers are gone, before it goes.
    assert steps_on(disk)[-1] == "step_12" and set(steps_on(disk)) <= {".hacfg", "step_4", "step_8", "step_12"}
    written = [e for e in read_events(tmp_path / "state") if e["event"] == "checkpoint_written"]
    assert [e["step"] for e in written][-1] == 12 and all(e["error"] is None for e in written)
    assert all(e["bytes"] > 16 << 20 for e in written)
    final = torch.load(tmp_path / "final.pt")
    on_disk = load_state(disk / "step_12")
    assert on_disk["step"] == 12 and torch.equal(on_disk["ballast"], final["ballast"])
    assert all(torch.equal(on_disk["model"][k], final["model"][k]) for k in final["model"])
    assert (disk / "step_12" / MARKER).is_file() and not list(shm.iterdir())


def test_a_step_waiting_for_the_disk_stays_in_the_tier_until_written_and_only_the_newest_waits(shm):
    memory.save(shm, 1, {"w": torch.full((4,), 1.0)}, rank=0, ranks=1, disk=True)
    for step in (2, 3, 4):
        memory.save(shm, step, {"w": torch.full((4,), float(step))}, rank=0, ranks=1)
    assert memory.held(shm) == [4, 1] and memory.waiting_for_disk(shm) == (1, shm / "step_1")
    memory.mark_writing(shm, 1)  # the agent is writing it: it stays while a newer one waits
    memory.save(shm, 5, {"w": torch.full((4,), 5.0)}, rank=0, ranks=1, disk=True)
    memory.save(shm, 6, {"w": torch.full((4,), 6.0)}, rank=0, ranks=1)
    assert memory.held(shm) == [6, 5, 1] and memory.waiting_for_disk(shm) == (5, shm / "step_5")
    memory.mark_persisted(shm, 1)
    memory.save(shm, 6, {"w": torch.full((4,), 6.0)}, rank=0, ranks=1)
    assert memory.held(shm) == [6, 5]
    (shm / memory.WRITING).unlink()
    memory.save(shm, 7, {"w": torch.full((4,), 7.0)}, rank=0, ranks=1, disk=True)
    memory.save(shm, 8, {"w": torch.full((4,), 8.0)}, rank=0, ranks=1)
    assert memory.held(shm) == [8, 7] and memory.waiting_for_disk(shm) == (7, shm / "step_7")  # step 5, not begun: passed over
    memory.mark_persisted(shm, 7)
    assert memory.waiting_for_disk(shm) is None and memory.waiting_for_disk(shm, after=6) == (7, shm / "step_7")
    memory.save(shm, 9, {"w": torch.full((4,), 9.0)}, rank=0, ranks=1)
    assert memory.held(shm) == [9]


def test_a_step_is_published_whole_and_files_that_did_not_ask_stay_in_memory(shm, tmp_path):
    folder = memory.save(shm, 3, {"w": torch.arange(1 << 16)}, rank=0, ranks=2, disk=True)
    memory.save(shm, 3, {"w": torch.arange(5)}, rank=1, ranks=2)
    written = write_to_disk(3, folder, tmp_path / "ckpt")
    assert written.error is None and written.path == tmp_path / "ckpt" / "step_3"
    assert sorted(p.name for p in written.path.iterdir()) == [MARKER, "rank_0.state"]
    assert (written.path / "rank_0.state").read_bytes() == memory.rank_file(folder, 0).read_bytes()
    assert written.nbytes == memory.rank_file(folder, 0).stat().st_size
    # Written already (by the agent before this one): left as it is.
    assert write_to_disk(3, folder, tmp_path / "ckpt") == type(written)(written.path, 0.0, 0)


@pytest.mark.parametrize("swap", ["symlink", "fifo"])
def test_a_file_the_trainer_swapped_for_a_link_or_a_pipe_is_neither_followed_nor_waited_on(shm, tmp_path, swap):
    secret = tmp_path / "secret"
    secret.write_bytes(memory.MAGIC)  # what a link would show, were it followed
    folder = memory.save(shm, 2, {"w": torch.ones(4)}, rank=0, ranks=1, disk=True)
    target = memory.rank_file(folder, 0)
    target.unlink()
    target.symlink_to(secret) if swap == "symlink" else os.mkfifo(target)
    assert not memory.complete(folder) and memory.waiting_for_disk(shm) is None
    with pytest.raises(ValueError, match="is not a file"):
        memory.header(target)
    written = write_to_disk(2, folder, tmp_path / "ckpt")  # named anyway: no file of the step asks, none is copied
    assert written.path is not None and sorted(p.name for p in written.path.iterdir()) == [MARKER]


def test_a_file_renamed_while_it_is_copied_fails_the_step_and_nothing_is_published(shm, tmp_path, monkeypatch):
    folder = memory.save(shm, 2, {"w": torch.ones(1 << 20)}, rank=0, ranks=1, disk=True)
    sendfile = os.sendfile

    def then_reused(out, source, offset, count):  # the trainer's next save takes the file as its spare
        sent = sendfile(out, source, offset, min(count, 1 << 16))
        if offset == 0:
            os.rename(memory.rank_file(folder, 0), memory.spares(shm, 0)[0])
        return sent

    monkeypatch.setattr(os, "sendfile", then_reused)
    written = write_to_disk(2, folder, tmp_path / "ckpt")
    assert written.path is None and "changed while it was written to disk" in (written.error or "")
    assert not list((tmp_path / "ckpt").iterdir())  # no step_2, no staging folder


def test_tidy_leaves_a_staging_folder_a_save_in_flight_holds(tmp_path):
    left, held = tmp_path / ".step_3.abcdefghijklmnop.tmp", tmp_path / ".step_4.bcdefghijklmnopq.tmp"
    left.mkdir()
    held.mkdir()
    handle = os.open(held, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(handle, fcntl.LOCK_EX)
    try:
        assert checkpoint.tidy(tmp_path) == [left] and held.is_dir()
    finally:
        os.close(handle)
    assert checkpoint.tidy(tmp_path) == [held]


def test_save_memory_to_a_folder_the_agent_does_not_write_saves_there_before_it_returns(shm, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(memory.DIR_ENV, str(shm))
    monkeypatch.setenv(memory.DISK_ENV, str(tmp_path / "agents"))
    monkeypatch.setattr(checkpoint, "_said", set())
    save_memory(1, {"w": torch.ones(4)}, tmp_path / "mine", to_disk=True)
    save_memory(2, {"w": torch.ones(4)}, tmp_path / "mine", to_disk=True)
    assert steps_on(tmp_path / "mine") == ["step_1", "step_2"] and not memory.asks_disk(memory.rank_file(shm / "step_2", 0))
    assert capsys.readouterr().err.count("is not the agent's checkpoint.path") == 1
    (tmp_path / "link").symlink_to(tmp_path / "agents")  # the same folder by another name: the agent's
    save_memory(3, {"w": torch.ones(4)}, tmp_path / "link", to_disk=True)
    assert memory.asks_disk(memory.rank_file(shm / "step_3", 0)) and not (tmp_path / "agents").exists()


def test_the_agents_tier_writes_a_waiting_step_before_it_is_released(shm, tmp_path, monkeypatch):
    monkeypatch.setenv(ROOT_ENV, str(shm))
    monkeypatch.setattr(MemoryTier, "DISK_LOOK", 30.0)  # no look before the release: the last one writes it
    heard = []
    tier = MemoryTier("disk", 0, tmp_path / "ckpt", lambda step, written: heard.append((step, written)))
    tier.open()
    assert tier.path is not None
    time.sleep(0.1)  # the thread is waiting out its first look
    memory.save(tier.path, 7, {"w": torch.full((1 << 16,), 7.0)}, rank=0, ranks=1, disk=True)
    tier.release()
    assert [step for step, _ in heard] == [7] and heard[0][1].path == tmp_path / "ckpt" / "step_7"
    assert torch.equal(load_state(tmp_path / "ckpt" / "step_7")["w"], torch.full((1 << 16,), 7.0))
    assert not list(shm.iterdir())


def test_a_link_the_trainer_left_at_the_agents_staging_name_is_not_written_through(shm, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (shm / f"{memory.PERSISTED}.{os.getpid()}.tmp").symlink_to(victim)
    memory.mark_persisted(shm, 9)
    assert victim.read_text() == "keep" and memory.persisted(shm) == 9


def test_a_step_not_written_is_one_line_and_an_event_that_hacfg_events_shows(tmp_path, cli):
    said: list[str] = []
    journal = Journal(tmp_path / "events.jsonl", echo=said.append, node=None, max_restarts=3)
    journal.checkpoint_written(4, Written(tmp_path / "ckpt" / "step_4", 1.23456, 1 << 20))
    journal.checkpoint_written(8, Written(None, 0.5, 0, "rank_0.state changed while it was written to disk"))
    assert said == ["[hacfg] step 8 of the memory tier could not be written to disk: rank_0.state changed while it was written to disk"]
    result = cli("events", tmp_path / "events.jsonl")
    assert result.code == 0, result.err
    assert f"step 4 from memory: {tmp_path / 'ckpt' / 'step_4'} in 1.235s" in result.out
    assert "step 8 from memory: not written, rank_0.state changed" in result.out
