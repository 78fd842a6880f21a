"""The memory tier: a step's state in shared memory the agent owns, resumed after a real SIGKILL,
never resumed when the kill tore it, and saved to disk when shared memory has no room."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from kit.agents import agent_argv, read_events
from kit.paths import CHILDREN
from kit.processes import ending

from hacfg import memory
from hacfg.agent.checkpoints import ROOT_ENV, MemoryTier, newest_tier
from hacfg.checkpoint import save_step


def a_state(step: int) -> dict:
    model = torch.nn.Linear(8, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step, "empty": torch.zeros(0)}


@pytest.mark.parametrize("mapped", [False, True], ids=["copied", "mapped"])
def test_a_state_comes_back_bit_identical_copied_or_mapped(shm, mapped):
    state = a_state(5)
    folder = memory.save(shm, 5, state, rank=0, ranks=1)
    loaded = memory.load(memory.rank_file(folder, 0), mapped=mapped)
    storage = loaded["model"]["weight"].untyped_storage().nbytes()
    assert storage == (memory.rank_file(folder, 0).stat().st_size if mapped else loaded["model"]["weight"].nbytes)
    assert loaded["step"] == 5 and type(loaded["model"]) is type(state["model"])
    for name, tensor in state["model"].items():
        assert torch.equal(loaded["model"][name], tensor) and loaded["model"][name].dtype == tensor.dtype
    assert torch.equal(loaded["optimizer"]["state"][0]["momentum_buffer"], state["optimizer"]["state"][0]["momentum_buffer"])
    assert oct(memory.rank_file(folder, 0).stat().st_mode & 0o777) == "0o600"
    # The trainer's writes to what it loaded stay its own: the checkpoint is unchanged.
    loaded["model"]["weight"].add_(1)
    assert torch.equal(memory.load(memory.rank_file(folder, 0))["model"]["weight"], state["model"]["weight"])


def test_a_copied_load_leaves_its_file_to_hold_a_later_save(shm):
    memory.save(shm, 1, {"w": torch.ones(1 << 20)}, rank=0, ranks=1)
    inode = memory.rank_file(shm / "step_1", 0).stat().st_ino
    loaded = memory.load(memory.rank_file(shm / "step_1", 0))["w"]  # as a restarted trainer does
    for step in (2, 3):
        memory.save(shm, step, {"w": torch.full((1 << 20,), float(step))}, rank=0, ranks=1)
    assert memory.rank_file(shm / "step_3", 0).stat().st_ino == inode  # no new file faulted in
    assert torch.equal(loaded, torch.ones(1 << 20))


def test_a_resumed_state_lands_in_a_file_of_the_tier_whose_pages_the_next_resume_copies_into(shm):
    """A copy into fresh memory pays a fault per page (most of a resume's load); the tier keeps the
    loaded state's pages for the next resume instead, starting with one of the rank's spares."""
    for step in (1, 2):
        memory.save(shm, step, {"w": torch.full((1 << 20,), float(step)), "step": step}, rank=3, ranks=1)
    spare = memory.spares(shm, 3)[0].stat().st_ino
    path = memory.rank_file(shm / "step_2", 3)
    loaded = memory.load(path, tier=shm, rank=3)
    landing = memory.landing(shm, 3)
    assert torch.equal(loaded["w"], torch.full((1 << 20,), 2.0)) and loaded["step"] == 2
    assert landing.stat().st_ino == spare and not memory.spares(shm, 3)[0].exists()
    assert str(landing) in held(shm) and oct(landing.stat().st_mode & 0o777) == "0o600"
    loaded["w"].add_(1)  # the trainer's own memory: the checkpoint stays as saved
    assert torch.equal(memory.load(path)["w"], torch.full((1 << 20,), 2.0))
    del loaded  # the trainer is gone: the file stays, its pages with it
    again = memory.load(path, tier=shm, rank=3)
    assert landing.stat().st_ino == spare and landing.stat().st_blocks * 512 >= (1 << 22)
    assert torch.equal(again["w"], torch.full((1 << 20,), 2.0))


def test_a_landing_file_still_viewed_or_not_a_plain_file_is_not_copied_into(shm, tmp_path):
    memory.save(shm, 1, {"w": torch.ones(1 << 16)}, rank=0, ranks=1)
    path = memory.rank_file(shm / "step_1", 0)
    first = memory.load(path, tier=shm, rank=0)["w"]
    second = memory.load(path, tier=shm, rank=0)["w"]  # the first still views it: memory of its own
    second.add_(1)
    assert torch.equal(first, torch.ones(1 << 16)) and torch.equal(second, torch.full((1 << 16,), 2.0))
    del first, second
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    memory.landing(shm, 0).unlink()
    memory.landing(shm, 0).symlink_to(victim)  # the trainer can write the tier: a link is never followed
    assert torch.equal(memory.load(path, tier=shm, rank=0)["w"], torch.ones(1 << 16))
    assert victim.read_bytes() == b"keep"
    memory.landing(shm, 0).unlink()
    os.link(path, memory.landing(shm, 0))  # or a hard link to the checkpoint itself, which a load would cut short
    assert torch.equal(memory.load(path, tier=shm, rank=0)["w"], torch.ones(1 << 16))
    assert torch.equal(memory.load(path)["w"], torch.ones(1 << 16)) and memory.header(path)["step"] == 1


def test_landing_files_are_made_ahead_with_their_pages_and_the_first_resume_copies_into_them(shm, tmp_path):
    for rank in (0, 1):
        memory.save(shm, 1, {"w": torch.full((1 << 20,), float(rank))}, rank=rank, ranks=2)
    stop = threading.Event()
    stop.set()
    assert memory.prepare_landings(shm, stop) == [] and sorted(p.name for p in shm.iterdir()) == ["step_1"]
    made = memory.prepare_landings(shm)
    assert sorted(made) == [memory.landing(shm, 0), memory.landing(shm, 1)]
    size = memory.rank_file(shm / "step_1", 0).stat().st_size
    assert all(path.stat().st_blocks * 512 >= size and oct(path.stat().st_mode & 0o777) == "0o600" for path in made)
    assert memory.prepare_landings(shm) == [] and not list(shm.glob(".landing.*"))  # made once, nothing left over
    inode = memory.landing(shm, 0).stat().st_ino
    loaded = memory.load(memory.rank_file(shm / "step_1", 0), tier=shm, rank=0)
    assert memory.landing(shm, 0).stat().st_ino == inode and str(memory.landing(shm, 0)) in held(shm)
    assert torch.equal(loaded["w"], torch.zeros(1 << 20))
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    memory.landing(shm, 1).unlink()
    memory.landing(shm, 1).symlink_to(victim)  # made by the trainer, which can write the tier
    assert memory.prepare_landings(shm) == [] and victim.read_bytes() == b"keep"


def test_the_agents_tier_makes_its_ranks_landing_files_once_a_step_is_complete(shm, monkeypatch):
    monkeypatch.setenv(ROOT_ENV, str(shm))
    monkeypatch.setattr(MemoryTier, "LOOK", 0.02)
    tier = MemoryTier("landing", 0)
    tier.open()
    try:
        assert tier.path is not None
        memory.save(tier.path, 1, {"w": torch.ones(1 << 18)}, rank=0, ranks=1)
        deadline = time.monotonic() + 10
        while not memory.landing(tier.path, 0).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert memory.landing(tier.path, 0).stat().st_blocks * 512 >= memory.rank_file(tier.path / "step_1", 0).stat().st_size
    finally:
        tier.release()
    assert not list(shm.iterdir())


def test_a_mapped_state_stays_as_it_was_loaded_while_later_saves_reuse_the_tiers_files(shm):
    """Mapped tensors view the file copy-on-write: pages the trainer has not written still read the
    file. So the file they view is never the spare a later save fills: it is let go instead."""
    memory.save(shm, 1, {"w": torch.ones(1 << 20)}, rank=0, ranks=1)
    loaded = memory.load(memory.rank_file(shm / "step_1", 0), mapped=True)["w"]
    memory.save(shm, 2, {"w": torch.full((1 << 20,), 2.0)}, rank=0, ranks=1)  # step 1's file becomes the spare
    memory.save(shm, 3, {"w": torch.full((1 << 21,), 3.0)}, rank=0, ranks=1)  # and would hold this save
    assert torch.equal(loaded, torch.ones(1 << 20))
    assert memory.load(memory.rank_file(shm / "step_3", 0))["w"].eq(3.0).all()
    del loaded
    memory.save(shm, 4, {"w": torch.full((1 << 20,), 4.0)}, rank=0, ranks=1)  # nothing views it now: reused as ever
    assert memory.held(shm) == [4]


def test_a_step_is_complete_once_every_rank_of_the_node_saved_and_then_the_older_one_goes(shm):
    memory.save(shm, 1, a_state(1), rank=0, ranks=2)
    memory.save(shm, 1, a_state(1), rank=1, ranks=2)
    memory.save(shm, 2, a_state(2), rank=1, ranks=2)
    assert memory.newest_complete(shm) == (1, shm / "step_1")  # rank 0 has not saved step 2 yet
    memory.save(shm, 2, a_state(2), rank=0, ranks=2)
    assert memory.newest_complete(shm) == (2, shm / "step_2")
    assert [step for step, _ in memory.steps(shm)] == [2]
    # step 1's files wait as spares, and the next save of each rank fills its own: two copies at most
    assert sorted(p.name for p in shm.iterdir()) == [".spare_rank_0", ".spare_rank_1", "step_2"]
    memory.save(shm, 3, a_state(3), rank=0, ranks=2)
    assert sorted(p.name for p in shm.iterdir()) == [".spare_rank_1", "step_2", "step_3"]
    assert memory.load(memory.rank_file(shm / "step_3", 0))["step"] == 3


def test_a_state_of_many_tensors_copied_on_several_threads_comes_back_bit_identical(shm):
    generator = torch.Generator().manual_seed(3)
    state = {
        "big": torch.randn(5_000_001, generator=generator, dtype=torch.float64),  # split between threads
        "odd": torch.randint(-128, 127, (3, 1_234_567), generator=generator, dtype=torch.int8),
        "half": torch.randn(2_345_679, generator=generator).to(torch.bfloat16),
        "flags": torch.rand(999_999, generator=generator) > 0.5,
        "column": torch.randn(4_000, 3_001, generator=generator)[:, 7],  # not contiguous
        "scalar": torch.tensor(2.5),
    }
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        folder = memory.save(shm, 1, state, rank=0, ranks=1)
    finally:
        torch.set_num_threads(threads)
    loaded = memory.load(memory.rank_file(folder, 0))
    assert all(torch.equal(loaded[name], tensor) and loaded[name].dtype == tensor.dtype for name, tensor in state.items())


def held(folder: Path) -> list[str]:
    """The files under ``folder`` this process holds open or mapped shared: what its saves keep."""
    fields = [line.split(maxsplit=5) for line in Path("/proc/self/maps").read_text().splitlines()]
    files = {found[5] for found in fields if len(found) == 6 and found[1].endswith("s")}
    files |= {os.readlink(fd) for fd in Path("/proc/self/fd").iterdir() if fd.is_symlink()}
    return sorted(name for name in files if name.startswith(f"{folder}/"))


def test_a_rank_keeps_its_two_files_mapped_and_fills_them_in_turn(shm):
    # Mapping a file populated and unmapping it again costs about half the copy: a rank's next
    # save fills the file it filled the time before, kept mapped since.
    for step, mb in [(1, 1), (2, 1), (3, 1), (4, 2), (5, 1)]:
        state = {**a_state(step), "ballast": torch.full((mb << 18,), float(step))}
        folder = memory.save(shm, step, state, rank=0, ranks=1)
        assert torch.equal(memory.load(memory.rank_file(folder, 0))["ballast"], state["ballast"])
        spare = [str(memory.spares(shm, 0)[0])] if step > 1 else []
        assert held(shm) == [*spare, str(memory.rank_file(folder, 0))]


def test_a_kept_file_removed_is_let_go_at_the_next_save_and_a_forked_child_keeps_none(shm):
    for step in (1, 2, 3):
        memory.save(shm, step, a_state(step), rank=0, ranks=1)
    memory.spares(shm, 0)[0].unlink()  # the tier emptied, as when it needs the room
    shutil.rmtree(shm / "step_3")
    assert all(name.endswith(" (deleted)") for name in held(shm)) and len(held(shm)) == 2  # memory taken until ...
    memory.save(shm, 4, a_state(4), rank=0, ranks=1)
    assert held(shm) == [str(memory.rank_file(shm / "step_4", 0))]
    child = os.fork()
    if child == 0:  # a data loader's worker, say: it writes no checkpoint and keeps none alive
        os._exit(0 if held(shm) == [] else 1)
    assert os.waitpid(child, 0)[1] == 0


def test_a_state_file_naming_a_class_is_refused_not_run(shm, tmp_path):
    folder = memory.save(shm, 1, {"step": 1}, rank=0, ranks=1)
    path = memory.rank_file(folder, 0)
    hostile = pickle.dumps({"step": os.system})  # a global beyond plain objects
    header = memory.header(path)
    header["objects"] = len(hostile)
    text = json.dumps(header).encode()
    path.write_bytes(memory.MAGIC + memory._LENGTH.pack(len(text)) + text + hostile)
    with pytest.raises(pickle.UnpicklingError, match=r"posix\.system is not a plain object"):
        memory.load(path)


@pytest.mark.parametrize("mapped", [False, True], ids=["copied", "mapped"])
@pytest.mark.parametrize(("field", "value"), [("shape", [1 << 30]), ("nbytes", 1 << 40), ("dtype", "Tensor")])
def test_a_header_whose_tensor_does_not_fit_its_file_or_shape_is_refused(shm, mapped, field, value):
    """The trainer writes these files: a tensor said larger than its bytes, or its bytes beyond the
    file, or no dtype at all, is one ValueError, never a read past the mapping."""
    path = memory.rank_file(memory.save(shm, 1, {"w": torch.ones(1024)}, rank=0, ranks=1), 0)
    whole = path.read_bytes()
    header = memory.header(path)
    header["tensors"][0][field] = value
    text = json.dumps(header).encode()
    (length,) = memory._LENGTH.unpack(whole[len(memory.MAGIC) : len(memory.MAGIC) + memory._LENGTH.size])
    rest = whole[len(memory.MAGIC) + memory._LENGTH.size + length :]
    path.write_bytes(memory.MAGIC + memory._LENGTH.pack(len(text)) + text + rest)
    with pytest.raises(ValueError, match=r"shorter than its header says|is not a torch dtype"):
        memory.load(path, mapped=mapped)


def test_the_newest_complete_step_wins_across_tiers_memory_on_a_tie(shm, tmp_path):
    save_step(tmp_path / "ckpt", 4, lambda folder: None)
    disk = str(tmp_path / "ckpt" / "step_4")
    assert newest_tier((4,), disk, shm).tier == "disk"  # nothing in memory
    memory.save(shm, 3, a_state(3), rank=0, ranks=1)
    assert newest_tier((4,), disk, shm) == newest_tier((4,), disk, None)  # memory is older
    memory.save(shm, 4, a_state(4), rank=0, ranks=1)
    assert newest_tier((4,), disk, shm).tier == "memory"
    # A half-written file of a newer step (a kill inside the copy) is removed, never resumed.
    (shm / "step_5").mkdir()
    (shm / "step_5" / ".rank_0.123.tmp").write_bytes(b"torn")
    assert newest_tier((4,), disk, shm).path == str(shm / "step_4")
    assert not (shm / "step_5").exists()
    assert (shm / ".spare_rank_0.1").read_bytes() == b"torn"  # its memory holds a save to come, beside step 3's


def run_trainer(tmp_path: Path, shm: Path, steps: int, ballast_mb: int, *, env: dict | None = None):
    argv = [*agent_argv(tmp_path / "state", "--max-restarts", "3"), sys.executable, str(CHILDREN / "memory_trainer.py"),
            str(steps), str(tmp_path / "final.pt"), str(ballast_mb), str(tmp_path / "ckpt")]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env={**os.environ, ROOT_ENV: str(shm), **(env or {})})


def uninterrupted(tmp_path: Path, steps: int, ballast_mb: int) -> dict:
    clean = tmp_path / "clean"
    clean.mkdir()
    argv = [sys.executable, str(CHILDREN / "memory_trainer.py"), str(steps), str(clean / "final.pt"), str(ballast_mb),
            str(clean / "ckpt")]
    subprocess.run(argv, check=True, capture_output=True, cwd=clean)
    return torch.load(clean / "final.pt")


def test_a_sigkill_inside_the_copy_resumes_the_step_before_it_from_memory(shm, tmp_path):
    steps, ballast = 12, 256
    with ending(run_trainer(tmp_path, shm, steps, ballast)) as agent:
        assert agent.stdout is not None
        pid, killed_in, modes = None, None, set()
        for line in agent.stdout:
            if line.startswith("pid "):
                pid = int(line.split()[1])
            elif line.startswith("step ") and int(line.split()[1]) >= 3 and pid is not None and killed_in is None:
                # Kill the trainer while its next save is half copied: its staging file exists, unrenamed.
                while not (staging := list(shm.glob("hacfg-*/step_*/.rank_0.*.tmp"))):
                    pass
                os.kill(pid, signal.SIGKILL)
                pid = None
                modes.add(staging[0].parent.parent.stat().st_mode & 0o777)
                if staging[0].exists():  # still unpublished once the trainer is dead: torn
                    killed_in = int(staging[0].parent.name.removeprefix("step_"))
        assert agent.wait(timeout=120) == 0, agent.stderr.read() if agent.stderr else ""
    assert killed_in is not None, "every kill came after the save was published"
    starts = [e for e in read_events(tmp_path / "state") if e["event"] == "attempt_start"]
    tiers = [(e["resume_tier"], e["resume_from"] and Path(e["resume_from"]).name) for e in starts]
    assert tiers[0] == ("none", None) and tiers[-1] == ("memory", f"step_{killed_in - 1}")
    assert modes == {0o700}
    assert not list(shm.iterdir())  # the agent released its memory when the job ended
    final, clean = torch.load(tmp_path / "final.pt"), uninterrupted(tmp_path, steps, ballast)
    assert all(torch.equal(final["model"][k], clean["model"][k]) for k in clean["model"])
    assert torch.equal(final["ballast"], clean["ballast"])
    assert not (tmp_path / "ckpt").exists()  # nothing went to disk


@pytest.fixture
def small(tmp_path) -> Iterator[Path]:
    """A tmpfs of 4 MB: shared memory too small for what is saved in it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    folder = tmp_path / "small"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], check=True)
    yield folder
    subprocess.run(["umount", "--lazy", str(folder)], check=True)  # a test's own saves keep their file mapped


