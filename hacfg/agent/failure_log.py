"""How a failed attempt is judged: the evidence its output left, read in order of precedence.

One reading serves the agent and ``hacfg diagnose``. Three kinds of evidence, the first that
speaks decides:

1. **How the process ended.** A signal (the agent saw it, or a launcher or shell reports it:
   torchrun's failure table, whose *Root Cause* is the first failure and whose other rows are
   workers it stopped; DeepSpeed's ``exits with return code = -9``; ModelArts' ``Training end
   with return code``; a shell's ``Killed``; the kernel's OOM killer) is an environment fault,
   as the platform rules; so is exit 137, what the OOM killer leaves. A plain exit code decides
   nothing by itself.
2. **The exception that ended the Python program**: its type, its message and where it was
   raised. Errors raised by torch.distributed, NCCL, HCCL, CUDA or the driver are environment
   faults (a lost peer's is a consequence of another rank's failure); running out of accelerator
   memory and every other exception are the user's.
3. **The runtime's error lines**: NCCL ``WARN`` and error codes, HCCL/HCCP error codes
   (``EI0006``, ``EJ0001``), Xid, ECC errors, ``GPU has fallen off the bus``, CUDA errors.

Among lines, root causes outrank their consequences, by :data:`SIGNATURES`: each kind of telling
line says how root a cause it is, what it is a cause of, and whether a restart on the same node
can fix it. A fault of the machine itself (a GPU fallen off the bus, an uncorrectable ECC error)
or a full disk explains the exceptions and errors that follow it, so it decides before them; an
Xid 64 that follows an Xid 48 is its consequence, and NCCL's ``-> N`` lines trace an error back
to where it began. Where a runtime's error shows only as such a chain, the chain is the
evidence: INFO, debug and trace lines (``NCCL INFO NET/Socket : GPU Direct RDMA Disabled``) and
echoed settings (``export HCCL_CONNECT_TIMEOUT=1200``) are never evidence otherwise, however
they are worded. Every verdict names the lines it rests on and says why the other telling lines
did not count.

It also says which lines are a launcher's own (torchrun's start-up banner, its log lines,
DeepSpeed's launcher): before the training itself speaks, the agent does not count them as a
sign of life.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence
from dataclasses import dataclass, replace

from hacfg.plugin.recovery import Classification, Failure
from hacfg.restart.vocabulary import Cause

OOM_EXIT = 137  # SIGKILL, as the kernel's OOM killer leaves it
_KNOWN_SIGNALS = frozenset(s.value for s in signal.Signals)

# --- 1. how the process ended -------------------------------------------------------------------

# What a shell prints when its foreground command dies of a signal ("run.sh: line 3: 9514 Killed
#   python train.py", "bash: 9514 Segmentation fault ...", or just "Terminated"), and Python's faulthandler.
SHELL_SIGNALS = {
    "Killed": signal.SIGKILL,
    "Terminated": signal.SIGTERM,
    "Segmentation fault": signal.SIGSEGV,
    "Aborted": signal.SIGABRT,
    "Bus error": signal.SIGBUS,
    "Floating point exception": signal.SIGFPE,
    "Illegal instruction": signal.SIGILL,
}
_NAMES = "|".join(map(re.escape, SHELL_SIGNALS))
_SHELL = re.compile(
    rf"^(?:\S.*?: (?:line \d+: +)?\d+ +(?P<job>{_NAMES})\b.*|(?P<bare>{_NAMES})(?: \(core dumped\))?)\s*$"
)
_FAULTHANDLER = re.compile(rf"Fatal Python error: (?P<name>{_NAMES})")
# torchrun: "exitcode  : -9 (pid: 77)" in its table, "failed (exitcode: 1) local_rank: 0" when the first worker fails
# Exit codes are small: a longer number is not a launcher's report, and its int() could fail.
_TORCHRUN_EXIT = re.compile(r"\bexitcode\s*:\s*(-?\d{1,4})\b")
_TORCHRUN_FIRST = re.compile(r"\bfailed \(exitcode: -?\d+\) local_rank")
_TORCHRUN_ROOT = re.compile(r"^Root Cause \(first observed failure\):")
_TORCHRUN_SIGNAL = re.compile(r"\bSignal (\d{1,3}) \(SIG\w+\) received by PID")
_TORCHRUN_SIGNALLED = re.compile(r"\bSignalException: Process \d+ got signal: (\d{1,3})")  # torchrun itself
_CAUGHT_SIGNAL = re.compile(r"\bCaught signal (\d{1,2}) \(")  # UCX's handler, as NCCL over UCX prints it
# DeepSpeed's launcher: "[ERROR] [launch.py:434:sigkill_handler] ['python', ...] exits with return code = -9"
_DEEPSPEED_EXIT = re.compile(r"\bexits with return code = (-?\d{1,4})\b")
# ModelArts' "[ModelArts Service Log][INFO] Training end with return code: 137", with or without the tags
_MODELARTS_EXIT = re.compile(r"\bTraining end with return code:\s*(\d{1,4})\b", re.IGNORECASE)
# The kernel's OOM killer, as dmesg prints it: "Out of memory: Killed process 7899 (python) ..."
_OOM_KILLER = re.compile(r"\bOut of memory: Killed process \d+|\boom-kill:|\binvoked oom-killer\b")
# torch's report of a DataLoader worker that died of a signal (the host's OOM killer takes them
# most often): "RuntimeError: DataLoader worker (pid 19597) is killed by signal: Killed."
_LOADER_KILLED = re.compile(rf"\bDataLoader worker \(pid \d+\) is killed by signal: (?P<name>{_NAMES})\b")


@dataclass(frozen=True)
class Ended:
    """A line that says how the program ended: its index in the lines read, and the code or signal."""

    index: int
    exit_code: int | None
    signal: int | None
    root: bool = False  # torchrun's report of the first worker that failed


# Words no report of an ending goes without: a line with none is passed over at the cost of a few
# substring searches, where the patterns below cost a hundred times more.
_ENDING_WORDS = (
    "killed", "terminated", "segmentation", "aborted", "bus error", "floating", "illegal", "fatal python",
    "out of memory", "oom-kill", "signal", "exitcode", "return code",
)


def _ended(index: int, text: str) -> Ended | None:
    low = text.lower()
    if not any(word in low for word in _ENDING_WORDS):
        return None
    if match := _SHELL.match(text):
        return Ended(index, None, SHELL_SIGNALS[match.group("job") or match.group("bare")])
    if match := _FAULTHANDLER.search(text):
        return Ended(index, None, SHELL_SIGNALS[match.group("name")])
    if _OOM_KILLER.search(text):
        return Ended(index, None, signal.SIGKILL)
    if match := _LOADER_KILLED.search(text):
        return Ended(index, None, SHELL_SIGNALS[match.group("name")])
    for pattern in (_TORCHRUN_SIGNAL, _TORCHRUN_SIGNALLED, _CAUGHT_SIGNAL):
        if (match := pattern.search(text)) and int(match.group(1)) in _KNOWN_SIGNALS:
            return Ended(index, None, int(match.group(1)))
    for pattern in (_TORCHRUN_EXIT, _DEEPSPEED_EXIT):
        if match := pattern.search(text):
            code = int(match.group(1))
            if code >= 0:
                return Ended(index, code, None, root=bool(_TORCHRUN_FIRST.search(text)))
            if -code in _KNOWN_SIGNALS:  # a launcher's child killed by a signal: Popen's negative code
                return Ended(index, None, -code, root=bool(_TORCHRUN_FIRST.search(text)))
            return None
    if match := _MODELARTS_EXIT.search(text):
        return Ended(index, int(match.group(1)), None)
    return None


def ending(lines: Sequence[str]) -> Ended | None:
    """The report of how the program ended, or None when no line says it.

    After the last report of success: torchrun's first failed worker when it names one (its
    other rows are workers it stopped with SIGTERM), else a signal, which beats a later non-zero
    code (a launcher, a shell or ModelArts passing the death on), else the last code."""
    reports: list[Ended] = []
    in_root = False
    for index, text in enumerate(lines):
        if _TORCHRUN_ROOT.match(text.strip()):
            in_root = True
            continue
        in_root = in_root and not text.startswith("=")  # the table's last rule ends the block
        found = _ended(index, text)
        if found is not None:
            reports.append(replace(found, root=True) if in_root else found)
    since_success = reports[max((i + 1 for i, r in enumerate(reports) if r.exit_code == 0), default=0) :]
    if not since_success:
        return reports[-1] if reports else None  # the last word is a clean exit
    first = [r for r in since_success if r.root]
    signalled = [r for r in since_success if r.signal is not None]
    return (first or signalled or since_success)[-1]


# --- 2. the exception that ended the Python program ----------------------------------------------

TRACEBACK = re.compile(r"^(?P<prefix>.*?)Traceback \(most recent call last\):")
_PREFIXED = re.compile(r"^(?P<prefix>.*?)(?:Traceback \(most recent call last\):|(?=  File \"))")
_EXCEPTION = re.compile(
    r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)|KeyError|StopIteration)(?::\s?(?P<message>.*))?$"
)
_FRAME = re.compile(r'^\s+File "(?P<path>[^"]+)", line (?P<line>\d+)')
_RANK_PREFIX = re.compile(r"^\[(?:default)?rank\d+\]:\s?")
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
# Launchers re-raise a worker's failure as their own: the worker's exception is the one that counts.
_WRAPPERS = frozenset({"ChildFailedError", "CalledProcessError", "SignalException"})
_RUNTIME_TYPES = frozenset({"DistBackendError", "DistNetworkError", "DistStoreError", "DistError"})


@dataclass(frozen=True)
class Raised:
    """An exception a traceback ended with."""

    index: int  # of its ``Type: message`` line
    type: str
    message: str
    frame: str | None  # where it was raised: ``train.py, line 12``

    @property
    def name(self) -> str:
        return self.type.rpartition(".")[2]

    def describe(self) -> str:
        where = f" (raised in {self.frame})" if self.frame else ""
        return f"{self.type}: {self.message}"[:200] + where


def exceptions(lines: Sequence[str]) -> list[Raised]:
    """The exceptions the tracebacks in ``lines`` end with, in order, each with its innermost frame.

    Lines of interleaved ranks are told apart by their prefix (``[rank1]:``, ``worker-0:``); an
    exception that another one replaced (``During handling of the above exception``) is left out."""
    prefixes = {""}
    previous: dict[str, str] = {}
    frames: dict[str, tuple[str, str]] = {}
    found: list[tuple[str, Raised]] = []
    for index, raw in enumerate(lines):
        if ("Traceback" in raw or '  File "' in raw) and (match := _PREFIXED.match(raw)):
            prefixes.add(match.group("prefix"))
        prefix = max((p for p in prefixes if raw.startswith(p)), key=len)
        text = raw[len(prefix) :]
        if prefix == "" and (rank := _RANK_PREFIX.match(text)):
            prefix, text = rank.group(0), text[rank.end() :]
        if found and found[-1][0] == prefix and text.startswith(_CHAINED):
            found.pop()
        if match := _FRAME.match(text):
            frames[prefix] = (match.group("path"), match.group("line"))
        elif (match := _EXCEPTION.match(text)) and (previous.get(prefix, "x")[:1].isspace() or "." in match["type"]):
            path, line = frames.pop(prefix, (None, None))
            frame = f"{path.rsplit('/', 1)[-1]}, line {line}" if path else None
            found.append((prefix, Raised(index, match.group("type"), match.group("message") or "", frame)))
        if text.strip():
            previous[prefix] = text
    return [raised for _, raised in found]


# --- 3. the runtime's error lines -----------------------------------------------------------------

RUNTIME_ERROR = re.compile(
    r"NCCL WARN|NCCL error|nccl(?:System|Internal|UnhandledCuda|Remote)Error"
    r"|\bE[IJ]\d{4}\b|HCCL error|\[ERROR\] HCCL|HCCL function error|Hccl\w+, error code|hccl api failed|HCCP"
    r"|\bE[0-9A-Z]9999\b|CANN error|ACL stream synchronize failed"
    r"|NPU function error|\bXid\b|ECC error|uncorrectable ECC|ECC_UNCORRECTABLE|fallen off the bus"
    r"|CUDA error|cudaError\w*|CUBLAS_STATUS_\w+|CUDNN_STATUS_\w+"
    r"|unhandled (?:system|cuda) error|No route to host|Input/output error|Stale file handle"
)
# What a rank sees when another rank died: a consequence, never the cause while the cause is in sight.
PEER = re.compile(
    r"Connection closed by (?:remote )?peer|Connection reset by peer|ECONNRESET|Broken pipe"
    r"|\[[^\]]*gloo[^\]]*\].*(?:Timed out|timeout|closed|reset|Connection refused)"
    r"|remote process exited|ncclRemoteError|Watchdog caught collective operation timeout"
    r"|ProcessGroup\w*.*(?:timeout|timed out|Timeout)|DistNetworkError|DistStoreError"
    r"|\bEI000[26]\b|\bEI0013\b|Getting socket times out|HCCL.*(?:timeout|link down|notify wait)"
    r"|\bEE1002\b|Stream synchronize timeout"  # CANN's: a collective, or a stream, that waited too long
    r"|c10d.*(?:store|Store).*(?:timeout|closed|failed)|Socket Timeout|Failed to recv, got 0 bytes",
    re.IGNORECASE,
)
# NCCL's trace of a failing call back to where it began, at INFO level: each frame it returns
# through prints its return code ("misc/socket.cc:568 -> 2", "group.cc:65 -> 2 [Async thread]").
NCCL_CHAIN = re.compile(r"NCCL INFO [\w./-]+\.(?:cc|cu|cpp|h):\d+ -> [1-9]\d*\b")
# An NPU gone: absent, its heartbeat lost, its DMA engine failed (CANN's EL0001, and the runtime's
# 507010 and 507013 in acl/error_codes/rt_error_codes.h). No restart on this node brings it back.
NPU_LOST = re.compile(r"Device_Absent|\bEL0001\b|lost heartbeat|\b50701[03]\b|sys dma error")
# An operator's kernel failed on an AI Core or a vector core (507015, 507035 and their trap
# variants), or has no binary for this chip: the program's, and it fails the same way again.
NPU_OPERATOR = re.compile(
    r"aicore (?:error|exception)|(?:an|exception of) aivec error|aivec error exception|vector core exception"
    r"|aicpu exception|there is a sdma error|\b50701[56]\b|\b50703[56]\b|does not ha(?:s|ve) any binary"
)
# The image cannot start CANN's runtime (EH9999 "[Init][Env]init env failed", then an abort): Python
# dependencies missing or a mismatched install, and the same image fails so on every node.
IMAGE_BROKEN = re.compile(r"init env failed")
# A full disk, or a full quota: whatever writes there next fails the same way.
DISK_FULL = re.compile(r"No space left on device|\[Errno 28\]|Disk quota exceeded|\[Errno 122\]")


def _xid(*codes: int) -> re.Pattern[str]:
    """The driver's Xid line for ``codes``: "NVRM: Xid (PCI:0000:07:00): 48, pid=...", "Xid 79"."""
    alternatives = "|".join(map(str, codes))
    return re.compile(rf"\bXid\b(?: \([^)]*\))?:? ?(?:{alternatives})\b")


