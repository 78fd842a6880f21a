"""Writing files so that a crash or a full disk never leaves half of one behind.

:func:`write_output` writes every file a user names (``hacfg fix``, ``-o``, ``--into``,
``--plot``, ``--metrics-file``) as an editor would: through a symlink to the file it points to, keeping
that file's hard links, mode and owner, and refusing a read-only file unless forced.
:func:`atomic_write` replaces a path hacfg owns, never following a link there.
:func:`write_cache` keeps what one run remembers for the next, where losing it only costs time.
"""

from __future__ import annotations

import contextlib
import errno
import io
import marshal
import os
import stat
from pathlib import Path
from typing import Any

FIGURE_FORMATS = ("svg", "png")  # what --plot draws, named by the file's suffix


class ReadOnlyFile(PermissionError):
    """The file's mode denies us writing it: hacfg leaves it alone unless forced."""

    def __init__(self, path: str | Path):
        super().__init__(errno.EACCES, "read-only file", str(path))


def write_output(path: str | Path, data: str | bytes, *, force: bool = False) -> None:
    """Give the file at ``path`` the contents ``data``, whole or not at all.

    A symlink is followed to its target, which is replaced atomically beside itself (so the
    link stays a link). A file with several hard links is rewritten in place, so every name
    keeps seeing it, after its new size is reserved; any error puts the old bytes back. A
    device or pipe (``-o /dev/stdout``) is written as a shell redirection would.
    """
    payload = data.encode() if isinstance(data, str) else data
    try:
        target = Path(os.path.realpath(path))
        try:
            found = os.stat(target)
        except FileNotFoundError:
            atomic_write(target, payload, mode=None)
            return
        if not stat.S_ISREG(found.st_mode):
            with open(target, "wb") as stream:
                stream.write(payload)
            return
        if not force and _read_only(found):
            raise ReadOnlyFile(path)
        if found.st_nlink > 1:
            _rewrite_in_place(target, payload)
        else:
            atomic_write(target, payload, mode=stat.S_IMODE(found.st_mode), owner=(found.st_uid, found.st_gid))
    except ReadOnlyFile:
        raise
    except OSError as err:  # about the file the user named, not a temporary one or a link's target
        raise OSError(err.errno, err.strerror, str(path)) from None


def write_figure(figure: Any, path: str | Path, **options: Any) -> None:
    """A matplotlib figure, in the format of the path's suffix, written as :func:`write_output` writes."""
    drawn = io.BytesIO()
    figure.savefig(drawn, format=Path(path).suffix.lstrip(".").lower(), **options)
    write_output(path, drawn.getvalue())


def _read_only(found: os.stat_result) -> bool:
    """Whether the file's mode denies us writing it (for root: denies everyone), as an editor warns.
    The mode, not access(2): on a read-only mount that would blame the file rather than the mount."""
    if os.geteuid() == 0:
        return not found.st_mode & 0o222
    if found.st_uid == os.geteuid():
        return not found.st_mode & stat.S_IWUSR
    if found.st_gid in (os.getegid(), *os.getgroups()):
        return not found.st_mode & stat.S_IWGRP
    return not found.st_mode & stat.S_IWOTH


def atomic_write(
    path: str | Path, data: str | bytes, *, mode: int | None = 0o644, owner: tuple[int, int] | None = None
) -> None:
    """Write to a temporary file beside ``path``, fsync it, then rename it over ``path``.

    ``mode`` None gives what the umask allows a new file; ``owner`` is kept where the system
    lets us (root, or the owner's own group)."""
    path = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = _create_beside(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            if owner is not None:
                with contextlib.suppress(PermissionError):
                    os.fchown(handle.fileno(), *owner)
                    if mode is not None and mode & (stat.S_ISUID | stat.S_ISGID):
                        os.fchmod(handle.fileno(), mode)  # chown clears set-id bits
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _sync_folder(path.parent)


def _create_beside(path: Path) -> tuple[int, str]:
    """A new hidden file in ``path``'s folder, created with the umask's mode as any new file is."""
    while True:
        tmp = str(path.parent / f".{path.name}.{os.urandom(4).hex()}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666), tmp
        except FileExistsError:
            continue


def _rewrite_in_place(target: Path, payload: bytes) -> None:
    """Overwrite a hard-linked file without splitting its links; on any error the old bytes go back."""
    with open(target, "r+b") as handle:
        fd = handle.fileno()
        before = handle.read()
        if len(payload) > len(before):
            try:
                os.posix_fallocate(fd, 0, len(payload))  # a full disk fails here, before any byte changes
            except OSError as err:
                if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    os.ftruncate(fd, len(before))
                    raise
        try:
            _write_all(fd, payload)
            os.ftruncate(fd, len(payload))
            os.fsync(fd)
        except BaseException:
            _write_all(fd, before)
            os.ftruncate(fd, len(before))
            raise


def _write_all(fd: int, data: bytes) -> None:
    view, offset = memoryview(data), 0
    while offset < len(data):
        offset += os.pwrite(fd, view[offset:], offset)


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable; a folder that cannot be opened or synced is left to the system."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def cache_path(name: str) -> Path:
    """The file ``name`` in hacfg's cache folder: ``$XDG_CACHE_HOME/hacfg``, else ``~/.cache/hacfg``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hacfg" / name


def read_cache(path: Path) -> Any:
    """What :func:`write_cache` stored at ``path``; None when there is none or it cannot be read. In
    :mod:`marshal`'s format, which the interpreter reads without importing anything (:mod:`json`
    costs a cold lint about 1 ms); a file is per interpreter version, like bytecode."""
    try:
        return marshal.loads(path.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return None


def write_cache(path: Path, content: Any) -> None:
    """Store ``content`` at ``path`` whole, or not at all: a read-only home only costs the next run
    the work the file would have saved. Not synced: a cache lost in a crash is merely cold."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        temporary.write_bytes(marshal.dumps(content))
        os.replace(temporary, path)
    except (OSError, ValueError):
        pass