def test_shared_memory_too_small_says_so_once_and_saves_to_disk(tmp_path, small):
    agent = run_trainer(tmp_path, small, 3, 8)
    _, err = agent.communicate(timeout=120)
    assert agent.returncode == 0, err
    lines = [line for line in err.splitlines() if "memory checkpoints do not fit" in line]
    assert len(lines) == 1 and f"saving to {tmp_path / 'ckpt'} instead" in lines[0]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step_1", "step_2", "step_3"]
    assert "Traceback" not in err


def test_a_tier_without_room_for_a_landing_file_loads_into_fresh_memory(small):
    folder = memory.save(small, 1, {"w": torch.full((5 << 17,), 3.0)}, rank=0, ranks=1)  # 2.5 MB of 4
    assert memory.prepare_landings(small) == []  # no room for it and one more save
    loaded = memory.load(memory.rank_file(folder, 0), tier=small, rank=0)["w"]
    assert torch.equal(loaded, torch.full((5 << 17,), 3.0))  # in fresh memory, no crash
    assert str(memory.landing(small, 0)) not in held(small) and memory.landing(small, 0).stat().st_size == 0


def test_without_an_agent_memory_saves_go_to_disk_with_one_line(tmp_path):
    trainer = [sys.executable, str(CHILDREN / "memory_trainer.py"), "3", str(tmp_path / "final.pt"), "0", str(tmp_path / "ckpt")]
    env = {key: value for key, value in os.environ.items() if key != memory.DIR_ENV}
    done = subprocess.run(trainer, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("[hacfg]")]
    assert said == [f"[hacfg] no memory tier (no hacfg agent, or one agent per card); saving to {tmp_path / 'ckpt'}"]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step_1", "step_2", "step_3"]


