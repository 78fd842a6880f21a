"""Accelerator activity through NVML, as a further hang signal: never the only one.

The platform's rule: when a job's processes stay quiet, sample accelerator utilisation; if it
does not change, the job is hung. A rank stuck in a collective reads a flat 100%, so only a
*changing* utilisation counts as life; a flat one, at any level, does not save a silent job.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

FLAT_WITHIN = 5  # percentage points: smaller swings are noise, not work


class UtilizationProbe:
    """Per-device utilisation samples; ``changing()`` says whether they moved within the window."""

    def __init__(self, sample: Callable[[], Sequence[int]], window: int = 12):
        self.sample = sample
        self.history: deque[tuple[int, ...]] = deque(maxlen=window)

    def poll(self) -> None:
        try:
            self.history.append(tuple(self.sample()))
        except Exception:  # a driver hiccup is not a reason to stop supervising
            return

    def changing(self) -> bool:
        if len(self.history) < 2:
            return False
        return any(max(series) - min(series) > FLAT_WITHIN for series in zip(*self.history, strict=False))

    def reset(self) -> None:
        self.history.clear()


def nvml_probe() -> UtilizationProbe | None:
    """A probe over every GPU NVML sees, or None without nvidia-ml-py or a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:
        return None
    if not handles:
        return None
    return UtilizationProbe(lambda: [pynvml.nvmlDeviceGetUtilizationRates(h).gpu for h in handles])
