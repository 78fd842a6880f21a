"""Built-in failure classifier: signals, OOM and communication/driver errors are environment faults."""

from __future__ import annotations

import re

from hacfg.plugin import Cause, Classification, Failure, hookimpl

OOM_EXIT = 137  # SIGKILL, as the kernel's OOM killer leaves it
ENVIRONMENT_PATTERNS = re.compile(
    r"NCCL (?:WARN|ERROR|error)|ncclSystemError|ncclInternalError|ncclRemoteError|HCCL|hccl.*(?:timeout|error)"
    r"|CUDA error|cudaError|CUBLAS_STATUS|CUDNN_STATUS|device-side assert.*ECC|uncorrectable ECC|ECC error|Xid"
    r"|No route to host"
    r"|Out of memory: Killed process|Killed process \d+|oom-kill|std::bad_alloc"
    r"|Bus error|Input/output error|Stale file handle|RDMA|ibv_",
    re.IGNORECASE,
)
# What a rank sees when another rank died: a consequence, recorded but never the round's cause.
PEER_PATTERNS = re.compile(
    r"Connection closed by peer|Connection reset by peer|ECONNRESET|Broken pipe"
    r"|\[[^\]]*gloo[^\]]*\].*(?:Timed out|timeout|closed|reset|Connection refused)"
    r"|NCCL.*(?:remote process exited|ncclRemoteError|Watchdog caught collective operation timeout)"
    r"|ProcessGroup\w*.*(?:timeout|timed out|Timeout)|Watchdog caught collective operation timeout"
    r"|HCCL.*(?:timeout|link down|notify wait)|DistNetworkError|DistStoreError"
    r"|c10d.*(?:store|Store).*(?:timeout|closed|failed)"
    r"|Socket Timeout|Failed to recv, got 0 bytes",
    re.IGNORECASE,
)
# torchrun's summary when one of its workers died by a signal: "exitcode : -9 (pid: 123)" and "Signal 9 (SIGKILL)".
# Signal numbers are small: a line with a longer one is not torchrun's, and its int() could fail.
CHILD_SIGNAL = re.compile(r"(?:Signal (\d{1,3}) \((SIG\w+)\) received by PID|exitcode\s*:\s*-(\d{1,3}) \(pid)")
# torch prefixes each worker's lines with "[rank0]: "; the user's traceback is still the user's.
RANK_PREFIX = r"^(?:\[(?:default)?rank\d+\]:\s?)?"
TRACEBACK = re.compile(RANK_PREFIX + r"Traceback \(most recent call last\):")
EXCEPTION_LINE = re.compile(
    RANK_PREFIX + r"([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)|AssertionError|KeyError|StopIteration)\b"
)


@hookimpl(trylast=True)
def hacfg_classify_failure(failure: Failure) -> Classification | None:
    if failure.hung:
        return Classification(Cause.HANG, "no output and no heartbeat for the hang timeout")
    if failure.signal is not None:
        return Classification(Cause.ENVIRONMENT, f"{failure.describe()}")
    if failure.exit_code == OOM_EXIT:
        return Classification(Cause.ENVIRONMENT, "exit 137: killed, most often by the out-of-memory killer")
    for line in reversed(failure.tail):  # the last telling line: what happened closest to the end
        if match := CHILD_SIGNAL.search(line):
            number = int(match.group(1) or match.group(3))
            return Classification(
                Cause.ENVIRONMENT, f"{failure.describe()}: a worker under torchrun was killed by signal {number}"
            )
        if match := PEER_PATTERNS.search(line):
            return Classification(
                Cause.ENVIRONMENT,
                f"{failure.describe()} after {match.group(0)!r}: another rank failed first",
                peer=True,
            )
        if match := ENVIRONMENT_PATTERNS.search(line):
            return Classification(Cause.ENVIRONMENT, f"{failure.describe()} after {match.group(0)!r} in the output")
    if any(TRACEBACK.match(line) for line in failure.tail):
        raised = (
            line for line in reversed(failure.tail) if EXCEPTION_LINE.match(line) and "ChildFailedError" not in line
        )
        last = re.sub(RANK_PREFIX, "", next(raised, "an exception"))  # torchrun's wrapper names no cause
        return Classification(
            Cause.USER, f"{failure.describe()}: Python exception in the command: {last.strip()[:200]}"
        )
    return None
