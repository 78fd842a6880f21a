"""Relay one of the child's streams to ours at pipe speed, keeping its tail for the classifiers.

Pipes are grown to 1 MiB (``F_SETPIPE_SZ``, where the system allows it) and read 1 MiB at a
time: a training job that floods its log then wakes the agent sixteen times less often than
with a pipe's default 64 KiB. Where both ends allow it the bytes never enter the agent at all:
``tee(2)`` duplicates what waits in the child's pipe into a private pipe, ``splice(2)`` moves
the original to our stream, and of the copy at most the last 64 KiB is read, for the tail
(nothing, under a flood, when bytes already waiting will cover it); the rest is spliced to
/dev/null. A terminal, an ``O_APPEND`` file or a kernel that refuses the splice (``EINVAL``)
gets plain reads and writes.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import stat
import sys
import termios
import threading
import time
from collections.abc import Callable

PIPE_BYTES = 1 << 20


def relay(source: int, target: int, keep: Callable[[memoryview], None], tail_bytes: int) -> None:
    """Copy ``source`` to ``target`` until end of stream, calling ``keep`` after every chunk with
    its share of the stream's last ``tail_bytes`` (empty when bytes already waiting behind it will
    cover them). A reader that went away does not stop the relay: the tail still matters."""
    for fd in (source, target):
        grow_pipe(fd)
    if not (splice_allowed(source, target) and _splice(source, target, keep, tail_bytes)):
        _copy(source, target, keep, tail_bytes)


def splice_allowed(source: int, target: int) -> bool:
    """From a pipe, to anything but a terminal (a line discipline gains nothing from splice, and
    older kernels refuse it) or a file opened for appending (which the kernel refuses)."""
    try:
        return (
            _tee is not None
            and stat.S_ISFIFO(os.fstat(source).st_mode)
            and not os.isatty(target)
            and not fcntl.fcntl(target, fcntl.F_GETFL) & os.O_APPEND
        )
    except OSError:
        return False


def grow_pipe(fd: int) -> None:
    """Give a pipe 1 MiB of room; anything else, or a system that refuses, is left as it is."""
    with contextlib.suppress(OSError):
        if stat.S_ISFIFO(os.fstat(fd).st_mode) and fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) < PIPE_BYTES:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)


def _load_tee() -> Callable[[int, int, int, int], int] | None:
    """``tee(2)`` from the C library: Python has ``os.splice`` but no ``os.tee``."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).tee
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_size_t, ctypes.c_uint)
    function.restype = ctypes.c_ssize_t
    return function


_tee = _load_tee()


def _splice(source: int, target: int, keep: Callable[[memoryview], None], tail_bytes: int) -> bool:
    """Relay with tee and splice until end of stream (True), or until the kernel refuses (False,
    with nothing lost: what was not moved yet is still in ``source`` for the plain copy)."""
    try:
        devnull, copy = _borrow()
    except OSError:
        return False
    try:
        done = _splice_through(source, target, keep, tail_bytes, copy, devnull)
    except BaseException:
        for fd in copy:
            os.close(fd)
        raise
    with _spare_lock:
        _spare_pipes.append(copy)  # empty again
    return done


# Kept from one attempt to the next: an agent that restarts its command hundreds of times opens
# them once, and holds as many descriptors between attempts as during them.
_spare_pipes: list[tuple[int, int]] = []
_spare_lock = threading.Lock()
_devnull: list[int] = []  # opened with the first copy pipe, before any thread needs it


def prepare() -> None:
    """Open what splicing needs up front, so an agent holds the same descriptors from its first
    attempt to its last (pump threads start in any order)."""
    with _spare_lock:
        if not _devnull:
            _devnull.append(os.open(os.devnull, os.O_WRONLY))
        while len(_spare_pipes) < 2:  # one per relayed stream
            _spare_pipes.append(os.pipe())


def _borrow() -> tuple[int, tuple[int, int]]:
    """/dev/null (to drop bytes without reading them) and an empty copy pipe."""
    with _spare_lock:
        if not _devnull:
            _devnull.append(os.open(os.devnull, os.O_WRONLY))
        copy = _spare_pipes.pop() if _spare_pipes else os.pipe()
    grow_pipe(copy[0])
    return _devnull[0], copy


def _splice_through(
    source: int, target: int, keep: Callable[[memoryview], None], tail_bytes: int, copy: tuple[int, int], devnull: int
) -> bool:
    copy_read, copy_write = copy
    view = memoryview(bytearray(tail_bytes))
    while size := _tee_all(source, copy_write):
        moved = 0
        try:
            while moved < size:
                try:
                    moved += os.splice(source, target, size - moved)
                except BlockingIOError:
                    time.sleep(0.001)
                except BrokenPipeError:
                    target = devnull  # our reader went away; keep supervising
        except OSError as err:
            if err.errno != errno.EINVAL:
                raise
            return False
        finally:
            kept = 0 if moved == size and _covered(source, copy_read, tail_bytes) else min(moved, tail_bytes)
            _take_tail(copy_read, devnull, view[:kept], size, moved, keep)
    return True


def _tee_all(source: int, copy: int) -> int:
    """Duplicate what waits in ``source`` into ``copy``, waiting for data; 0 at end of stream."""
    assert _tee is not None  # splice_allowed() checked
    while True:
        size = _tee(source, copy, PIPE_BYTES, 0)
        if size >= 0:
            return size
        code = ctypes.get_errno()
        if code != errno.EINTR:
            raise OSError(code, os.strerror(code))


def _covered(source: int, copy: int, tail_bytes: int) -> bool:
    """Whether the next tee will bring a whole tail: that many bytes already wait in ``source``, and
    the empty ``copy`` has the room to take all of them. Under a flood this skips almost every read."""
    waiting = int.from_bytes(fcntl.ioctl(source, termios.FIONREAD, bytes(4)), sys.byteorder)
    return waiting >= tail_bytes and fcntl.fcntl(copy, fcntl.F_GETPIPE_SZ) >= fcntl.fcntl(source, fcntl.F_GETPIPE_SZ)


def _take_tail(
    copy: int, devnull: int, view: memoryview, size: int, moved: int, keep: Callable[[memoryview], None]
) -> None:
    """Empty the ``size`` duplicated bytes out of ``copy``: the last of the ``moved`` ones fill ``view``."""
    _discard(copy, devnull, moved - len(view))
    got = 0
    while got < len(view):
        got += os.readv(copy, [view[got:]])
    keep(view)
    _discard(copy, devnull, size - moved)


def _discard(copy: int, devnull: int, size: int) -> None:
    while size > 0:
        size -= os.splice(copy, devnull, size)


def _copy(source: int, target: int, keep: Callable[[memoryview], None], tail_bytes: int) -> None:
    """Blocking reads into one reused buffer, each written out whole."""
    view = memoryview(bytearray(PIPE_BYTES))
    while True:
        try:
            size = os.readv(source, [view])
        except OSError:
            size = 0
        if not size:
            return
        chunk = view[:size]
        _write_all(target, chunk)
        keep(chunk[-tail_bytes:])


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        try:
            written = os.write(fd, data)
        except BlockingIOError:
            time.sleep(0.001)
            continue
        except BrokenPipeError:
            return  # our reader went away; keep supervising
        data = data[written:]
