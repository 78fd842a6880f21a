"""What the agent measures for the planning model: save times from checkpoints, restart cost and
failure rates from the events."""

from __future__ import annotations

import json
import os

from hacfg.agent.checkpoints import save_seconds
from hacfg.checkpoint import save_step


def test_the_save_helper_records_how_long_the_save_took(tmp_path):
    def slow(folder):
        (folder / "weights.bin").write_bytes(os.urandom(1 << 20))
        os.sync()

    final = save_step(tmp_path, 40, slow)
    recorded = json.loads((final / ".complete").read_text())["save_s"]
    assert recorded >= 0 and save_seconds(final) == recorded


def test_other_layouts_are_timed_by_their_files(tmp_path):
    folder = tmp_path / "checkpoint-40"
    folder.mkdir()
    for index, stamp in enumerate((1000.0, 1002.5, 1001.0)):
        (folder / f"shard{index}.pt").write_bytes(b"x")
        os.utime(folder / f"shard{index}.pt", (stamp, stamp))
    (folder / ".complete").touch()  # an empty marker, as other tools write it
    assert save_seconds(folder) == 2.5
    single = tmp_path / "checkpoint-50"
    single.mkdir()
    (single / "model.safetensors").write_bytes(b"x")
    assert save_seconds(single) is None  # one file says nothing of how long it took


def test_a_marker_the_training_wrote_is_read_with_limits(tmp_path):
    """The marker lies in the checkpoint the training writes: 200,000 nested brackets there were a
    RecursionError in the agent as it recorded what an attempt saved."""
    folder = tmp_path / "step_40"
    folder.mkdir()
    (folder / "shard.pt").write_bytes(b"x")
    for marker in ("[" * 200_000 + "]" * 200_000, '{"save_s": 1e400}', '{"save_s": ' + "9" * 500 + "}"):
        (folder / ".complete").write_text(marker)
        assert save_seconds(folder) is None  # the files' spread: one file says nothing