# How root a cause a line is: a higher rank outranks a lower one wherever it stands in the log.
MACHINE = 50  # the machine itself failed: it explains the exceptions and errors after it
AFTER_MACHINE = 40  # what the driver records after such a fault (a page retirement, a CUDA ECC report)
RUNTIME = 30  # an error of the runtime (NCCL WARN, a CUDA error, an HCCL code)
OPERATOR = 35  # a kernel of the program failed on the device: what the runtime's catch-all codes report
CHAIN = 20  # NCCL's INFO trace of an error back to where it began
CONSEQUENCE = 10  # what a rank sees when another one failed


@dataclass(frozen=True)
class Signature:
    """A kind of telling line: how root a cause it is, what it is a cause of, and what a restart
    can do about it. The first signature a line matches is its kind; see :data:`SIGNATURES`."""

    name: str
    pattern: re.Pattern[str]
    rank: int
    cause: Cause = Cause.ENVIRONMENT
    peer: bool = False  # another rank's failure, seen from here
    relocate: bool = False  # no restart on the same node can fix it: the job moves at once
    first: bool = False  # of several such lines, the first is the cause (it starts a cascade); else the last
    unless: re.Pattern[str] | None = None  # with such a line there too, a restart here can fix it after all


# Root causes before their consequences, by rank (NVIDIA's Xid catalog for the device faults).
# A classifier of another runtime's errors adds rows here, with its own ranks.
SIGNATURES = (
    Signature("a GPU fallen off the bus", _xid(79), MACHINE, relocate=True, first=True),
    Signature("a GPU fallen off the bus", re.compile("fallen off the bus"), MACHINE, relocate=True, first=True),
    # a double-bit ECC error: the GPU moves unless the driver says it remapped the row (Xid 63)
    Signature("an uncorrectable ECC error (Xid 48)", _xid(48), MACHINE, relocate=True, first=True, unless=_xid(63)),
    Signature("an uncontained ECC error (Xid 95)", _xid(95), MACHINE, relocate=True, first=True),
    Signature("a contained ECC error (Xid 94)", _xid(94), MACHINE, first=True),
    Signature("a full disk", DISK_FULL, MACHINE, cause=Cause.DISK_FULL, first=True),
    Signature("an NPU lost", NPU_LOST, MACHINE, relocate=True, first=True),
    Signature("an image that cannot start CANN's runtime", IMAGE_BROKEN, MACHINE, cause=Cause.USER, first=True),
    Signature("a failed row remapping or page retirement (Xid 64)", _xid(64), AFTER_MACHINE, relocate=True),
    Signature("a row remapping or page retirement (Xid 63)", _xid(63), AFTER_MACHINE),
    Signature("an ECC error", re.compile(r"ECC error|uncorrectable ECC|ECC_UNCORRECTABLE"), AFTER_MACHINE),
    Signature("an operator's kernel failed on the NPU", NPU_OPERATOR, OPERATOR, cause=Cause.USER, first=True),
    Signature("a lost peer", PEER, CONSEQUENCE, peer=True),
    Signature("an NCCL error chain", NCCL_CHAIN, CHAIN, first=True),
    Signature("an error of the runtime", RUNTIME_ERROR, RUNTIME),
)


