"""The events log: one JSON line per event, appended whole or not at all.

Written only through the agent's journal (:mod:`hacfg.agent.journal`); read back with
:func:`hacfg.agent.records.state.read_events`.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hacfg.agent.records.state import open_unlinked, stamp
from hacfg.restart.vocabulary import Event
from hacfg.scenario.source import InputError


class EventLog:
    """One JSON line per event. A full or read-only disk is reported once; supervision goes on."""

    def __init__(self, path: Path, *, echo: Callable[[str], None] | None = None, node: int | None = None) -> None:
        self.path = path
        self.node = node  # a group's node rank, written into every record so several logs merge
        self.echo = echo or (lambda line: print(line, file=sys.stderr, flush=True))
        self.broken = False
        self.listeners: list[Callable[[dict[str, Any]], None]] = []  # told of every record, once written

    def write(self, event: Event, **fields: Any) -> dict[str, Any]:
        # the writer's node, unless the event is about another (a straggler named by node 0)
        mine = {"node": self.node} if self.node is not None else {}
        record = {"time": stamp(datetime.now(UTC)), "event": event, **mine, **fields}
        try:
            self._append((json.dumps(record, default=str) + "\n").encode())
        except (OSError, InputError) as err:
            if not self.broken:
                self.broken = True
                reason = err.strerror if isinstance(err, OSError) and err.strerror else err
                self.echo(f"[hacfg] cannot write events to {self.path}: {reason}; supervision continues")
        for listener in self.listeners:
            listener(record)
        return record

    def _append(self, line: bytes) -> None:
        """One record, whole or not at all: a short write (a full disk) is cut back off."""
        fd = open_unlinked(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line  # the last record was torn (a crash mid-write): this one starts a line of its own
            if os.write(fd, line) < len(line):
                os.ftruncate(fd, size)
                raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (the record was cut short and taken back)")
        finally:
            os.close(fd)
