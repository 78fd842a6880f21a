"""The installed distributions' entry points of one group, remembered between runs.

Importing :mod:`importlib.metadata` and reading every distribution's metadata takes longer
than linting a file, and the answer only changes when a distribution is installed, removed
or edited. So the scan's result is kept in the user's cache directory (:func:`hacfg.fsutil.write_cache`),
with a fingerprint of what it was read from: the search path, and each ``*.dist-info``/``*.egg-info``
there with the modification time and size of its ``entry_points.txt``. Taking the fingerprint is a
directory listing per path entry; any difference, and the scan runs again. The file is per
interpreter, and one it cannot read only costs a scan.
"""

from __future__ import annotations

import binascii  # its crc32 is zlib's, and PyYAML has imported it already
import importlib
import os
import sys
from pathlib import Path
from typing import Any, NamedTuple

from hacfg.fsutil import cache_path, read_cache, write_cache

FORMAT = 2  # of the cache file


class EntryPoint(NamedTuple):
    """What :class:`importlib.metadata.EntryPoint` gives hacfg, and ``load`` as it does it."""

    name: str
    value: str
    module: str
    attr: str | None
    distribution: str | None  # None: metadata without a name
    version: str

    def load(self) -> Any:
        loaded: Any = importlib.import_module(self.module)
        for part in self.attr.split(".") if self.attr else ():
            loaded = getattr(loaded, part)
        return loaded


def entry_points(group: str) -> list[EntryPoint]:
    """The entry points of ``group`` across installed distributions, in importlib.metadata's order."""
    fingerprint = _fingerprint()
    if fingerprint is None:
        return _scan(group)
    cache = _cache_file(group, fingerprint)
    stored = read_cache(cache)
    try:
        if stored["format"] == FORMAT and stored["fingerprint"] == fingerprint:
            return [EntryPoint(**entry) for entry in stored["entry_points"]]
    except (KeyError, TypeError):
        pass  # none yet, or unreadable: scan
    found = _scan(group)
    write_cache(cache, {"format": FORMAT, "fingerprint": fingerprint, "entry_points": [e._asdict() for e in found]})
    return found


def _scan(group: str) -> list[EntryPoint]:
    from importlib.metadata import entry_points as installed

    found = []
    read: dict[Any, tuple[str | None, str]] = {}  # each distribution's METADATA parsed once
    for entry in installed(group=group):
        dist = entry.dist
        if dist is not None and dist not in read:
            metadata = dist.metadata
            read[dist] = (metadata["Name"], metadata["Version"])
        name, version = read[dist] if dist is not None else (None, "")
        found.append(EntryPoint(entry.name, entry.value, entry.module, entry.attr or None, name, version))
    return found


def _fingerprint() -> list[Any] | None:
    """What the scan reads, by modification time; None when distributions may come from elsewhere."""
    from importlib.machinery import PathFinder

    finders = [f for f in sys.meta_path if hasattr(f, "find_distributions")]
    if finders != [PathFinder]:
        return None  # a custom finder serves metadata: only the real scan can know
    seen: list[Any] = []
    for entry in sys.path:
        place = entry or "."
        try:
            listing = sorted(os.scandir(place), key=lambda item: item.name)
        except NotADirectoryError:
            try:
                stat = os.stat(place)
            except OSError:
                continue
            seen.append([entry, stat.st_mtime_ns, stat.st_size])  # a zip file on the path
            continue
        except OSError:
            seen.append([entry, None])
            continue
        for item in listing:
            if item.name.endswith((".dist-info", ".egg-info")) or item.name == "EGG-INFO":
                try:
                    stat = os.stat(os.path.join(item.path, "entry_points.txt"))
                    seen.append([entry, item.name, stat.st_mtime_ns, stat.st_size])
                except OSError:
                    seen.append([entry, item.name, None])
    return seen


def _cache_file(group: str, fingerprint: list[Any]) -> Path:
    """One file per interpreter and the path entries that hold distributions: a script's own
    folder, first on the path and different for every job, holds none and makes no new file."""
    places = dict.fromkeys(str(seen[0]) for seen in fingerprint)
    path_key = binascii.crc32("\0".join([sys.executable, *places]).encode())
    return cache_path(f"entry-points-{group}-{path_key:08x}.marshal")

