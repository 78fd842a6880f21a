"""A copy of this node's newest memory step on another node's agent, so that a lost node's state survives it.

Each agent runs a :class:`Receiver` (a listening socket) and a :class:`Sender`, which copies the
newest complete step of this node's memory tier (:mod:`hacfg.memory`) to the next node's receiver
whenever a newer one completes. The receiver keeps, under its own tier, ``peer-<node>/step_N/``:
one step per sending node, the older one removed only once the newer is complete. A node whose tier
was lost (a new pod, an empty ``/dev/shm``) asks the node holding its copy for it back (:func:`fetch`).

One connection is one transfer. The side that will receive draws a nonce; the other sends a header
(what it is, from which node to which, the step, each file's name and size) and its MAC; the bytes
of the files follow, then a MAC over the nonce, the header and every byte. The MACs are keyed
BLAKE3 (three times HMAC-SHA256's speed on one core, and a copy hashes every byte at both ends)
under a key derived from the job's secret for peer copies of this job alone (:func:`peer_key`).
So a connection from anyone without the secret is refused before a byte is written, a recorded
transfer replayed is refused (another nonce), and a tampered stream is refused at its end and
leaves nothing. A copy is written under a hidden name and renamed into place once its MAC holds:
it is complete or absent, and a transfer cut midway (the sender killed, the link down) is dropped,
never resumed. The older copy's files, once a newer one holds, are kept to be filled by the next
(the tier's spares, :func:`hacfg.memory.retire`): a copy writes into pages that are there already.

Wire format: the receiving side's 32-byte nonce; a frame (4-byte big-endian length, the header's
JSON, its 32-byte MAC); the answer, one line (``go`` or ``refused: why``); the files' bytes in
header order; the 32-byte MAC of the whole; the answer line again. A fetch is a request (a header
of kind ``fetch`` carrying the asking node's nonce) answered by a transfer in the other direction.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import hmac
import json
import math
import mmap
import os
import secrets
import shutil
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from blake3 import blake3

from hacfg import memory
from hacfg.agent.checkpoints import yield_to_training

PEER_PREFIX = "peer-"  # the folder, under the receiving tier, of the copies of one sending node
NONCE_BYTES = 32
MAC_BYTES = 32
HEADER_LIMIT = 1 << 20  # a header beyond this is not one an agent sent
CHUNK = 1 << 20
TIMEOUT = 30.0  # a peer silent this long mid-transfer is gone
_LENGTH = struct.Struct(">I")
T = TypeVar("T")
_HIDDEN = ".incoming-"
SIGNATURE = ".signature"  # in a kept copy's folder: what its owner sent it under, checked again at a fetch


class Refused(ConnectionError):
    """The other side refused a transfer, or a transfer failed its check."""


def peer_key(secret: bytes, job: str | None) -> bytes:
    """The key peer copies are signed with: the job's secret narrowed to peer copies of this job (a
    copy's MAC is never one of the group's values, nor another job's copy)."""
    return hmac.new(secret, f"hacfg peer copies\n{job or ''}".encode(), hashlib.sha256).digest()


def peer_folder(tier: Path, node: int) -> Path:
    """Where a receiver keeps the copy of node ``node``'s newest step."""
    return tier / f"{PEER_PREFIX}{node}"


@dataclass(frozen=True)
class Ends:
    """Who a transfer is between: the job, the node whose state it is, the node that keeps it."""

    job: str
    owner: int
    keeper: int


# -- one transfer -------------------------------------------------------------------------------


def send(folder: Path, address: tuple[str, int], key: bytes, ends: Ends, *, timeout: float = TIMEOUT) -> None:
    """Copy the complete step in ``folder`` (``step_N/``) to the receiver at ``address``, blocking
    until it holds it. Raises :class:`Refused`, or OSError when the link fails."""
    with socket.create_connection(address, timeout=timeout) as link:
        nonce = _exactly(link, NONCE_BYTES)
        _send_step(link, key, nonce, ends, folder)


