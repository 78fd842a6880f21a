"""What hacfg reads back from places others can write, and prints back to a person.

The trainer runs as the agent's user and can write the checkpoint storage, where the agent keeps
its state, its events and the ranks' evidence; a log or an events file handed to ``hacfg events``
or ``hacfg diagnose`` may come from anywhere. So every such JSON document is read here, with its
size known before it is parsed, its nesting and its numbers bounded (no ``RecursionError``, no
400-digit integer, no infinity), and everything printed from it is :func:`printable`.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

DEPTH = 32  # levels of nesting: what the agent writes needs 6
DIGITS = 20  # of an integer: every count, step and PID the agent writes fits in 64 bits

_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[{]+|[\]}]+")  # runs of opening or of closing brackets
# C0 (tab and newline too: a field must not break the line it is printed on), DEL and C1
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_NAMED = {"\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f", "\r": "\\r", "\x1b": "\\e"}


class Unreadable(ValueError):
    """A document that is not what hacfg would have written: too large, too deep, not JSON."""


def loads(text: str | bytes, *, limit: int) -> Any:
    """The JSON document in ``text``, at most ``limit`` bytes, nested at most :data:`DEPTH` levels,
    integers of at most :data:`DIGITS` digits and finite numbers only; :class:`Unreadable` otherwise."""
    text = _within(text, limit)
    try:
        return json.loads(text, parse_int=_integer, parse_float=_finite, parse_constant=_no_constant)
    except RecursionError:  # cannot happen below DEPTH; kept so that no reader ever ends in a traceback
        raise Unreadable(f"nested deeper than {DEPTH} levels") from None
    except ValueError as err:
        raise Unreadable(str(err)) from None


def documents(text: bytes, *, limit: int) -> list[Any]:
    """The JSON documents one after another in ``text`` (what every writer of a pipe sent), each read
    as :func:`loads` reads one; :class:`Unreadable` if any is not JSON."""
    decoded = _within(text, limit)
    decoder = json.JSONDecoder(parse_int=_integer, parse_float=_finite, parse_constant=_no_constant)
    found, at = [], 0
    while (at := len(decoded) - len(decoded[at:].lstrip())) < len(decoded):
        try:
            document, at = decoder.raw_decode(decoded, at)
        except ValueError as err:
            raise Unreadable(str(err)) from None
        found.append(document)
    return found


def _within(text: str | bytes, limit: int) -> str:
    """``text`` as a string, if it is at most ``limit`` bytes of UTF-8 nested at most :data:`DEPTH` levels."""
    if len(text) > limit:
        raise Unreadable(f"larger than {limit:,} bytes")
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError:
            raise Unreadable("not UTF-8") from None
    if depth(text) > DEPTH:
        raise Unreadable(f"nested deeper than {DEPTH} levels")
    return text


def read(path: Path, *, limit: int) -> Any:
    """The JSON document in the file ``path``, as :func:`loads` reads it: no more than ``limit`` + 1
    bytes are read, a symbolic link is not followed (``OSError``), and nothing but a regular file is
    read (a pipe in its place would block the reader)."""
    return loads(head(path, limit + 1), limit=limit)


def head(path: Path, size: int, offset: int = 0) -> bytes:
    """At most ``size`` bytes of the regular file ``path`` from ``offset``, never through a link
    (``OSError``) nor from a pipe or a device (:class:`Unreadable`)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Unreadable("not a regular file")
        handle.seek(offset)
        return handle.read(size)


def depth(text: str) -> int:
    """How deeply the arrays and objects of the JSON ``text`` nest (brackets in strings aside),
    measured a run of brackets at a time: 200,000 opening brackets are one step."""
    if "[" not in text and "{" not in text:
        return 0
    deepest = level = 0
    for run in _BRACKETS.finditer(_STRINGS.sub("", text)):
        size = run.end() - run.start()
        level += size if run.group()[0] in "[{" else -size
        deepest = max(deepest, level)
    return deepest


def printable(text: object) -> str:
    """``text`` with every C0 and C1 control character and DEL escaped (``\\e``, ``\\x07``...),
    as GNU ``ls`` shows a file name on a terminal: what came from a log, an event or a rank's
    evidence can neither move the cursor, set the window's title, nor break the line it is on."""
    shown = str(text)
    if not _CONTROL.search(shown):
        return shown
    return _CONTROL.sub(lambda found: _NAMED.get(found.group(), f"\\x{ord(found.group()):02x}"), shown)


def _integer(digits: str) -> int:
    if len(digits.lstrip("-")) > DIGITS:
        raise ValueError(f"an integer of {len(digits.lstrip('-')):,} digits")
    return int(digits)


def _finite(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise ValueError(f"a number beyond a double's range: {literal[:20]}")
    return value


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")