def signature(text: str) -> Signature | None:
    """The kind of telling line ``text`` is, or None for a line that is no evidence."""
    if _DEVICE_ASSERT.search(text) or (quiet(text) and not NCCL_CHAIN.search(text)):
        return None
    return next((found for found in SIGNATURES if found.pattern.search(text)), None)


def cause_of(lines: Sequence[str], indexes: Sequence[int]) -> tuple[int, Signature] | None:
    """The line among ``indexes`` that is the root cause: the highest rank; among lines of one rank,
    the first where the signature starts a cascade, else the last."""
    found = [(i, kind) for i in indexes if (kind := signature(lines[i])) is not None]
    if not found:
        return None
    rank = max(kind.rank for _, kind in found)
    top = [(i, kind) for i, kind in found if kind.rank == rank]
    return top[0] if top[0][1].first else top[-1]


def relocating(lines: Sequence[str], indexes: Sequence[int]) -> Signature | None:
    """A fault among ``indexes`` that no restart on the same node can fix, or None."""
    kinds = {kind for i in indexes if (kind := signature(lines[i])) is not None}
    return next(
        (
            kind
            for kind in sorted(kinds, key=lambda kind: -kind.rank)
            if kind.relocate and not (kind.unless and any(kind.unless.search(lines[i]) for i in indexes))
        ),
        None,
    )


