"""``hacfg.checkpoint.save_step`` under real concurrency and a real SIGKILL: a ``step_N`` marked
complete always holds one writer's whole save, and a re-save never leaves the step without one."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kit.agents import agent_argv
from kit.paths import CHILDREN
from kit.processes import ending

from hacfg.agent.checkpoints import newest_complete
from hacfg.checkpoint import save_step, tidy
from hacfg.plugin import step_of


def writer(root: Path, step: int, name: str, *options: str | Path) -> subprocess.Popen:
    argv = [sys.executable, str(CHILDREN / "save_writer.py"), str(root), str(step), name, *map(str, options)]
    return subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)


def contents(folder: Path) -> dict[str, str]:
    return {path.name: path.read_text() for path in folder.iterdir() if path.name != ".complete"}


def wait_for(path: Path) -> None:
    deadline = time.monotonic() + 60
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_two_writers_of_one_step_never_mix_their_files(tmp_path):
    # Two processes save step 5 at once (each node's local rank 0 saving to shared storage), their
    # writes interleaved: a's model, then b's whole save, then a's optimizer.
    root = tmp_path / "ckpt"
    with ending(writer(root, 5, "a", "--wait", tmp_path / "b.optimizer")) as a:
        wait_for(tmp_path / "a.model")
        with ending(writer(root, 5, "b", "--wait", tmp_path / "a.model")) as b:
            assert [a.wait(timeout=60), b.wait(timeout=60)] == [0, 0], a.stderr.read() + b.stderr.read()
    final = root / "step_5"
    assert json.loads((final / ".complete").read_text())["save_s"] >= 0
    assert contents(final) in ({"model.pt": "a", "optimizer.pt": "a"}, {"model.pt": "b", "optimizer.pt": "b"})
    assert sorted(path.name for path in root.iterdir()) == ["step_5"]  # no staging or replaced copy left


@pytest.mark.slow
def test_a_resave_killed_while_publishing_leaves_the_complete_copy(tmp_path):
    root = tmp_path / "ckpt"
    save_step(root, 5, lambda folder: (folder / "model.pt").write_text("old"))
    with ending(writer(root, 5, "new", "--die-publishing")) as dying:
        assert dying.wait(timeout=60) == -signal.SIGKILL, dying.stderr.read()
    found = newest_complete(root)
    assert (found.step, contents(found.path)) == (5, {"model.pt": "old"})
    assert step_of(found.path.name) == 5  # as the events' time accounting reads a resume path
    # The agent resumes from that copy, and first removes the killed save's staging folder.
    resumed = subprocess.run([*agent_argv(tmp_path / "state", "--checkpoint-path", str(root)), sys.executable, "-c",
                              "import os; print(os.environ['HACFG_RESUME_FROM'])"], capture_output=True, text=True, timeout=60)
    assert resumed.stdout == f"{found.path}\n"
    assert [path.name for path in root.iterdir() if path.name != ".hacfg"] == [found.path.name]
    again = save_step(root, 5, lambda folder: (folder / "model.pt").write_text("newer"))
    assert newest_complete(root).path == again
    assert contents(again) == {"model.pt": "newer"}
    assert tidy(root) == [found.path]  # the replaced copy goes once step_5 is complete again


def test_a_resave_replaces_the_step_and_a_failed_one_leaves_it(tmp_path):
    save_step(tmp_path, 7, lambda folder: (folder / "model.pt").write_text("first"))
    final = save_step(tmp_path, 7, lambda folder: (folder / "model.pt").write_text("second"))
    assert contents(final) == {"model.pt": "second"}

    def fails(folder):
        (folder / "model.pt").write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        save_step(tmp_path, 7, fails)
    assert contents(final) == {"model.pt": "second"}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["step_7"]
