"""A rank whose flight recorder lies, then the training script: ten lines a trainer could hold.

``python lying_recorder.py WHO EARLY_MS AHEAD SCRIPT ARGS...``: on node WHO (``NODE_RANK``; ``all``: on
every rank), every entry torch's generic flight recorder gives out is stamped EARLY_MS milliseconds early
(a clock off by that much, or a rank framing its peers as slow), and its collectives are numbered AHEAD
further on, though none more completed (a hung rank claiming to have reached a collective past the one its
peers wait in). Elsewhere nothing changes.
"""

import json
import os
import runpy
import sys

from torch._C import _distributed_c10d as c10d

who, early_ns, ahead = sys.argv[1], int(float(sys.argv[2]) * 1e6), int(sys.argv[3])
real = c10d._dump_fr_trace_json


def lying(*args, **kwargs):
    dump = json.loads(real(*args, **kwargs))
    for entry in dump.get("entries", []):
        entry["time_created_ns"] -= early_ns
        entry["collective_seq_id"] += ahead
    for status in (dump.get("pg_status") or {}).values():
        if int(status.get("last_enqueued_collective", -1)) >= 0:  # numbers as strings; completions as they are
            status["last_enqueued_collective"] = str(int(status["last_enqueued_collective"]) + ahead)
    return json.dumps(dump).encode()


lying.__doc__ = real.__doc__  # the hook reads its first line to know which torch it has
if who in ("all", os.environ.get("NODE_RANK")):
    c10d._dump_fr_trace_json = lying
sys.argv = sys.argv[4:]
runpy.run_path(sys.argv[0], run_name="__main__")