# Out of accelerator memory: the model or batch does not fit, and will not fit on the next attempt either.
OUT_OF_MEMORY = re.compile(
    r"OutOfMemoryError|(?:CUDA|NPU) out of memory|CUDA error: out of memory"
    r"|is more than total mem size|Memory_Allocation_Failure|\bEL0004\b"  # MindSpore's and CANN's
)
# An assertion in a kernel (an index out of range, most often): the user's bug, though CUDA reports it.
_DEVICE_ASSERT = re.compile(r"device-side assert")
# Never evidence: a line at INFO, DEBUG or TRACE level (not "NCCL_DEBUG=INFO", which names a setting) ...
_LEVELS = ("INFO", "DEBUG", "TRACE", "c10d - debug")
_LEVEL = re.compile(r"(?<![=\w])(?:INFO|DEBUG|TRACE)\b(?!=)|\[c10d - debug\]")
_GLOG_INFO = re.compile(r"(?:\[\w+\]:)?\[?[IDV]\d{4} \d\d:\d\d:\d\d")  # "I1201 15:43:38.705 ...", glog's INFO
# ... and a setting echoed by a script (``export HCCL_CONNECT_TIMEOUT=1200``, ``+ NCCL_DEBUG=INFO``).
_SETTING = re.compile(r"^\s*(?:\+\s*)?(?:export\s+|declare -x\s+|setenv\s+)?[A-Za-z_][A-Za-z0-9_]*=")
# CANN's advice under an error code ("Possible Cause: 1. ... HCCL_EXEC_TIMEOUT", "Solution: ..."): its words
# name timeouts and peers, but it is the same text whatever happened.
_ADVICE = re.compile(r"(?:^|\s)(?:Possible Cause|Solution): ")
# A line that names the runtime without saying it failed: what the old wording wrongly counted.
_MENTIONS = re.compile(r"NCCL|HCCL|HCCP|RDMA|ibv_|\bXid\b|\bECC\b|CUDA|NVRM|\bE[IJ]\d{4}\b", re.IGNORECASE)


