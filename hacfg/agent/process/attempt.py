"""One attempt: run the command in its own session, relay its output untouched, watch for hangs.

Each stream is relayed by its own thread (``relay``: splice where both ends allow it, else
blocking raw reads and writes), keeping the last 64 KiB for the classifiers; the main thread
only waits, for the child, a deadline or a signal. Until the training itself speaks (its first
heartbeat, or a line that is not a launcher's own: torchrun's start-up banner is not the
training's), the initial hang timeout applies, counted from the start. Once the attempt has
reported a step (``beat(step=N)``), only progress proves life in training: a new step or a new
phase, not output, which a loop stuck without progress may go on printing. Time is measured with
the monotonic clock, so a wall-clock jump neither fires nor hides a hang. Signals reach the agent
through a wakeup pipe and are forwarded to the whole process group; after ``grace`` seconds the
group gets SIGKILL.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import IO, Protocol

from hacfg import heartbeat
from hacfg.agent.failure_log import launcher_line
from hacfg.agent.process.accelerator import UtilizationProbe
from hacfg.agent.process.relay import prepare, relay
from hacfg.plugin.recovery import TAIL_LINES
from hacfg.restart.learning import Intervals, Learned
from hacfg.restart.vocabulary import Event

TAIL_BYTES = 64 * 1024
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
QUICK_START = 10.0  # seconds from the start in which a first sign of life is timed to 50 ms
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class Limit:
    """The hang timeout in force, and where it comes from: ``initial`` (before the first sign of life,
    and in start-up and tear-down), ``hang.timeout``, ``hang.phases`` (declared) or ``learned``."""

    seconds: float
    source: str


@dataclass
class AttemptResult:
    exit_code: int | None
    signal: int | None
    hung: bool
    interrupted: int | None  # the signal the agent itself received, if any
    stop_reason: str | None  # why the agent was asked to stop the command (the round ended elsewhere)
    tail: tuple[str, ...]
    duration: float
    stopping: float | None = None  # seconds from the first stop signal (hang, signal, request) to the exit
    gathering: float | None = None  # of a hang: seconds from declaring it to the first stop signal (its evidence)
    step: int | None = None  # the last step the command reported through its heartbeat


class Process(Protocol):
    """What the watcher needs of a started command: ``subprocess.Popen``'s face, or a warm start's."""

    @property
    def pid(self) -> int: ...

    @property
    def stdout(self) -> IO[bytes] | None: ...

    @property
    def stderr(self) -> IO[bytes] | None: ...

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...


def start_cold(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A new process for the command, in its own session, its output piped to the relay."""
    return subprocess.Popen(
        argv,
        env=env,
        stdin=None,  # inherited: input can still be piped to the command
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_child_setup,  # no thread runs while the agent forks
    )