def fetch(tier: Path, address: tuple[str, int], key: bytes, ends: Ends, *, timeout: float = TIMEOUT) -> Path | None:
    """Fetch node ``ends.owner``'s newest step back from the receiver of ``ends.keeper`` at
    ``address`` into ``tier`` (this node's own): the step's folder, or None when it holds none."""
    with socket.create_connection(address, timeout=timeout) as link:
        theirs = _exactly(link, NONCE_BYTES)
        ours = secrets.token_bytes(NONCE_BYTES)
        _send_frame(link, key, theirs, {"kind": "fetch", **_fields(ends), "nonce": ours.hex()})
        _answer(link)
        frame = _receive_frame(link, key, ours)
        fetched = _receive_step(link, key, ours, frame, ends, tier, newer_than=None, signed_by_owner=True)
        if fetched is not None:
            link.sendall(b"ok\n")
        return fetched


def _fields(ends: Ends) -> dict[str, Any]:
    return {"job": ends.job, "owner": ends.owner, "keeper": ends.keeper}


def _send_step(
    link: socket.socket, key: bytes, nonce: bytes, ends: Ends, folder: Path | None, *, copy: bool = False
) -> None:
    """Send the step in ``folder`` (None: nothing is held) as a transfer the other side checks with
    ``nonce``; a ``copy`` kept for another node goes with the signature its owner sent it under."""
    if folder is None:
        _send_frame(link, key, nonce, {"kind": "step", **_fields(ends), "step": None, "files": []})
        _answer(link)
        return
    extra = {"signed": _signature(folder)} if copy else {}
    step = int(folder.name.removeprefix("step_"))
    with contextlib.ExitStack() as held:
        opened = []
        for path in sorted(entry for entry in folder.iterdir() if memory.RANK_NAME.fullmatch(entry.name)):
            handle = held.enter_context(open(path, "rb"))
            opened.append((path, handle, os.fstat(handle.fileno())))
        files = [[path.name, info.st_size] for path, _, info in opened]
        head = _send_frame(link, key, nonce, {"kind": "step", **_fields(ends), "step": step, "files": files, **extra})
        _answer(link)
        whole = _mac(key, nonce, head)
        for _, handle, info in opened:
            if info.st_size:
                with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped, memoryview(mapped) as view:
                    for at in range(0, info.st_size, CHUNK):
                        with view[at : at + CHUNK] as chunk:
                            whole.update(chunk)
                            link.sendall(chunk)
        # A step pruned while it went out had its files reused by a newer save: what went is torn.
        if not all(_same_file(path, info) for path, _, info in opened):
            raise Refused(f"step {step} was replaced while it was sent; the next one goes")
    link.sendall(whole.digest())
    _answer(link)


def _same_file(path: Path, info: os.stat_result) -> bool:
    try:
        now = os.stat(path)
    except OSError:
        return False
    return (now.st_dev, now.st_ino, now.st_size) == (info.st_dev, info.st_ino, info.st_size)