# ... and the words no telling line goes without (an error of the runtime, a lost peer, running out
# of memory, a mention of the runtime), as for the endings above.
_TELLING_WORDS = (
    "nccl", "hccl", "hccp", "cuda", "cublas", "cudnn", "xid", "ecc", "npu", "nvrm", "rdma", "ibv_", "fallen",
    "unhandled", "route", "input/output", "stale file", "peer", "pipe", "econnreset", "gloo", "remote process",
    "watchdog", "processgroup", "distnetwork", "diststore", "socket", "c10d", "recv", "out of memory", "outofmemory",
    "no space left", "errno 28", "quota exceeded", "errno 122", "cann", "heartbeat", "device_absent", "dma error",
    "aicore", "aivec", "vector core", "any binary", "total mem size", "memory_allocation", "aicpu", "sdma error",
    "init env failed", "synchronize timeout", "acl stream synchronize",
)
_CODE = re.compile(r"\bE[0-9A-Z]\d{4}\b|\b507\d{3}\b")  # HCCL's and CANN's error codes, the runtime's results


def telling(text: str) -> bool:
    """Whether a line could be evidence or worth saying why it is not (a cheap test before the patterns)."""
    low = text.lower()
    return any(word in low for word in _TELLING_WORDS) or bool(_CODE.search(text))


