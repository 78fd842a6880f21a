"""The agent's own files, sealed with the job's secret: what the trainer writes there is never read as the agent's.

The trainer runs as the agent's user and can write the state folder. So each file the agent reads
back to act on (its state, the record of the running attempt's session) starts with one line,

    hacfg-state 1 job=llama-pretrain ended=success mac=3f9a...

then the document. The MAC is HMAC-SHA256, under a key derived from the job's secret
(:mod:`hacfg.agent.group.signing`) for that job alone, over the line's words and the document. A
file is read in this order, so that nothing of it is parsed before it is known to be this job's:
its size (at most ``limit`` bytes are read), the line's words, whose job it is, its MAC; only then
is the document parsed, by :func:`hacfg.untrusted.loads`, and validated by its reader.

The words before the MAC (the job, whether it ended) are read before the MAC is checked: they can
only make the agent start from zero, which removing the file does too. Nothing else is believed
until the MAC holds.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

from hacfg import untrusted

VERSION = "1"
_WORD = re.compile(r"[a-z_]+=[A-Za-z0-9%._~-]*")


class Unsealed(ValueError):
    """A file that is not sealed as the agent seals it, or not with this job's key."""


def file_key(secret: bytes, job: str | None) -> bytes:
    """The key the agent's files are sealed with: the job's secret, narrowed to this job and to files
    (a MAC of a file is never one of the group's values, nor another job's file)."""
    return hmac.new(secret, f"hacfg files\n{job or ''}".encode(), hashlib.sha256).digest()


def seal(key: bytes, kind: str, document: str, **words: str | None) -> bytes:
    """``document`` (one JSON text) under its line: ``hacfg-KIND 1``, each word that is not None, the MAC."""
    head = " ".join([f"hacfg-{kind}", VERSION, *(f"{name}={quote(value, safe='')}" for name, value in words.items()
                                                if value is not None)])
    body = document.encode()
    return f"{head} mac={_mac(key, head, body)}\n".encode() + body


@dataclass(frozen=True)
class Sealed:
    """A sealed file's words, read but not yet believed, and its document, not yet checked."""

    words: dict[str, str]
    head: str
    mac: str
    body: bytes

    def open(self, key: bytes) -> bytes:
        """The document, once its MAC holds under ``key``."""
        if not hmac.compare_digest(self.mac, _mac(key, self.head, self.body)):
            raise Unsealed("not sealed with this job's key")
        return self.body


def read_file(path: Path, kind: str, limit: int) -> Sealed:
    """The sealed file of ``kind`` at ``path``, of which at most ``limit`` + 1 bytes are read; a
    link in its place is not followed (``OSError``), nor is anything but a regular file read."""
    return _parse(untrusted.head(path, limit + 1), kind, limit)


def _parse(data: bytes, kind: str, limit: int) -> Sealed:
    """The sealed file of ``kind`` in ``data`` (which holds at most ``limit`` + 1 bytes of it)."""
    if len(data) > limit:
        raise Unsealed(f"larger than {limit:,} bytes")
    line, newline, body = data.partition(b"\n")
    words = line.decode("ascii", "replace").split(" ")
    if not newline or words[:2] != [f"hacfg-{kind}", VERSION] or not words[-1].startswith("mac="):
        raise Unsealed(f"no hacfg-{kind} {VERSION} line: not sealed by hacfg")
    if not all(_WORD.fullmatch(word) for word in words[2:]):
        raise Unsealed(f"a hacfg-{kind} line not as hacfg writes it")
    found = dict(word.split("=", 1) for word in words[2:-1])
    return Sealed({name: unquote(value) for name, value in found.items()}, " ".join(words[:-1]), words[-1][4:], body)


def _mac(key: bytes, head: str, body: bytes) -> str:
    return hmac.new(key, head.encode() + b"\n" + body, hashlib.sha256).hexdigest()