def _receive_step(
    link: socket.socket,
    key: bytes,
    nonce: bytes,
    frame: tuple[bytes, dict[str, Any]],
    ends: Ends,
    into: Path,
    *,
    newer_than: int | None,
    signed_by_owner: bool = False,
    admit: Callable[[int], None] | None = None,
) -> Path | None:
    """Receive the transfer whose header ``frame`` was read, checked with ``nonce``, into
    ``into/step_N`` (under a hidden name until its MAC holds): the step's folder, or None when the
    sender holds nothing. A copy sent by its owner keeps the signature it came with
    (``.signature``); one fetched back must hold under it too (``signed_by_owner``): the keeper's
    node runs a trainer that can write to its tier, so only the owner's signature says the bytes
    are the ones it saved. ``admit(step)`` may refuse a step before a byte of it comes (raising
    :class:`Refused`). Raises :class:`Refused`. The caller says ``ok`` once it is done with it."""
    head, fields = frame
    try:
        step, files = _expected(fields, ends, into, newer_than)
        owners = _owners_signature(key, fields, ends) if signed_by_owner and step is not None else None
        if admit is not None and step is not None:
            admit(step)
    except Refused as refusal:
        _refuse(link, str(refusal))
        raise
    if step is None:
        link.sendall(b"go\n")
        return None
    staging = into / f"{_HIDDEN}step_{step}.{secrets.token_hex(4)}"
    try:
        staging.mkdir(mode=0o700, parents=True)
        link.sendall(b"go\n")
        whole = _mac(key, nonce, head)
        checks = [whole] if owners is None else [whole, owners[0]]
        for name, size in files:
            _receive_file(link, staging / name, size, checks, memory.spare_of(into, name))
        if not hmac.compare_digest(_exactly(link, MAC_BYTES), whole.digest()):
            shutil.rmtree(staging, ignore_errors=True)  # gone before the sender hears why
            _refuse(link, "the bytes do not match their signature")
            raise Refused(f"node {ends.owner}'s step {step}: the bytes do not match their signature")
        if owners is not None and not hmac.compare_digest(owners[0].digest(), owners[1]):
            shutil.rmtree(staging, ignore_errors=True)
            _refuse(link, "the copy is not what its owner sent")
            raise Refused(f"node {ends.owner}'s step {step}: the copy kept is not what its owner sent")
        if not signed_by_owner:
            signature = {"nonce": nonce.hex(), "head": head.decode(), "mac": whole.hexdigest()}
            (staging / SIGNATURE).write_text(json.dumps(signature))
        final = memory.step_folder(into, step)
        if memory.complete(final):  # fetched into a tier that holds it already
            shutil.rmtree(staging)
        else:
            shutil.rmtree(final, ignore_errors=True)  # a save of it torn midway
            os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def _expected(
    fields: dict[str, Any], ends: Ends, into: Path, newer_than: int | None
) -> tuple[int | None, list[tuple[str, int]]]:
    """The step and files of a header already known to be signed with the job's key, if it is the
    transfer this side waits for and fits in ``into``'s filesystem."""
    if fields.get("kind") != "step" or [fields.get(name) for name in ("job", "owner", "keeper")] != list(
        _fields(ends).values()
    ):
        raise Refused(f"not node {ends.owner}'s step for node {ends.keeper} of this job")
    step, files = fields.get("step"), _files(fields.get("files"))
    if step is None:
        return None, []
    if not isinstance(step, int) or not files:
        raise Refused("a malformed list of files")
    if newer_than is not None and step <= newer_than:
        raise Refused(f"node {ends.owner}'s step {step} is not newer than step {newer_than}, held already")
    size = sum(length for _, length in files)
    into.mkdir(mode=0o700, parents=True, exist_ok=True)
    if size > (free := shutil.disk_usage(into).free + sum(_size(memory.spare_of(into, name)) for name, _ in files)):
        raise Refused(f"step {step} is {size / 1e9:.2f} GB; {into} has {free / 1e9:.2f} GB free")
    return step, files


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


def _signature(folder: Path) -> dict[str, str]:
    """What a kept copy came with: the nonce, header and MAC its owner sent it under."""
    try:
        signed = json.loads((folder / SIGNATURE).read_text())
    except (OSError, ValueError):
        raise Refused(f"{folder.name} has no signature from its owner") from None
    return signed if isinstance(signed, dict) else {}


def _owners_signature(key: bytes, fields: dict[str, Any], ends: Ends) -> tuple[blake3, bytes]:
    """For a fetched copy: the MAC to run over its bytes, and the one its owner sent them under,
    once the owner's header says this very step and files, sent by this node to that keeper."""
    signed = fields.get("signed")
    try:
        if not isinstance(signed, dict):
            raise TypeError(signed)
        nonce, head, mac = bytes.fromhex(signed["nonce"]), signed["head"].encode(), bytes.fromhex(signed["mac"])
        original = json.loads(head)
    except (KeyError, AttributeError, TypeError, ValueError):
        raise Refused(f"node {ends.keeper} sent no signature of node {ends.owner}'s for its copy") from None
    if original != {"kind": "step", **_fields(ends), "step": fields.get("step"), "files": fields.get("files")}:
        raise Refused(f"node {ends.keeper}'s copy is not the step node {ends.owner} sent it")
    return _mac(key, nonce, head), mac


def _files(listed: Any) -> list[tuple[str, int]]:
    """The ``[name, size]`` pairs of a header: ranks' state files, each named once; [] when malformed."""
    if not isinstance(listed, list):
        return []
    files = [
        (entry[0], entry[1])
        for entry in listed
        if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
        and memory.RANK_NAME.fullmatch(entry[0]) and isinstance(entry[1], int) and entry[1] >= 0
    ]
    return files if len(files) == len(listed) == len({name for name, _ in files}) else []