def quiet(text: str) -> str | None:
    """Why a line is no evidence by itself (an INFO or debug line, an echoed setting, CANN's advice), or
    None. NCCL's INFO chain of an error (:data:`NCCL_CHAIN`) is the one kind of INFO line that tells."""
    if _SETTING.match(text):
        return "an echoed setting"
    if _ADVICE.search(text):
        return "CANN's advice on an error, not an event"
    if _GLOG_INFO.match(text) or (any(level in text for level in _LEVELS) and _LEVEL.search(text)):
        return "an INFO or debug line"
    return None


# --- launchers' own lines ----------------------------------------------------------------------

_LAUNCHER = re.compile(
    r"^\s*$|^\*+$|^Setting OMP_NUM_THREADS environment variable for each process"
    r"|^\[?[IWEF]\d{4} [\d:.]+ +\d+ \S*torch/distributed/"  # torchrun's log lines (glog prefix)
    r"|^(?:INFO|WARNING|ERROR):torch\.distributed\."  # torchrun's log lines (older torch)
    r"|^\[[\d\- :,]+\] \[(?:INFO|WARNING|ERROR)\] \[(?:launch|runner|launcher_helper)\.py:"  # DeepSpeed's launcher
)


def launcher_line(text: str) -> bool:
    """Whether a line is a launcher's own (torchrun's banner and log, DeepSpeed's launcher), not the training's."""
    return bool(_LAUNCHER.match(text))