def test_a_newer_step_in_memory_is_progress_that_ends_a_streak_of_failures(shm, tmp_path):
    # Each attempt saves one step to memory, then fails as a user error: four in a row would spend
    # the three unconditional restarts allowed in a row, unless each saved step counts as progress.
    script = (
        "import sys\n"
        "from hacfg.checkpoint import load_state, resume_dir, save_memory\n"
        "step = load_state(resume_dir())['step'] if resume_dir() else 0\n"
        "save_memory(step + 1, {'step': step + 1}, fallback='ckpt')\n"
        "print(f'saved {step + 1}', flush=True)\n"
        "sys.exit(0 if step + 1 >= 5 else 1)\n"
    )
    argv = [*agent_argv(tmp_path / "state", "--unconditional", "--max-restarts", "10"), sys.executable, "-c", script]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=120, env={**os.environ, ROOT_ENV: str(shm)})
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stdout.splitlines() if line.startswith("saved")] == [f"saved {n}" for n in range(1, 6)]
    decisions = [e for e in read_events(tmp_path / "state") if e["event"] == "decision"]
    assert [e["cause"] for e in decisions] == ["user"] * 4 + ["success"]
    assert {e["user_streak"] for e in decisions} == {1}


def test_a_killed_agents_memory_is_removed_when_the_next_agent_of_its_job_and_node_starts(shm, tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    left, running = shm / "hacfg-job-node0-killed01", shm / "hacfg-job-node0-running1"
    for folder, pid in ((left, gone.pid), (running, os.getpid())):
        (folder / "step_3").mkdir(parents=True)
        (folder / "agent.pid").write_text(str(pid))
    env = {key: value for key, value in os.environ.items() if key not in ("HACFG_JOB_ID", "MA_VJ_NAME")}
    argv = [*agent_argv(tmp_path / "state"), sys.executable, "-c", "pass"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**env, ROOT_ENV: str(shm)})
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in shm.iterdir()) == [running.name]  # the agent's own is gone too: it ended


