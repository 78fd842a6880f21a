"""The peer copy of a memory step, measured side by side in one run on this machine:

- the loopback link's rate: a plain socket copy of the same bytes, read from the same shared-memory
  files and received into a buffer (no signature, nothing written);
- the signature alone over the same bytes (keyed BLAKE3 on one thread, as a copy signs; each end
  of a transfer computes it once), and HMAC-SHA256, which it replaced, beside it;
- ``peer.send``: a step of STATE_MB (two ranks' files) from one node's tier to another's receiver,
  signed, written under a hidden name into the files of the copy before and renamed into place, as
  a fraction of the link's rate (each send a newer step, as a job's copies are);
- ``peer.fetch``: the same step back into an empty tier, as after a node loss, and whether it comes
  back bit-identical.

Both ends run in this process (threads; the socket calls and the hashing release the GIL). Each
figure is the median of REPEATS. The state must fit in /dev/shm three times over (own tier, the
peer's copy, the fetched copy): STATE_MB shrinks to a third of what is free.

Run: python bench/peer.py   (BENCH_PEER_STATE_MB=1024, BENCH_PEER_REPEATS=3)
"""

from __future__ import annotations

import hashlib
import hmac
import mmap
import os
import shutil
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

from hacfg import memory
from hacfg.agent.group import peer

REPEATS = int(os.environ.get("BENCH_PEER_REPEATS", "3"))
RANKS = 2
KEY = peer.peer_key(os.urandom(32), "bench")
ENDS = peer.Ends("bench", owner=0, keeper=1)


def state_mb() -> int:
    wanted = int(os.environ.get("BENCH_PEER_STATE_MB", "1024"))
    return min(wanted, shutil.disk_usage(memory.ROOT).free // 3 >> 20)


def timed(action: Callable[[], object]) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def rank_files(folder: Path) -> list[Path]:
    return sorted(path for path in folder.iterdir() if memory.RANK_NAME.fullmatch(path.name))


def each_chunk(path: Path, use: Callable[[memoryview], object]) -> None:
    """``use`` each CHUNK of the file's bytes as ``peer.send`` reads them, from a read-only mapping."""
    with (
        open(path, "rb") as handle,
        mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped,
        memoryview(mapped) as view,
    ):
        for at in range(0, len(mapped), peer.CHUNK):
            with view[at : at + peer.CHUNK] as chunk:
                use(chunk)


def plain_copy(files: list[Path]) -> None:
    """The same bytes through a loopback socket, the sender reading them as ``peer.send`` does."""
    total = sum(path.stat().st_size for path in files)
    with socket.create_server(("127.0.0.1", 0)) as listen:

        def drain() -> None:
            link, _ = listen.accept()
            buffer = memoryview(bytearray(peer.CHUNK))
            left = total
            with link:
                while left:
                    left -= link.recv_into(buffer[: min(left, peer.CHUNK)])

        reader = threading.Thread(target=drain)
        reader.start()
        with socket.create_connection(listen.getsockname()[:2]) as link:
            for path in files:
                each_chunk(path, link.sendall)
        reader.join()


def signature(files: list[Path]) -> None:
    whole = peer._mac(KEY)
    for path in files:
        each_chunk(path, whole.update)


def hmac_sha256(files: list[Path]) -> None:
    whole = hmac.new(KEY, b"", hashlib.sha256)
    for path in files:
        each_chunk(path, whole.update)


def main() -> None:
    size_mb = state_mb()
    tiers = [Path(tempfile.mkdtemp(dir=memory.ROOT, prefix="hacfg-bench-")) for _ in range(3)]
    own, keeper, restored = tiers
    try:
        generator = torch.Generator().manual_seed(7)
        states = [
            {"weights": torch.rand(size_mb * (1 << 20) // RANKS // 4, generator=generator), "step": 1}
            for _ in range(RANKS)
        ]
        for rank, state in enumerate(states):
            folder = memory.save(own, 1, state, rank=rank, ranks=RANKS)
        files = rank_files(folder)
        gb = sum(path.stat().st_size for path in files) / 1e9
        with peer.Receiver(keeper, KEY, 1, job="bench") as receiver:
            peer.send(folder, receiver.address, KEY, ENDS)  # the first copy: the next ones fill its files
            sent = [1]

            def send() -> None:
                sent.append(sent[-1] + 1)
                os.rename(memory.step_folder(own, sent[-2]), memory.step_folder(own, sent[-1]))  # a newer step
                peer.send(memory.step_folder(own, sent[-1]), receiver.address, KEY, ENDS)

            def fetch() -> None:
                for folder in restored.iterdir():  # each fetch into an empty tier, as after a node loss
                    shutil.rmtree(folder)
                peer.fetch(restored, receiver.address, KEY, ENDS)

            rates = {}
            for name, action in (("link", lambda: plain_copy(files)), ("signature", lambda: signature(files)),
                                 ("hmac", lambda: hmac_sha256(files)), ("send", send), ("fetch", fetch)):
                rates[name] = gb / statistics.median(timed(action) for _ in range(REPEATS))
        back = memory.newest_complete(restored)
        same = back is not None and all(
            torch.equal(memory.load(memory.rank_file(back[1], rank))["weights"], state["weights"])
            for rank, state in enumerate(states)
        )
        print(f"state {gb:.2f} GB in {RANKS} rank files; median of {REPEATS}; shared machine "
              f"({os.cpu_count()} cores, others working): figures vary from run to run")
        print(f"loopback link (plain socket copy)  {rates['link']:6.2f} GB/s")
        print(f"keyed BLAKE3 alone, one thread     {rates['signature']:6.2f} GB/s")
        print(f"HMAC-SHA256 alone                  {rates['hmac']:6.2f} GB/s")
        for name in ("send", "fetch"):
            print(f"peer.{name:5}                      {rates[name]:6.2f} GB/s  = {rates[name] / rates['link']:.2f} of the link")
        print(f"fetched back bit-identical: {same}")
    finally:
        for tier in tiers:
            shutil.rmtree(tier, ignore_errors=True)


if __name__ == "__main__":
    main()
