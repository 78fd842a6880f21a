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
compute (NTP keeps it to milliseconds), and a rank that reports its stamps 80 ms early makes its
healthy peers look slow. So a slowdown names a rank, and moving the job takes more: the job's own
pace must have worsened when the rank turned slow. A rank's ``period``, the time from one
collective to the next, is timed on its own clock alone, where a skew cancels; in synchronous
training it is the same for every rank, the slowest one's step. The group's period is the median of
the ranks' (no one rank moves it among three). A :class:`Pace` carries the group's period since the
rank turned slow and over the ``PACE`` collectives before: a straggler that costs anything lengthens
the one over the other, while a rank that looked slow from the first collectives seen (a skewed or
lying clock, or a node slow from the start) has no pace before it to weigh, and a load on the whole
machine that came before the rank was named slows both. :func:`hacfg.plan.model.straggler_price`
weighs the two before a move.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

WINDOW = 12  # collectives per score: a few spikes among them leave the median where it was
THRESHOLD = 1.5  # slowdown from which a rank is a straggler
INTERVAL = 1.0  # seconds between samples: each costs a rank about a millisecond of its hook's thread
PACE = 2 * WINDOW  # collectives over which the job's period is a mean: a step's several collectives even out
MOST = 100.0  # no slowdown is read above this: a rank cannot claim its peers are a thousand times slower
Arrivals = Mapping[int, Iterable[Sequence[int | str]]]  # rank -> [[process group, sequence number, ns], ...]


@dataclass(frozen=True)
class Pace:
    """One rank's pace against the group's."""

    node: int
    rank: int
    slowdown: float  # its compute over the others' median: 2.0 for twice as long
    collectives: int  # how many collectives the median is over
    since: float = 0.0  # when it turned slow, or if it is not, when its window began (seconds since the epoch)
    ranks: int = 0  # how many ranks it was compared among
    period: float = 0.0  # the group's seconds from one collective to the next since then (newest PACE), own clocks
    before: float = 0.0  # the group's such period over the PACE collectives before then (0: fewer were seen)

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
        timed: list[tuple[int, dict[int, int]]] = []  # (when a collective ended, each rank's time to the next)
        for last, then in _consecutive(key for key, seen in sorted(self.arrived.items()) if len(seen) == len(ranks)):
            ended = max(self.arrived[last].values())
            compute = {rank: max(self.arrived[then][rank] - ended, 0) for rank in ranks}
            timed.append((ended, {rank: self.arrived[then][rank] - self.arrived[last][rank] for rank in ranks}))
            for rank in ranks:
                others = statistics.median(c for r, c in compute.items() if r != rank)
                if others > 0:
                    ratios[rank].append((min(compute[rank] / others, MOST), ended))
        timed.sort(key=lambda pair: pair[0])
        found = []
        for rank in ranks:
            if newest := ratios[rank][-self.window :]:
                slowdown = round(statistics.median(ratio for ratio, _ in newest), 3)
                began = _turned_slow(ratios[rank], self.window) if slowdown >= THRESHOLD else newest[0][1]
                since = [periods for ended, periods in timed if ended >= began][-PACE:]
                prior = [periods for ended, periods in timed if ended < began][-PACE:]
                period, before = _period(since, ranks), _period(prior, ranks) if len(prior) == PACE else 0.0
                pace = Pace(self.nodes[rank], rank, slowdown, len(newest), began / 1e9, len(ranks), period, before)
                found.append(pace)
        return found


def _turned_slow(ratios: Sequence[tuple[float, int]], window: int) -> int:
    """When the rank's newest run of slow windows began: the first collective of the oldest window, among
    those every later one of which is slow too, whose median reaches the threshold."""
    start = max(len(ratios) - window, 0)
    while start > 0 and statistics.median(ratio for ratio, _ in ratios[start - 1 : start - 1 + window]) >= THRESHOLD:
        start -= 1
    return ratios[start][1]


def _period(window: Sequence[Mapping[int, int]], ranks: Sequence[int]) -> float:
    """The group's seconds from one collective to the next over ``window``: each rank's mean on its own clock
    (a step's several collectives and its compute averaged alike), the median of the ranks'."""
    if not window:
        return 0.0
    return round(statistics.median(sum(periods[rank] for periods in window) / len(window) for rank in ranks) / 1e9, 4)


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