# --- the verdict ---------------------------------------------------------------------------------


def weigh(failure: Failure) -> Classification:
    """The platform's rules applied to the evidence, most telling first; see the module's docstring."""
    if failure.hung:
        return Classification(Cause.HANG, "no output and no heartbeat for the hang timeout")
    lines = failure.tail
    report = ending(lines)
    raised = [r for r in exceptions(lines) if r.name not in _WRAPPERS]
    candidates = [i for i, text in enumerate(lines) if telling(text)]
    memory = [i for i in candidates if OUT_OF_MEMORY.search(lines[i]) and not quiet(lines[i])]
    moving = relocating(lines, candidates)

    def verdict(cause: Cause, reason: str, evidence: Sequence[int], by: str, *, peer: bool = False) -> Classification:
        said = tuple(lines[i] for i in evidence)
        others = _not_counted(lines, candidates, evidence, by, {r.index for r in raised})
        relocate = cause == Cause.ENVIRONMENT and not peer and moving is not None
        if relocate and moving is not None:
            reason += f"; {moving.name}: no restart on this node can fix it"
        return Classification(cause, reason, peer=peer, evidence=said, not_counted=others, relocate=relocate)

    root = cause_of(lines, candidates)
    # 0. what the job brought cannot run (an image that cannot start the runtime): the abort or exit that
    # follows is its consequence, and the same fails on any node
    if root is not None and root[1].rank >= MACHINE and root[1].cause == Cause.USER:
        index, kind = root
        reason = f"{failure.describe()}: {kind.name}: {lines[index].strip()[:200]}; the same fails on any node"
        return verdict(kind.cause, reason, [index], MACHINE_FAULT)
    # 1. how the process ended
    worker = report.signal if report is not None else None
    if failure.signal is not None:
        evidence = [report.index] if report is not None and report.signal == failure.signal else []
        return verdict(Cause.ENVIRONMENT, failure.describe(), evidence, ENDED)
    if worker is not None:
        assert report is not None
        name = signal.Signals(worker).name
        return verdict(Cause.ENVIRONMENT, f"{failure.describe()}: a worker was killed by {name}", [report.index], ENDED)
    if OOM_EXIT in (failure.exit_code, report.exit_code if report else None):
        evidence = [report.index] if report is not None and report.exit_code == OOM_EXIT else []
        return verdict(Cause.ENVIRONMENT, "exit 137: killed, most often by the out-of-memory killer", evidence, ENDED)
    ended = [report.index] if report is not None else []
    # the machine failed (a device, a full disk): it explains whatever was raised and logged after it
    if root is not None and root[1].rank >= MACHINE:
        index, kind = root
        reason = f"{failure.describe()}: {kind.name}: {lines[index].strip()[:200]}"
        return verdict(kind.cause, reason, [*ended, index], MACHINE_FAULT)
    # 2. the exception that ended the program: the first that is not a consequence of another rank's
    if raised:
        own = [r for r in raised if not PEER.search(r.describe())]
        first = (own or raised)[0]
        ended_by, evidence = f"{failure.describe()}: ", [*ended, first.index]
        if not own:
            reason = f"another rank failed first: {first.describe()}"
            return verdict(Cause.ENVIRONMENT, ended_by + reason, evidence, RAISED, peer=True)
        if OUT_OF_MEMORY.search(first.describe()):
            reason = f"out of accelerator memory, as it will be on the next attempt: {first.describe()}"
            return verdict(Cause.USER, ended_by + reason, evidence, RAISED)
        runtime = RUNTIME_ERROR.search(first.message) and not _DEVICE_ASSERT.search(first.message)
        if first.name in _RUNTIME_TYPES or runtime:
            said = f"{ended_by}error of the runtime: {first.describe()}"
            if (waited := _waited_after(lines, first.index)) is not None:  # CANN's block says on what
                reason = f"{said}, waiting on another rank: {lines[waited].strip()[:200]}{_remote(lines[waited])}"
                return verdict(Cause.ENVIRONMENT, reason, [*ended, waited], RAISED, peer=True)
            return verdict(Cause.ENVIRONMENT, said, evidence, RAISED)
        reason = f"Python exception in the command: {first.describe()}"
        return verdict(Cause.USER, ended_by + reason, evidence, RAISED)
    if memory:  # an out-of-memory error whose traceback is out of sight
        reason = f"out of accelerator memory, as it will be on the next attempt: {lines[memory[-1]].strip()[:200]}"
        return verdict(Cause.USER, f"{failure.describe()}: {reason}", [*ended, memory[-1]], RAISED)
    # 3. the runtime's error lines: the root cause among them, and a consequence of another rank's last
    if root is not None:
        index, kind = root
        said = f"{failure.describe()} after {lines[index].strip()[:200]!r}"
        if kind.peer:
            reason = f"{said}: another rank failed first{_remote(lines[index])}"
            return verdict(Cause.ENVIRONMENT, reason, [*ended, index], LOGGED, peer=True)
        if kind.rank == RUNTIME and (waited := _waited_after(lines, index)) is not None:  # CANN's block says on what
            reason = f"{said}, waiting on another rank: {lines[waited].strip()[:200]}{_remote(lines[waited])}"
            return verdict(Cause.ENVIRONMENT, reason, [*ended, waited], LOGGED, peer=True)
        return verdict(kind.cause, f"{said} in the output", [*ended, index], LOGGED)
    return verdict(Cause.USER, f"{failure.describe()}, not recognised as an environment fault", ended, "")


