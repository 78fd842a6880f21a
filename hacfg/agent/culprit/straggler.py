"""Which rank is slow: a pure score over when each rank arrived at the group's collectives.

In synchronous data-parallel training every rank's step takes as long as the slowest one's, since
each waits for the last in the all-reduce: step times cannot tell the slow rank. Arrivals can. The
flight recorder stamps each collective when a rank enqueues it (``time_created_ns``; gloo records
nothing more: no start, no end, no duration), and the collective ends when the last rank arrives.
So a rank's compute before collective ``k`` is its arrival at ``k`` less the last arrival at
``k - 1``: the rank that computes twice as long arrives last every time, the others hardly compute
and then wait. Each rank's compute is compared with the median of the others' (for two ranks, the
other's), collective by collective; the rank's ``slowdown`` is the median of those ratios over the
newest ``WINDOW`` collectives, so one spike (a garbage collection, a slow batch) moves nothing, and
``score`` is its inverse, 1.0 for a rank as fast as the group (NVIDIA's resiliency extension
reports the same relative score). A rank is a straggler once its slowdown reaches ``THRESHOLD``
over a full window.

Arrivals are wall-clock times from each rank's own machine: a clock skew between nodes reads as
compute, so it must stay well below a step (NTP keeps it to milliseconds).
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

WINDOW = 12  # collectives per score: a few spikes among them leave the median where it was
THRESHOLD = 1.5  # slowdown from which a rank is a straggler
INTERVAL = 1.0  # seconds between samples: each costs a rank about a millisecond of its hook's thread
Arrivals = Mapping[int, Iterable[Sequence[int | str]]]  # rank -> [[process group, sequence number, ns], ...]


@dataclass(frozen=True)
class Pace:
    """One rank's pace against the group's."""

    node: int
    rank: int
    slowdown: float  # its compute over the others' median: 2.0 for twice as long
    collectives: int  # how many collectives the median is over
    since: float = 0.0  # when the window began: the first of its collectives ended (seconds since the epoch)
    ranks: int = 0  # how many ranks it was compared among

    @property
    def score(self) -> float:
        """Relative speed, 1.0 as fast as the group, 0.5 for half its speed."""
        return round(min(1.0, 1 / self.slowdown), 3) if self.slowdown > 0 else 1.0

    def straggles(self) -> bool:
        """Slow by the threshold over a whole window: one slow collective is a spike, not a straggler."""
        return self.collectives >= WINDOW and self.slowdown >= THRESHOLD


class Pacer:
    """Arrivals gathered from every node's samples, and each rank's pace over the newest window."""

    def __init__(self, window: int = WINDOW, keep: int = 256):
        self.window = window
        self.keep = keep  # collectives remembered; older ones are forgotten
        self.arrived: dict[tuple[str, int], dict[int, int]] = {}  # (group, seq) -> rank -> ns
        self.nodes: dict[int, int] = {}  # rank -> node

    def add(self, node: int, arrivals: Arrivals) -> None:
        """One node's sample: per rank, the collectives it enqueued lately and when."""
        for rank, entries in arrivals.items():
            self.nodes[int(rank)] = node
            for group, seq, ns in entries:
                self.arrived.setdefault((str(group), int(seq)), {})[int(rank)] = int(ns)
        for stale in sorted(self.arrived)[: max(0, len(self.arrived) - self.keep)]:
            del self.arrived[stale]

    def paces(self) -> list[Pace]:
        """Each rank's pace over the newest ``window`` collectives that every rank was seen at."""
        ranks = sorted(self.nodes)
        if len(ranks) < 2:
            return []
        ratios: dict[int, list[tuple[float, int]]] = {rank: [] for rank in ranks}  # (ratio, when the step began)
        for before, after in _consecutive(key for key, seen in sorted(self.arrived.items()) if len(seen) == len(ranks)):
            ended = max(self.arrived[before].values())
            compute = {rank: max(self.arrived[after][rank] - ended, 0) for rank in ranks}
            for rank in ranks:
                others = statistics.median(c for r, c in compute.items() if r != rank)
                if others > 0:
                    ratios[rank].append((compute[rank] / others, ended))
        found = []
        for rank in ranks:
            newest = ratios[rank][-self.window :]
            if newest:
                slowdown = round(statistics.median(ratio for ratio, _ in newest), 3)
                found.append(Pace(self.nodes[rank], rank, slowdown, len(newest), newest[0][1] / 1e9, len(ranks)))
        return found


def _consecutive(keys: Iterable[tuple[str, int]]) -> Iterable[tuple[tuple[str, int], tuple[str, int]]]:
    """Pairs of collectives one after the other in the same process group."""
    previous: tuple[str, int] | None = None
    for key in keys:
        if previous is not None and previous[0] == key[0] and previous[1] + 1 == key[1]:
            yield previous, key
        previous = key


class Watch:
    """While an attempt runs: every ``interval`` seconds, a sample of this node's ranks, shared with
    the group; where the samples meet (node 0, or a node on its own), each rank that straggles is
    told to ``found`` once, with its pace."""

    def __init__(
        self,
        node: int,
        sample: Callable[[], Arrivals],
        share: Callable[[int, Arrivals], Sequence[tuple[int, Arrivals]] | None],
        found: Callable[[Pace], object],
        interval: float = INTERVAL,
    ):
        self.node = node
        self.sample = sample
        self.share = share
        self.found = found
        self.interval = interval
        self.pacer = Pacer()
        self.named: set[int] = set()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="hacfg-straggler")

    def __enter__(self) -> Watch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop sampling (before a hang's evidence is taken: one asker at a time)."""
        self.done.set()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout=5)

    def _run(self) -> None:
        while not self.done.wait(self.interval):
            try:
                samples = self.share(self.node, self.sample())
            except Exception:  # a sample lost is no reason to disturb training
                continue
            if samples is None or self.done.is_set():
                continue
            for node, arrivals in samples:
                self.pacer.add(node, arrivals)
            for pace in self.pacer.paces():
                if pace.rank not in self.named and pace.straggles():
                    self.named.add(pace.rank)
                    self.found(pace)
