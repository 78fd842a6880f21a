"""The agent's output relay: byte for byte to every kind of target, the tail kept, on splice or copy."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import tty

import pytest
from kit.agents import agent_argv
from kit.paths import CHILDREN

from hacfg.agent.process import relay as relay_module
from hacfg.agent.process.relay import PIPE_BYTES, grow_pipe, relay, splice_allowed

TAIL = 64 * 1024
STREAM = os.urandom(3 << 20) + b"the last line: NCCL error\n"


class Tail:
    """What the supervisor keeps: the stream's last TAIL bytes, from what the relay hands over."""

    def __init__(self) -> None:
        self.data = bytearray()

    def __call__(self, chunk: memoryview) -> None:
        self.data += chunk
        del self.data[:-TAIL]


def feed(data: bytes, piece: int = 1 << 16) -> int:
    """A pipe's read end with a thread writing ``data`` into it, as a child would, then closing it."""
    read, write = os.pipe()

    def run() -> None:
        for start in range(0, len(data), piece):
            os.write(write, data[start : start + piece])
        os.close(write)

    threading.Thread(target=run, daemon=True).start()
    return read


def drain(fd: int, into: bytearray) -> threading.Thread:
    """A thread reading ``fd`` into ``into`` until its end."""
    def run() -> None:
        while True:
            try:
                chunk = os.read(fd, 1 << 20)
            except OSError:  # a pty master once the slave side is closed
                return
            if not chunk:
                return
            into.extend(chunk)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def pipe():
    read, write = os.pipe()
    yield read, write
    os.close(read)
    os.close(write)


def relay_all(source: int, target: int) -> Tail:
    tail = Tail()
    relay(source, target, tail, TAIL)
    os.close(source)
    return tail


def test_through_a_pipe_by_splice_byte_for_byte_with_the_tail_kept():
    out_read, out_write = os.pipe()
    assert splice_allowed(out_read, out_write)
    received = bytearray()
    reader = drain(out_read, received)
    tail = relay_all(feed(STREAM), out_write)
    os.close(out_write)
    reader.join(10)
    assert received == STREAM
    assert tail.data == STREAM[-TAIL:]


def test_a_flood_in_big_writes_still_keeps_exactly_the_last_tail():
    out_read, out_write = os.pipe()
    received = bytearray()
    reader = drain(out_read, received)
    source = feed(STREAM, piece=PIPE_BYTES)  # mostly more waiting behind each chunk than one tail
    tail = relay_all(source, out_write)
    os.close(out_write)
    reader.join(10)
    assert received == STREAM
    assert tail.data == STREAM[-TAIL:]


def test_into_a_regular_file_by_splice(tmp_path, pipe):
    with open(tmp_path / "log", "wb") as handle:
        assert splice_allowed(pipe[0], handle.fileno())
        tail = relay_all(feed(STREAM), handle.fileno())
    assert (tmp_path / "log").read_bytes() == STREAM
    assert tail.data == STREAM[-TAIL:]


def test_into_an_append_only_file_by_copy_after_what_was_there(tmp_path, pipe):
    log = tmp_path / "log"
    log.write_bytes(b"earlier run\n")
    with open(log, "ab") as handle:
        assert not splice_allowed(pipe[0], handle.fileno())
        tail = relay_all(feed(STREAM), handle.fileno())
    assert log.read_bytes() == b"earlier run\n" + STREAM
    assert tail.data == STREAM[-TAIL:]


def test_to_a_terminal_by_copy(pipe):
    master, slave = os.openpty()
    tty.setraw(slave)  # no newline translation: the bytes must arrive as written
    assert not splice_allowed(pipe[0], slave)
    data = STREAM[-(1 << 20) :]
    received = bytearray()
    reader = drain(master, received)
    tail = relay_all(feed(data), slave)
    while len(received) < len(data) and reader.is_alive():
        reader.join(0.05)
    os.close(slave)
    reader.join(10)
    os.close(master)
    assert received == data
    assert tail.data == data[-TAIL:]


def test_when_the_kernel_refuses_the_splice_nothing_is_lost(tmp_path):
    """EINVAL from splice itself (an O_APPEND file, offered to it directly): the copy carries on."""
    log = tmp_path / "log"
    with open(log, "ab") as handle:
        source = feed(STREAM)
        tail = Tail()
        assert relay_module._splice(source, handle.fileno(), tail, TAIL) is False
        relay_module._copy(source, handle.fileno(), tail, TAIL)
    os.close(source)
    assert log.read_bytes() == STREAM
    assert tail.data == STREAM[-TAIL:]


def test_a_reader_that_goes_away_does_not_stop_the_relay_or_the_tail():
    out_read, out_write = os.pipe()
    os.close(out_read)
    tail = relay_all(feed(STREAM), out_write)  # returns only at the end of the stream
    os.close(out_write)
    assert tail.data == STREAM[-TAIL:]


def test_pipes_are_grown_to_a_mebibyte(pipe):
    read, write = pipe
    grow_pipe(read)
    with open("/proc/sys/fs/pipe-max-size") as limit:
        expected = PIPE_BYTES if int(limit.read()) >= PIPE_BYTES else 1 << 16
    assert fcntl.fcntl(write, fcntl.F_GETPIPE_SZ) == expected


def test_only_a_pipe_is_spliced_from(tmp_path, pipe):
    (tmp_path / "file").write_bytes(b"x")
    with open(tmp_path / "file", "rb") as handle:
        assert not splice_allowed(handle.fileno(), pipe[1])


@pytest.mark.slow
def test_the_agent_appends_to_a_log_opened_with_append(tmp_path):
    log = tmp_path / "train.log"
    log.write_bytes(b"attempt from yesterday\n")
    with open(log, "ab") as handle:
        argv = [*agent_argv(tmp_path / "state"), sys.executable, str(CHILDREN / "echo_bytes.py")]
        result = subprocess.run(argv, stdout=handle, stderr=subprocess.PIPE, timeout=60)
    assert result.returncode == 0
    assert log.read_bytes() == b"attempt from yesterday\n" + bytes(range(256)) * 64


@pytest.mark.slow
def test_the_agent_relays_to_a_terminal(tmp_path):
    master, slave = os.openpty()
    tty.setraw(slave)
    argv = [*agent_argv(tmp_path / "state"), sys.executable, str(CHILDREN / "echo_bytes.py")]
    proc = subprocess.Popen(argv, stdout=slave, stderr=subprocess.DEVNULL)
    os.close(slave)
    received = bytearray()
    drain(master, received).join(60)
    os.close(master)
    assert proc.wait(timeout=60) == 0
    assert received == bytes(range(256)) * 64