def _receive_file(link: socket.socket, path: Path, size: int, checks: list[blake3], spare: Path) -> None:
    """The next ``size`` bytes of the link into a new file at ``path`` (``spare``'s, if there is one: its
    pages are there already), each added to every one of ``checks``."""
    handle = _room(path, spare)
    try:
        if not size:
            return
        os.ftruncate(handle, size)
        if os.fstat(handle).st_blocks * 512 < size:
            os.posix_fallocate(handle, 0, size)  # room now, not a SIGBUS halfway through
        # the page table filled in one go: faulting in each page as it is written costs more than the copy
        with mmap.mmap(handle, size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE) as mapped, memoryview(mapped) as view:
            at = 0
            while at < size:
                with view[at : at + CHUNK] as room:
                    got = link.recv_into(room)
                if not got:
                    raise Refused(f"the link closed {at} bytes into {path.name} of {size}")
                with view[at : at + got] as part:
                    for check in checks:
                        check.update(part)
                at += got
    finally:
        os.close(handle)


def _room(path: Path, spare: Path) -> int:
    """``path`` opened for a copy's bytes: the spare moved there if it is a plain file of this user's
    alone (the tier is one a trainer can write: not a link to another file), else a new file."""
    with contextlib.suppress(OSError):
        os.rename(spare, path)
        handle = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        info = os.fstat(handle)
        if stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and info.st_uid == os.getuid():
            return handle
        os.close(handle)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)


def _mac(key: bytes, *parts: bytes) -> blake3:
    """A MAC under ``key``, fed ``parts``: one thread, so that a copy takes one core of a busy node."""
    mac = blake3(key=key, max_threads=1)
    for part in parts:
        mac.update(part)
    return mac


# -- frames -------------------------------------------------------------------------------------


def _send_frame(link: socket.socket, key: bytes, nonce: bytes, fields: dict[str, Any]) -> bytes:
    head = json.dumps(fields, separators=(",", ":")).encode()
    link.sendall(_LENGTH.pack(len(head)) + head + _mac(key, nonce, head).digest())
    return head


def _receive_frame(link: socket.socket, key: bytes, nonce: bytes) -> tuple[bytes, dict[str, Any]]:
    """A header and its fields, once its MAC holds; :class:`Refused` (answered) otherwise."""
    (length,) = _LENGTH.unpack(_exactly(link, _LENGTH.size))
    if length > HEADER_LIMIT:
        _refuse(link, f"a header of {length} bytes")
        raise Refused(f"a header of {length} bytes")
    head, mac = _exactly(link, length), _exactly(link, MAC_BYTES)
    if not hmac.compare_digest(mac, _mac(key, nonce, head).digest()):
        _refuse(link, "its signature does not match the job's secret")
        raise Refused("a header whose signature does not match the job's secret")
    try:
        fields = json.loads(head)
    except ValueError:
        raise Refused("a header that is not JSON") from None
    if not isinstance(fields, dict):
        raise Refused("a header that is not an object")
    return head, fields


def _answer(link: socket.socket) -> None:
    line = bytearray()
    while not line.endswith(b"\n") and len(line) < 4096:
        got = link.recv(1)
        if not got:
            raise Refused("the other side closed the link")
        line += got
    text = line.decode(errors="replace").strip()
    if text not in ("go", "ok"):
        raise Refused(text.removeprefix("refused: "))


def _refuse(link: socket.socket, why: str) -> None:
    with contextlib.suppress(OSError):
        link.sendall(f"refused: {why}\n".encode())


