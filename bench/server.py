"""The editor's wait: from a keystroke (didChange) to hacfg's diagnostics (publishDiagnostics), with
a warm `hacfg server`, next to what an editor without it runs on every save: a cold `hacfg lint`.

Run: python bench/server.py [FILE]. Target: a warm round trip under 5 ms for a scenario file.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import Timing, Verdict, ms, require, time_command, verdicts_table

TARGET_MS = 5.0
ROUND_TRIPS = 200
WARMUP = 20
EXAMPLE = Path(__file__).resolve().parent.parent / "examples/llama-pretrain/ha.yaml"


async def round_trips(file: Path, count: int) -> list[float]:
    """Seconds from sending each change to receiving its diagnostics, over a real stdio session."""
    from lsprotocol import types
    from pygls.lsp.client import LanguageClient

    client = LanguageClient("hacfg-bench", "1")
    arrived: dict[int, asyncio.Future] = {}

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def published(params: types.PublishDiagnosticsParams) -> None:
        waiting = arrived.pop(params.version, None)
        if waiting is not None:
            waiting.set_result(time.perf_counter())

    await client.start_io(require("hacfg"), "server", cwd=str(file.parent))
    await client.initialize_async(types.InitializeParams(types.ClientCapabilities(), process_id=None, root_uri=file.parent.as_uri()))
    client.initialized(types.InitializedParams())
    uri, text = file.as_uri(), file.read_text(encoding="utf-8")
    loop = asyncio.get_running_loop()

    async def send(version: int, notify) -> float:
        arrived[version] = loop.create_future()
        start = time.perf_counter()
        notify()
        return await asyncio.wait_for(arrived[version], 30) - start

    await send(1, lambda: client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "yaml", 1, text))))
    # each keystroke appends or removes one comment character at the end: the file stays valid
    end = len(text.splitlines())
    times = []
    for version in range(2, count + 2):
        typed = version % 2 == 1
        where = types.Range(types.Position(end, 0), types.Position(end, 0 if typed else 1))
        change = types.TextDocumentContentChangePartial(range=where, text="#" if typed else "")
        params = types.DidChangeTextDocumentParams(types.VersionedTextDocumentIdentifier(version=version, uri=uri), [change])
        times.append(await send(version, lambda p=params: client.text_document_did_change(p)))
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return times


def verdicts(file: Path = EXAMPLE) -> list[Verdict]:
    trips = asyncio.run(round_trips(file, WARMUP + ROUND_TRIPS))[WARMUP:]
    warm = Timing("server round trip", trips)
    cold = time_command("hacfg lint FILE", [require("hacfg"), "lint", str(file)])
    median_ms = warm.median * 1000
    return [Verdict("server round trip (warm)", _ms_fine(warm), f"cold hacfg lint {ms(cold)}", warm.median / cold.median, f"< {TARGET_MS:g} ms", median_ms < TARGET_MS)]


def _ms_fine(timing: Timing) -> str:
    """Median, with the 90th percentile: sub-millisecond figures need the decimals."""
    p90 = statistics.quantiles(timing.runs, n=10)[-1]
    return f"{timing.median * 1000:.2f}ms (p90 {p90 * 1000:.2f})"


def main() -> None:
    print(verdicts_table(verdicts(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else EXAMPLE)))


if __name__ == "__main__":
    main()
