"""The agent's counters and goodput in Prometheus' text format, for dashboards and alerts.

``hacfg agent --metrics-file PATH`` rewrites ``PATH`` atomically after every event and every
``REFRESH_SECONDS`` (name it ``*.prom`` in node_exporter's ``--collector.textfile.directory``);
``--metrics-port [HOST:]PORT`` serves ``/metrics`` over HTTP, on 127.0.0.1 unless a host is given.
Both show the same families (listed in docs/goodput.md), computed from the node's whole event log,
earlier agents' events included, as of the moment they are read: wall time and ETTR move while an
attempt runs. Every label value of every counter is there from the start, at 0, so ``increase()``
sees the first failure of each cause. When the agent ends, the endpoint stays up until a scrape
has read the final values, or for ``--metrics-linger`` at most. Metrics are no reason to stop a
job: a port that cannot be served is a warning and an event, and the training starts anyway.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hacfg.agent.records import goodput
from hacfg.restart.vocabulary import Action, Ending, Event
from hacfg.scenario.source import InputError

PREFIX = "hacfg_"
REFRESH_SECONDS = 15.0  # node_exporter's and Prometheus' default scrape interval
FAILURE_CAUSES = [ending for ending in Ending if ending != Ending.SUCCESS]


def _prometheus() -> Any:
    try:
        import prometheus_client
    except ImportError:
        need = "--metrics-file and --metrics-port need prometheus_client"
        raise InputError(f"{need}: pip install 'hacfg[metrics]'") from None
    return prometheus_client


class Metrics:
    """Keeps the node's events and renders them as metric families on every collection."""

    def __init__(
        self,
        history: list[dict[str, Any]],
        *,
        textfile: Path | None = None,
        echo: Callable[[str], None] = print,
        refresh: float = REFRESH_SECONDS,
    ):
        self.prometheus = _prometheus()
        self.events = list(history)
        self.textfile = textfile
        self.echo = echo
        self.lock = threading.Lock()  # a scrape runs on the server's thread
        self.registry = self.prometheus.CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self.server: Any = None
        self.broken = False
        self.finished = threading.Event()  # the agent's last event is recorded
        self.final_scrape = threading.Event()  # ... and a scrape has been sent it
        self._collected = threading.local()  # whether this thread's last collection had the final values
        self._stop_refresh = threading.Event()
        self._writing = threading.Lock()  # one render-and-rename at a time, so an older render never lands last
        self._refresher: threading.Thread | None = None
        if textfile is not None:
            self._refresher = threading.Thread(target=self._refresh, args=(refresh,), name="hacfg-metrics", daemon=True)
            self._refresher.start()

    def serve(self, host: str, port: int) -> int:
        """Serve ``/metrics`` from a background thread; the port it listens on (OSError if it cannot)."""
        self.server, _ = self.prometheus.start_http_server(port, addr=host, registry=self.registry)
        self.server.set_app(self._telling_final_scrape(self.server.get_app()))
        return int(self.server.server_port)

    def _telling_final_scrape(self, app: Callable[..., Any]) -> Callable[..., Any]:
        """``app``, setting ``final_scrape`` once a response with the final values has been sent: the
        agent exits then, and a response cut short by its exit would be no scrape."""

        def respond(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterator[bytes]:
            self._collected.final = False
            yield from app(environ, start_response)
            if self._collected.final:
                self.final_scrape.set()

        return respond

    def record(self, event: dict[str, Any]) -> None:
        """One more event (an :class:`~hacfg.agent.records.events.EventLog` listener); rewrite the textfile.
        The agent's exit is its last: from then on the values are final, and a scrape that reads
        them lets the agent go."""
        with self.lock:
            self.events.append(event)
            if event.get("event") == Event.AGENT_EXIT:
                self.finished.set()
        self._write_textfile()

    def _refresh(self, every: float) -> None:
        """Between events too: wall time and ETTR move while an attempt runs."""
        while not self._stop_refresh.wait(every):
            self._write_textfile()

    def _write_textfile(self) -> None:
        if self.textfile is None:
            return
        from hacfg.fsutil import write_output

        try:
            with self._writing:
                write_output(self.textfile, self.prometheus.generate_latest(self.registry))
        except OSError as err:
            if not self.broken:
                self.broken = True
                reason = err.strerror or err
                self.echo(f"[hacfg] cannot write metrics to {self.textfile}: {reason}; supervision continues")

    def close(self, linger: float = 0.0) -> None:
        """Stop, once a scrape has read the final values or after ``linger`` seconds."""
        self.finished.set()
        self._stop_refresh.set()
        if self._refresher is not None:
            self._refresher.join()
        self._write_textfile()
        if self.server is not None:
            self.final_scrape.wait(linger)
            self.server.shutdown()
            self.server.server_close()

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with self.lock:  # the events and whether they are all, read together
            events = list(self.events)
            finished = self._collected.final = self.finished.is_set()
        # while the agent runs, time runs on between its events
        result = goodput.breakdown(events, now=None if finished else datetime.now(UTC))
        counters: dict[str, Any] = next((e for e in reversed(events) if "counted" in e), {})
        kinds = [e.get("event") for e in events]
        bounds = [k for k in kinds if k in (Event.ATTEMPT_START, Event.ATTEMPT_EXIT, Event.AGENT_START)]
        running = bool(bounds) and bounds[-1] == Event.ATTEMPT_START

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            return GaugeMetricFamily(PREFIX + name, doc, value=value)

        yield gauge("attempt", "The current attempt number (HACFG_ATTEMPT).", counters.get("attempt", 0))
        yield gauge("attempt_running", "1 while the training command runs.", int(running))
        yield gauge("restarts", "Restarts so far, counted against restart.max or not.", counters.get("restarts", 0))
        yield gauge("restarts_counted", "Restarts counted against restart.max.", counters.get("counted", 0))
        yield gauge("restarts_max", "restart.max.", counters.get("max_restarts", 0))
        failures = CounterMetricFamily(PREFIX + "failures", "Attempts that failed, by cause.", labels=["cause"])
        exits = [e for e in events if e.get("event") == Event.ATTEMPT_EXIT]
        causes = Counter(e.get("cause") for e in exits if e.get("cause") != Ending.SUCCESS)
        for cause in sorted({*FAILURE_CAUSES, *map(str, causes)}):
            failures.add_metric([cause], causes[cause])
        yield failures
        yield CounterMetricFamily(PREFIX + "hangs", "Hangs detected.", value=kinds.count(Event.HANG))
        decisions = CounterMetricFamily(PREFIX + "decisions", "Decisions taken after attempts.", labels=["action"])
        actions = Counter(e.get("action") for e in events if e.get("event") == Event.DECISION)
        for action in sorted({*Action, *map(str, actions)}):
            decisions.add_metric([action], actions[action])
        yield decisions
        seconds = GaugeMetricFamily(PREFIX + "goodput_seconds", "The wall time by goodput kind.", labels=["kind"])
        for kind, value in result.totals.items():
            seconds.add_metric([kind], value)
        yield seconds
        yield _straggler_scores(events)
        yield gauge("wall_seconds", "First event to now (to the last event once the agent ended).", result.wall)
        yield gauge("ettr_ratio", "Effective training time ratio: productive over wall time.", result.ettr)
        if events:
            latest = goodput.when(events[-1]).timestamp()
            yield gauge("last_event_timestamp_seconds", "When the latest event was written.", latest)


def _straggler_scores(events: list[dict[str, Any]]) -> Any:
    """Each rank named a straggler since the newest attempt started, at its score: the family is
    empty while no rank straggles, and a restart clears it."""
    from prometheus_client.core import GaugeMetricFamily

    family = GaugeMetricFamily(
        PREFIX + "straggler_score",
        "Relative speed of a rank named a straggler in the current attempt: 1 as fast as the group, 0.5 half.",
        labels=["node", "rank"],
    )
    starts = [index for index, e in enumerate(events) if e.get("event") == Event.ATTEMPT_START]
    for event in events[starts[-1] if starts else 0 :]:
        if event.get("event") == Event.STRAGGLER:
            family.add_metric([str(event.get("node")), str(event.get("rank"))], float(event.get("score") or 0))
    return family