def _exactly(link: socket.socket, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        got = link.recv(count - len(data))
        if not got:
            raise Refused(f"the link closed after {len(data)} of {count} bytes")
        data += got
    return bytes(data)


# -- the two ends an agent runs -----------------------------------------------------------------


COPY_SHARE = 0.02  # of the training's time, the most its peer copies may cost it


class Ledger:
    """What this node's peer copies cost its training, paid for at :data:`COPY_SHARE` of the time:
    the sender starts a copy only once the ones before are paid for, skipping copy points meanwhile.

    The cost is measured, not guessed from the copy's CPU time: a copy on a node whose cores train
    slows every step it overlaps (and, in lockstep, the other nodes' too), while on a node with idle
    cores it slows nothing. So the sender watches the tier's newest step: a copy of ``took`` seconds
    during which the training completed ``during`` steps, where its usual pace before it was ``pace``
    steps a second, cost ``took - during / pace`` seconds of training, and all of ``took`` when the
    pace is not known. Nice 19 alone did not bound it: the kernel's side of a socket copy and the
    memory bus know no priority. A fetch, which a recovery waits for, is neither paced nor charged."""

    def __init__(self, share: float = COPY_SHARE):
        self.share = share
        self.free_at = time.monotonic()  # when the copies so far are paid for
        self._lock = threading.Lock()

    def charge(self, seconds: float) -> None:
        """A copy cost the training ``seconds``."""
        with self._lock:
            self.free_at = max(self.free_at, time.monotonic()) + seconds / self.share

    def owed(self) -> float:
        """Seconds until the copies so far are paid for."""
        return max(0.0, self.free_at - time.monotonic())


def lost_to_copy(took: float, during: int, pace: float | None) -> float:
    """Seconds of training a copy of ``took`` seconds cost, the training having completed ``during``
    steps meanwhile at a usual ``pace`` (steps a second; None: not known). Never more than the copy's
    own time: a trainer that claims no steps at all costs its own copies that much, no more."""
    if not pace:
        return took
    return min(took, max(0.0, took - during / pace))


class Progress:
    """The tier's newest complete step as the sender sees it over time (its own clock): the
    training's usual pace before a copy. The step numbers are the trainer's: one that lies only
    paces its own node's copies, between every copy point and one in :data:`COPY_SHARE` of its time."""

    SPAN = 30.0  # seconds of looks a pace is taken over at most
    FEWEST = 3  # steps a pace needs

    def __init__(self) -> None:
        self.looks: collections.deque[tuple[float, int]] = collections.deque()

    def look(self, step: int | None, now: float) -> None:
        if step is not None and (not self.looks or step > self.looks[-1][1]):
            self.looks.append((now, step))
        while self.looks and self.looks[0][0] < now - 2 * self.SPAN:
            self.looks.popleft()

    def pace(self, since: float, until: float) -> float | None:
        """Steps a second between ``since`` and ``until`` (at most SPAN), if enough were seen."""
        seen = [(at, step) for at, step in self.looks if max(since, until - self.SPAN) <= at <= until]
        if len(seen) < 2 or seen[-1][1] - seen[0][1] < self.FEWEST or seen[-1][0] <= seen[0][0]:
            return None
        return (seen[-1][1] - seen[0][1]) / (seen[-1][0] - seen[0][0])


def in_background(work: Callable[[], T]) -> T:
    """``work()``'s result, run on a thread of its own that yields to training (a thread cannot
    take its priority back once it gave it up)."""
    with ThreadPoolExecutor(1, thread_name_prefix="hacfg-peer-copy", initializer=yield_to_training) as pool:
        return pool.submit(work).result()


class Receiver:
    """This node's keeper of other nodes' newest steps, and of their fetches back; a thread that
    serves one connection at a time. ``echo`` hears each transfer refused or failed."""

    def __init__(
        self,
        tier: Path,
        key: bytes,
        node: int,
        *,
        job: str = "",
        host: str = "127.0.0.1",
        port: int = 0,
        timeout: float = TIMEOUT,
        keeps_own: bool = False,
        echo: Callable[[str], None] = lambda line: None,
    ):
        self.tier, self.key, self.node, self.job, self.timeout, self.echo = tier, key, node, job, timeout, echo
        self.keeps_own = keeps_own  # take only copies of steps this node holds too, and keep those (pins)
        self._listen = socket.create_server((host, port))
        self.address: tuple[str, int] = self._listen.getsockname()[:2]
        for left in tier.glob(f"{PEER_PREFIX}*/{_HIDDEN}*"):  # what a receiver killed midway left
            shutil.rmtree(left, ignore_errors=True)
        self._pin()
        self._thread = threading.Thread(target=self._serve, name="hacfg-peer-receiver", daemon=True)
        self._thread.start()

    def held(self, node: int) -> tuple[int, Path] | None:
        """The step of node ``node`` this receiver holds, and its folder."""
        return memory.newest_complete(peer_folder(self.tier, node))

    def copies(self) -> dict[int, int]:
        """The step of each node whose copy this receiver holds."""
        owners = (entry.name.removeprefix(PEER_PREFIX) for entry in self.tier.glob(f"{PEER_PREFIX}*"))
        found = {int(owner): self.held(int(owner)) for owner in owners if owner.isdigit()}
        return {owner: held[0] for owner, held in found.items() if held is not None}

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listen.shutdown(socket.SHUT_RDWR)
        self._listen.close()
        self._thread.join()

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _serve(self) -> None:
        while True:
            try:
                link, _ = self._listen.accept()
            except OSError:
                return  # closed
            with link:
                link.settimeout(self.timeout)
                try:
                    self._one(link)
                except (Refused, OSError, ValueError) as err:
                    self.echo(f"hacfg: peer copy: {err}")

    def _one(self, link: socket.socket) -> None:
        nonce = secrets.token_bytes(NONCE_BYTES)
        link.sendall(nonce)
        frame = _receive_frame(link, self.key, nonce)
        fields = frame[1]
        owner = fields.get("owner")
        if not isinstance(owner, int) or fields.get("job") != self.job or fields.get("keeper") != self.node:
            _refuse(link, f"not a transfer for node {self.node} of this job")
            raise Refused("a transfer for another node or job")
        ends = Ends(self.job, owner, self.node)
        into = peer_folder(self.tier, owner)
        held = memory.newest_complete(into)
        if fields.get("kind") == "fetch":
            link.sendall(b"go\n")
            asked = bytes.fromhex(str(fields.get("nonce")))
            _send_step(link, self.key, asked, ends, held[1] if held else None, copy=True)
            return
        admit = self._admit if self.keeps_own else None
        try:
            received = in_background(
                lambda: _receive_step(
                    link, self.key, nonce, frame, ends, into, newer_than=held[0] if held else None, admit=admit
                )
            )
            if received is not None:
                for _, older in memory.steps(into):
                    if older != received:
                        memory.retire(into, older)  # its files hold the next copy
        finally:
            self._pin()
        if received is not None:
            link.sendall(b"ok\n")  # held, and the older copy gone

    def _admit(self, step: int) -> None:
        """A copy of another node's ``step`` is only of use with this node's own state at that step
        (the two resume together): pin it, and refuse the copy when it is gone already."""
        memory.pin(self.tier, {*self.copies().values(), step})
        if not memory.complete(memory.step_folder(self.tier, step)):
            self._pin()  # as it was, before the sender hears why
            raise Refused(f"node {self.node} no longer holds its own step {step}, which a copy of it would resume with")

    def _pin(self) -> None:
        """Pin this node's own steps of the copies it keeps."""
        if self.keeps_own:
            memory.pin(self.tier, set(self.copies().values()))


class Sender:
    """Copies this node's newest complete memory step (of those at the interval ``every``, when
    given) to the receiver at ``address`` (the next node's; it may be changed while it runs) in a
    thread, each time a newer one completes and the ``ledger`` (if any) says the copies before are
    paid for; it looks every ``interval`` seconds. ``echo`` hears each copy that failed (the next
    newer step is tried in its turn)."""

    def __init__(
        self,
        tier: Path,
        address: tuple[str, int],
        key: bytes,
        ends: Ends,
        *,
        every: int | None = None,
        interval: float = 1.0,
        timeout: float = TIMEOUT,
        ledger: Ledger | None = None,
        echo: Callable[[str], None] = lambda line: None,
    ):
        self.tier, self.address, self.key, self.ends, self.every = tier, address, key, ends, every
        self.interval, self.timeout, self.echo = interval, timeout, echo
        self.ledger = ledger if ledger is not None else Ledger(math.inf)
        self.sent: int | None = None  # the newest step the receiver took from this sender
        self._tried: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hacfg-peer-sender", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def __enter__(self) -> Sender:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _run(self) -> None:
        yield_to_training()
        progress, since = Progress(), time.monotonic()  # since: the end of the copy before
        while not self._stop.is_set():
            began, before = time.monotonic(), self._newest()
            progress.look(before, began)
            newest = None if self.ledger.owed() else memory.newest_complete(self.tier, self.every)
            if newest is not None and (self._tried is None or newest[0] > self._tried):
                self._tried = newest[0]
                self._send(*newest)
                ended = time.monotonic()
                during = (self._newest() or 0) - (before or 0)
                self.ledger.charge(lost_to_copy(ended - began, during, progress.pace(since, began)))
                since = ended
            self._stop.wait(self.interval)

    def _newest(self) -> int | None:
        newest = memory.newest_complete(self.tier)
        return newest[0] if newest is not None else None

    def _send(self, step: int, folder: Path) -> None:
        address = self.address
        try:
            send(folder, address, self.key, self.ends, timeout=self.timeout)
            self.sent = step
        except (Refused, OSError) as err:
            self.echo(f"hacfg: peer copy of step {step} to {address[0]}:{address[1]}: {err}")