def test_a_group_tier_faults_no_file_in_once_it_holds_its_two_copy_points(shm):
    """Copy points every 10 steps: each one frees a file together with the step before the newest,
    and two spares keep both, so once the tier holds its two copy points no save faults a file in."""
    fresh = []
    for step in range(1, 61):
        had = any(slot.exists() for slot in memory.spares(shm, 0))
        memory.save(shm, step, a_state(step), rank=0, ranks=1, copy_every=10)
        if not had:
            fresh.append(step)
    assert fresh == [1, 2, 3, 13, 23]  # the newest, the one before, a spare, two copy points: then they go round
    assert sorted(entry.name for entry in shm.iterdir()) == [".spare_rank_0", ".spare_rank_0.1", "step_50", "step_59", "step_60"]


def test_a_step_saved_again_keeps_its_earlier_file_as_a_spare_and_the_next_save_faults_none_in(shm):
    """A restarted rank redoes the step after the one it resumed, which the tier holds complete:
    the new file takes its place in one step, and the earlier one is a spare, not freed (else the
    save after it faulted a whole new file in, 0.3 s per GB, at every restart)."""
    for step in (1, 2, 3):
        memory.save(shm, step, {"w": torch.full((1 << 16,), float(step))}, rank=0, ranks=1)
    files = {os.stat(path).st_ino for path in shm.glob("**/*rank_0*")}
    memory.save(shm, 3, {"w": torch.full((1 << 16,), 30.0)}, rank=0, ranks=1)  # redone, as after a restart
    memory.save(shm, 4, {"w": torch.full((1 << 16,), 4.0)}, rank=0, ranks=1)
    assert {os.stat(path).st_ino for path in shm.glob("**/*rank_0*")} <= files  # no new file
    assert memory.load(memory.rank_file(shm / "step_4", 0))["w"][0] == 4.0
    assert not list((shm / "step_3").glob(".rank_*"))
