"""A stand-in for torch_npu's HCCL flight recorder, for machines without an NPU: the same function
name, arguments and JSON as torch_npu's own (torch_npu/csrc/distributed/Init.cpp, ``_dump_hccl_trace_json``;
TraceUtils.h, ``HCCLTraceBuffer::dump_json``, version "2.4").

What it holds is what ProcessGroupHCCL records for three all-reduces of the default group, the third
not yet started on the device: groups named ``group_name_<n>`` in the entries and ``pg_config`` but
keyed by their id in ``pg_status`` (whose numbers are strings), no ``profiling_name`` (``initWork`` is
given ""), and nothing at all unless ``TORCH_HCCL_TRACE_BUFFER_SIZE`` sizes the ring (default 0),
read once, as ProcessGroupHCCL reads it when the group is made.
"""

import json
import os
import time
from types import SimpleNamespace

_RING = int(os.environ.get("TORCH_HCCL_TRACE_BUFFER_SIZE", "0"))
_MADE = time.time_ns()


def _entry(seq: int, completed: bool) -> dict:
    return {
        "record_id": seq - 1,
        "pg_id": 0,
        "process_group": ["group_name_0", ""],
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": "",
        "time_created_ns": _MADE + seq * 1_000_000,
        "input_sizes": [[3, 4]],
        "input_dtypes": ["Float"],
        "output_sizes": [[3, 4]],
        "output_dtypes": ["Float"],
        "state": "completed" if completed else "scheduled",
        "time_discovered_started_ns": 0,
        "time_discovered_completed_ns": _MADE + seq * 1_000_000 + 500_000 if completed else 0,
        "retired": completed,
        "timeout_ms": 3636000,
        "is_p2p": False,
    }


def _dump_hccl_trace_json(includeCollectives=None, onlyActive=None):  # torch_npu's keyword names
    result = {
        "version": "2.4",
        "pg_config": {"group_name_0": {"name": "group_name_0", "desc": "", "ranks": "[0]"}},
        "pg_status": {"0": {"last_enqueued_collective": "3", "last_started_collective": "-1",
                            "last_completed_collective": "2"}},
    }
    recorded = [_entry(seq, seq < 3) for seq in (1, 2, 3)][-_RING:] if _RING > 0 else []
    entries = [e for e in recorded if not (onlyActive and e["state"] == "completed")]
    if includeCollectives is not False and entries:
        result["entries"] = entries
    return json.dumps(result).encode()


_C = SimpleNamespace(_distributed_c10d=SimpleNamespace(_dump_hccl_trace_json=_dump_hccl_trace_json))