def become_subreaper() -> None:
    """Orphaned grandchildren reparent to the agent instead of init, so none escapes the cleanup."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _child_setup() -> None:
    # The child dies with the agent, even when the agent is SIGKILLed.
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class Supervisor:
    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        *,
        hang_timeout: float | None,
        first_hang_timeout: float | None,
        heartbeat: Path,
        grace: float,
        phase_timeouts: Mapping[str, float] = MappingProxyType({}),  # per heartbeat phase; init: first_hang_timeout
        learned: Learned | None = None,  # learns from this attempt's phases and steps; None: not learning
        # told the output's tail, the seconds quiet, the timeout that fired, the phase, whether steps were followed
        on_hang: Callable[[tuple[str, ...], float, Limit, str, bool], None] = lambda *hang: None,
        on_signal: Callable[[int], object] = lambda signum: None,
        # told each milestone of the start (first_activity, first_step), seconds after the launch
        on_milestone: Callable[[Event, float], object] = lambda event, after: None,
        on_start: Callable[[int], object] = lambda pid: None,
        accelerator: UtilizationProbe | None = None,
        launch: Callable[[list[str], dict[str, str]], Process] = start_cold,
        keep: Callable[[], Collection[int]] = frozenset,  # children that are no attempt's, spared by the cleanup
    ):
        self.argv = argv
        self.env = env
        self.hang_timeout = hang_timeout
        self.first_hang_timeout = first_hang_timeout
        self.heartbeat = heartbeat
        self.phase_timeouts = phase_timeouts
        self.learned = learned
        # when learning, twice per interval between beats: each step report is seen, none is merged into the next
        self._look = min(1.0, float(env.get("HACFG_HEARTBEAT_INTERVAL", 1)) / 2) if learned is not None else 1.0
        self.grace = grace
        self.on_hang = on_hang
        self.on_signal = on_signal
        self.on_milestone = on_milestone
        self.on_start = on_start  # told the PID of the command, the leader of its own session
        self.accelerator = accelerator
        self.launch = launch
        self.keep = keep
        self.tails: dict[int, bytearray] = {}  # per stream: interleaving two floods would garble both
        self.tail_lock = threading.Lock()
        self.output_at: float | None = None  # monotonic time of the latest output, set by the pumps
        self.spoke_at: float | None = None  # ... of the first line of the training's own, not a launcher's
        self._unread: dict[int, bytes] = {}  # per stream, the unfinished line, until the training speaks
        self.stop_reason: str | None = None
        self.stop_at: float | None = None  # monotonic time of the first stop signal sent
        self.gathering: float | None = None  # seconds the hang's evidence took, before the first stop signal
        self._wake: int | None = None

    def request_stop(self, reason: str) -> None:
        """Stop the command as for a signal (SIGTERM, then SIGKILL after the grace); any thread may call it."""
        if self.stop_reason is None:
            self.stop_reason = reason
            if self._wake is not None:
                with contextlib.suppress(OSError):
                    os.write(self._wake, b"\0")

    def run(self) -> AttemptResult:
        started, started_wall = time.monotonic(), time.time()
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_write, False)
        os.set_blocking(wake_read, False)
        # SIGCHLD only wakes the wait below: the child's exit is seen at once, not at the next poll.
        previous = {sig: signal.signal(sig, lambda *_: None) for sig in (*FORWARDED, signal.SIGCHLD)}
        previous_wakeup = signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
        self._wake = wake_write
        # Gone before the launch (a warm fork may declare its phase before the watch below begins): a bare
        # beat() only touches the file, and the last attempt's step would read as this one's.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.heartbeat)
        try:
            proc = self.launch(self.argv, self.env)
            assert proc.stdout is not None and proc.stderr is not None
            self.on_start(proc.pid)
            prepare()
            pumps = [
                threading.Thread(target=self._pump, args=(proc.stdout, sys.stdout.fileno(), wake_write), daemon=True),
                threading.Thread(target=self._pump, args=(proc.stderr, sys.stderr.fileno(), wake_write), daemon=True),
            ]
            for pump in pumps:
                pump.start()
            try:
                hung, interrupted, stopped = self._watch(proc, pumps, wake_read, started)
            finally:
                _kill_group(proc.pid)
                code = proc.wait()
                ended = time.monotonic()
                reap_orphans(keep=self.keep())
                for pump in pumps:
                    pump.join(timeout=5)
        finally:
            self._wake = None
            signal.set_wakeup_fd(previous_wakeup)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            os.close(wake_read)
            os.close(wake_write)
        return AttemptResult(
            exit_code=code if code >= 0 else None,
            signal=-code if code < 0 else None,
            hung=hung,
            interrupted=interrupted,
            stop_reason=self.stop_reason if stopped else None,
            tail=self.tail_lines(),
            duration=ended - started,
            stopping=ended - self.stop_at if self.stop_at is not None else None,
            gathering=self.gathering,
            step=reported_step(self.heartbeat, since=started_wall),
        )

    def _watch(
        self,
        proc: Process,
        pumps: list[threading.Thread],
        wake_read: int,
        started: float,
    ) -> tuple[bool, int | None, bool]:
        """Wait for the child to end, watching for hangs, signals and stop requests;
        (hung, signal received, stopped on request)."""
        last_activity = started
        seen_activity = False
        intervals = Intervals(self.learned or Learned(floor=0))  # not learning: nothing keeps what is observed
        stepping = False  # the attempt reported a step: in training, only progress proves life
        heartbeat_stamp: tuple[int, int] | None = None
        hung = False
        interrupted: int | None = None
        kill_at: float | None = None
        exited_at: float | None = None
        stopped = False
        while True:
            now = time.monotonic()
            if self.stop_reason is not None and not stopped and kill_at is None and proc.poll() is None:
                stopped = True
                self._stop(proc.pid, signal.SIGTERM, now)
                kill_at = now + self.grace
            was_active = seen_activity
            stamp = self._heartbeat_stamp()
            if stamp is not None and stamp != heartbeat_stamp:
                heartbeat_stamp = stamp
                following = stepping and intervals.phase == heartbeat.TRAIN
                step, phase = heartbeat.read(self.heartbeat)
                # from when it was written, not seen: a hang is caught within its timeout of the last
                # beat (the file's time moves with the wall clock: at most one look is taken back)
                written = now - min(max(0.0, time.time() - stamp[0] / 1e9), self._look)
                if intervals.write(stamp[0], step, phase) or not following:
                    last_activity, seen_activity = max(last_activity, written), True
                if step is not None and not stepping:
                    self.on_milestone(Event.FIRST_STEP, written - started)
                stepping = stepping or step is not None
            phase = intervals.phase
            following = stepping and phase == heartbeat.TRAIN  # progress proves life, output does not
            output_at = self.output_at if seen_activity else self.spoke_at  # a launcher's lines are no sign of life
            if output_at is not None and output_at > last_activity and not following:
                last_activity, seen_activity = output_at, True
            if seen_activity and not was_active:
                self.on_milestone(Event.FIRST_ACTIVITY, last_activity - started)
            if proc.poll() is not None:
                exited_at = exited_at or now
                # a grandchild may hold the pipes open: drain briefly, then stop waiting
                if not any(p.is_alive() for p in pumps) or now - exited_at > 0.2:
                    return hung, interrupted, stopped
            limit = self._limit(phase, steady=seen_activity and phase not in heartbeat.AS_START_UP, stepping=stepping)
            timeout = limit.seconds if limit is not None else None
            if self.accelerator is not None and timeout is not None:
                self.accelerator.poll()
                if now >= last_activity + timeout and self.accelerator.changing():
                    last_activity = now  # quiet, but the accelerators are working: not hung yet
                    self.accelerator.reset()
            if kill_at is not None and now >= kill_at:
                _kill_group(proc.pid)
                kill_at = float("inf")
            elif limit is not None and kill_at is None and now >= last_activity + limit.seconds:
                hung = True
                if limit.source == "learned" and self.learned is not None:
                    self.learned.forget(phase)  # next time, the timeout without learning: a learned one cannot loop
                self.on_hang(self.tail_lines(), now - last_activity, limit, phase, following)
                sent = time.monotonic()  # the evidence is gathered before anything is stopped
                self.gathering = sent - now
                self._stop(proc.pid, signal.SIGTERM, sent)
                kill_at = sent + self.grace
            # 1 s: sample accelerators, notice an exit with the pipes held open; until the first sign
            # of life, 50 ms, so the start-up time is measured from it, not from the next look (for a
            # start-up that stays silent longer, a look: a quiet child costs no more than a busy one)
            quick = exited_at or (not seen_activity and now - started < QUICK_START)
            waits = [0.05 if quick else self._look]
            waits += [
                t - now
                for t in (kill_at, last_activity + timeout if timeout and kill_at is None else None)
                if t is not None
            ]
            ready, _, _ = select.select([wake_read], [], [], max(0.0, min(waits)))
            if ready:
                for signum in _drain_signals(wake_read):
                    if signum in FORWARDED and interrupted is None:
                        interrupted = signum
                        self.on_signal(signum)
                        self._stop(proc.pid, signum, time.monotonic())
                        kill_at = time.monotonic() + self.grace

    def _limit(self, phase: str, *, steady: bool, stepping: bool) -> Limit | None:
        """The hang timeout for ``phase``: a declared one, else a learned one (in training, once the
        attempt reports steps), else the hang timeout (the initial one before a sign of life)."""
        base = self.hang_timeout if steady else self.first_hang_timeout
        if base is None:
            return None
        if phase in self.phase_timeouts:
            return Limit(self.phase_timeouts[phase], "hang.phases")
        if self.learned is not None and steady and (stepping or phase != heartbeat.TRAIN):
            learned = self.learned.limit(phase, base)
            if learned is not None:
                return Limit(learned, "learned")
        return Limit(base, "hang.timeout" if steady else "initial")

    def _pump(self, source: IO[bytes], target: int, wake: int) -> None:
        """Relay one stream, keeping its tail and noting the time; wake the watcher at its end. The stream
        is closed there: an agent restarting its command holds no pipe of an attempt gone."""
        with source:
            relay(source.fileno(), target, lambda chunk: self._keep(target, chunk), TAIL_BYTES)
        with contextlib.suppress(OSError):
            os.write(wake, b"\0")

    def _keep(self, target: int, chunk: memoryview) -> None:
        with self.tail_lock:
            tail = self.tails.setdefault(target, bytearray())
            tail += chunk
            if len(tail) > 2 * TAIL_BYTES:
                del tail[:-TAIL_BYTES]
        self.output_at = time.monotonic()
        if self.spoke_at is None and self._spoke(target, bytes(chunk)):
            self.spoke_at = self.output_at

    def _spoke(self, target: int, chunk: bytes) -> bool:
        """Whether ``chunk`` finishes a line of the training's own (a launcher's lines do not count)."""
        *lines, unfinished = (self._unread.pop(target, b"") + chunk).replace(b"\r", b"\n").split(b"\n")
        if len(unfinished) > 4096:  # a progress bar without line breaks speaks for itself
            return True
        self._unread[target] = unfinished
        return any(not launcher_line(line.decode("utf-8", errors="replace")) for line in lines)

    def tail_lines(self) -> tuple[str, ...]:
        """The last lines of stdout, then of stderr (where errors usually are)."""
        lines: list[str] = []
        with self.tail_lock:
            for fd in sorted(self.tails):
                text = bytes(self.tails[fd][-TAIL_BYTES:]).decode("utf-8", errors="replace")
                lines += text.splitlines()[-TAIL_LINES:]
        return tuple(lines)

    def _stop(self, pid: int, signum: int, now: float) -> None:
        self.stop_at = self.stop_at or now
        _signal_group(pid, signum)

    def _heartbeat_stamp(self) -> tuple[int, int] | None:
        """Changes with each beat: a touch moves the time, a phase or step replaces the file (a new inode)
        even within one tick of the file system's clock."""
        try:
            status = os.stat(self.heartbeat)
        except OSError:
            return None
        return status.st_mtime_ns, status.st_ino



def reported_step(path: Path, since: float) -> int | None:
    """The last step the command reported with ``beat(step=...)`` since ``since`` (wall clock), if any."""
    try:
        if os.stat(path).st_mtime < since:
            return None  # the previous attempt's
    except OSError:
        return None
    return heartbeat.read(path)[0]


def _drain_signals(fd: int) -> list[int]:
    try:
        return list(os.read(fd, 64))
    except BlockingIOError:
        return []


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def _kill_group(pid: int) -> None:
    _signal_group(pid, signal.SIGKILL)


def reap_orphans(keep: Collection[int] = ()) -> None:
    """Kill and reap descendants that left the group (setsid) and were reparented to us, but ``keep``:
    each by its PID, so that how a kept child ended (the warm interpreter's SIGKILL) stays its owner's to read."""
    me = os.getpid()
    for _ in range(50):
        orphans = [pid for pid in _children(me) if pid not in keep]
        for pid in orphans:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in orphans:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        if not orphans:
            return
        time.sleep(0.01)


def _children(parent: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if int(fields[1]) == parent:
            found.append(int(entry))
    return found
