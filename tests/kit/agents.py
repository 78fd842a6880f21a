"""An agent run as a real process on a test program, and what it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kit.paths import CHILDREN


def agent_argv(state: Path, *options: str) -> list[str]:
    """``hacfg agent OPTIONS --`` with its state in ``state`` and no pre-checks: the command follows."""
    return [sys.executable, "-m", "hacfg", "agent", "--state-dir", str(state), "--no-precheck", *options, "--"]


def agent(
    tmp_path: Path, *options: str, child: str, args: tuple = (), env: dict | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    """Run ``hacfg agent OPTIONS -- python tests/children/CHILD ARGS`` in tmp_path, its state in tmp_path/state."""
    argv = [*agent_argv(tmp_path / "state", *options), sys.executable, str(CHILDREN / child), *map(str, args)]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}, cwd=tmp_path
    )


def read_events(state: Path) -> list[dict]:
    """The events an agent wrote to ``state``/events.jsonl, in order."""
    return [json.loads(line) for line in (state / "events.jsonl").read_text().splitlines()]


def saved_state(state: Path) -> dict:
    """The state an agent saved in ``state``/state.json: the words of its sealed line (``job``,
    ``ended``) and its document."""
    line, _, document = (state / "state.json").read_text().partition("\n")
    return {**dict(word.split("=", 1) for word in line.split()[2:-1]), **json.loads(document)}


def rank_table(path: Path, nodes: int, cards: int, status: str = "completed") -> Path:
    """A version 1.0 rank table laid out as the CANN HCCL guide's example (tests/data/ranktable)."""
    servers = [
        {"server_id": f"node_{node}", "device": [
            {"device_id": str(card), "device_ip": f"192.168.{node + 1}.{card + 8}", "rank_id": str(node * cards + card)}
            for card in range(cards)]}
        for node in range(nodes)
    ]  # fmt: skip
    path.write_text(json.dumps({"status": status, "version": "1.0", "server_count": str(nodes), "server_list": servers}))
    return path