# The CANN block under a runtime error: the error code lines and their detail, as printed after it.
_BLOCK = 12
_CANN = re.compile(r"\bE[0-9A-Z]\d{4}\b|HCCL", re.IGNORECASE)  # a line of CANN's or HCCL's own
# A line that names the rank it waited for: HCCL's "remote rank: [24]" (not "[unknown]").
_REMOTE_RANK = re.compile(r"remote rank:? ?\[?(\d+)\]?", re.IGNORECASE)


def _waited_after(lines: Sequence[str], index: int) -> int | None:
    """The first line of the CANN block after an error that says it waited on another rank (EI0002, an
    HCCL task timeout, EE1002): what the error's own words (ACL failed, error code 507046) do not."""
    block = range(index + 1, min(index + 1 + _BLOCK, len(lines)))
    waited = (at for at in block if _CANN.search(lines[at]) and (kind := signature(lines[at])) and kind.peer)
    return next(waited, None)


def _remote(text: str) -> str:
    """`` (remote rank 24, as the line names it)`` when the line names the rank it waited for."""
    found = _REMOTE_RANK.search(text)
    return f" (remote rank {found.group(1)}, as the line names it)" if found else ""


# What decided, in the words of the lines it outranked
ENDED, RAISED, LOGGED = "how the process ended", "the exception that ended the program", "a line nearer the root cause"
MACHINE_FAULT = "a fault of the machine itself"


def _not_counted(
    lines: Sequence[str], candidates: Sequence[int], decisive: Sequence[int], by: str, raised: set[int]
) -> tuple[str, ...]:
    """Why the other telling lines did not count: one entry per reason, with how many and the first."""
    kept = set(decisive)
    why: dict[str, list[str]] = {}
    for index in sorted({*candidates, *raised} - kept):
        text = lines[index]
        if index in raised:
            why.setdefault(f"raised an exception, outranked by {by}", []).append(text.strip())
            continue
        reason = quiet(text)
        if signature(text) is not None:
            reason = f"outranked by {by}" if by else "not recognised"
        elif reason is not None and not _MENTIONS.search(text):
            reason = None  # a quiet line that does not even name the runtime: nothing to say
        if reason is not None:  # else a word in passing (a path, a version), not a claim
            why.setdefault(reason, []).append(text.strip())
    return tuple(
        f"{reason} ({len(found)} {'line' if len(found) == 1 else 'lines'}): {found[0][:160]!r}"
        + (" ..." if len(found) > 1 else "")
        for reason, found in why.items()
    )
