"""The group's values are signed: anyone who reaches node 0's store can write keys, only the job's
agents can sign them.

Every value a node acts on is ``MAC NODE ROUND PAYLOAD``: HMAC-SHA256 with the job's secret over
the job's identity (:func:`hacfg.agent.records.identity.job_identity`), this store's nonce (node 0
draws one each time it opens a store), the key name, the signing node, the round and the JSON
payload. A value is used only if its MAC holds, it was signed for this job, this store, the key it
was read from and the round the reader is in, and (for plans, decisions and the like) by the node
that may write it. So a value recorded in another job sharing the secret (every resubmission of a
Volcano job shares its Secret), or in this job before node 0's agent restarted, never verifies.

The secret comes from the platform when it provides one (``HACFG_GROUP_SECRET``, or a file named
by ``HACFG_GROUP_SECRET_FILE``, such as a mounted Kubernetes Secret); otherwise node 0 creates it,
mode 0600, on the checkpoint storage every node already shares and trusts, in a file named after
the job (a new job gets a new secret), and the others wait for it there. An agent on its own
creates one the same way in its state folder. The agent never passes the secret on: no attempt,
nor anything it starts, finds it in its environment.

The same secret seals the agent's own files (:mod:`hacfg.agent.records.sealed`), under a key
derived from it for the job: :class:`JobSecret` fetches it once for both.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import json
import os
import secrets
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hacfg.agent.records import sealed
from hacfg.scenario.source import InputError

SECRET_ENV = "HACFG_GROUP_SECRET"
SECRET_FILE_ENV = "HACFG_GROUP_SECRET_FILE"
SECRET_NAME = "group.secret"  # in node 0's state folder on the shared checkpoint storage
MIN_SECRET_BYTES = 16


class Rejected(ValueError):
    """A value from the store that must not be acted on: forged, stale or malformed."""


class NoSecret(Exception):
    """Node 0's secret did not appear on the shared storage in time, or could not be created."""


@dataclass
class JobSecret:
    """The job's secret, fetched once (:func:`job_secret`) for all it seals: the group's values and
    the agent's own files. ``create``: this agent makes it when the platform gives none (node 0, or
    an agent on its own); ``shared``: other nodes read it (a group), so it cannot be one of this
    agent's own."""

    env: Mapping[str, str]
    folder: Path
    job: str | None
    create: bool
    timeout: float
    shared: bool = False
    file: Path | None = None  # the file this agent created, removed when the job is over
    _value: bytes | None = field(default=None, repr=False)

    def value(self) -> bytes:
        if self._value is None:
            try:
                self._value, file = job_secret(dict(self.env), self.folder, self.job, create=self.create,
                                               timeout=self.timeout)
            except OSError as err:  # a full or read-only checkpoint storage
                raise NoSecret(f"cannot create the job's secret in {self.folder}: {err.strerror or err}") from None
            self.file = file if self.create else None
        return self._value

    def for_this_agent(self) -> None:
        """A secret of this agent's life alone, where none can be kept: what it seals, no later agent opens."""
        self._value = secrets.token_bytes(32)

    def file_key(self) -> bytes:
        return sealed.file_key(self.value(), self.job)

    def forget(self) -> None:
        """The job is over: remove the secret this agent created, so the next job gets its own."""
        forget(self.file)


@dataclass(frozen=True)
class Signer:
    """Seals values for the store as node ``rank`` and opens the other nodes' values."""

    secret: bytes
    rank: int
    job: str = ""  # the job's identity, when the platform names the job
    store: str = ""  # the nonce of the store the values are for; "" before one is known

    def for_store(self, nonce: str) -> Signer:
        return replace(self, store=nonce)

    def seal(self, key: str, number: int, value: Any) -> str:
        payload = json.dumps(value, separators=(",", ":"))
        return f"{self._mac(key, self.rank, number, payload)} {self.rank} {number} {payload}"

    def open(self, key: str, raw: bytes | str, *, number: int | None, node: int | None = None) -> tuple[int, Any]:
        """The round and payload of ``raw`` read from ``key``, if it was signed for ``key`` in round
        ``number`` (any round for None) and by ``node``, when only one node may write the key."""
        text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
        parts = text.split(" ", 3)
        if len(parts) != 4 or not parts[1].isdigit() or not parts[2].isdigit():
            raise Rejected("not a signed value")
        mac, signer, signed_round, payload = parts[0], int(parts[1]), int(parts[2]), parts[3]
        if not hmac.compare_digest(mac, self._mac(key, signer, signed_round, payload)):
            raise Rejected("its signature does not match the job's secret")
        if number is not None and signed_round != number:
            raise Rejected(f"stale: signed for round {signed_round}, not round {number}")
        if node is not None and signer != node:
            raise Rejected(f"signed by node {signer}; only node {node} writes it")
        try:
            return signed_round, json.loads(payload)
        except ValueError:
            raise Rejected("its payload is not JSON") from None

    def _mac(self, key: str, signer: int, number: int, payload: str) -> str:
        message = f"{self.job}\n{self.store}\n{key}\n{signer}\n{number}\n{payload}".encode()
        return hmac.new(self.secret, message, hashlib.sha256).hexdigest()


def secret_path(shared_folder: Path, job: str | None) -> Path:
    """Where node 0 keeps the secret of job ``job``: a file of its own per job, so a secret left by
    an earlier job (one that ended with 138 keeps it for its restart) never signs for the next."""
    if job is None:
        return shared_folder / SECRET_NAME
    digest = hashlib.sha256(job.encode()).hexdigest()[:16]
    return shared_folder / SECRET_NAME.replace(".", f".{digest}.", 1)


def without_secret(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a process the agent starts: the trainer and what it starts never hold the key."""
    return {name: value for name, value in env.items() if name != SECRET_ENV}


def job_secret(
    env: dict[str, str], shared_folder: Path, job: str | None, *, create: bool, timeout: float
) -> tuple[bytes, Path | None]:
    """The job's secret and, when node 0 keeps it on the shared storage, the file it is in.

    The platform's secret wins; else node 0 (``create``) makes the job's file in ``shared_folder``
    once, and every node waits at most ``timeout`` seconds for it to appear.
    """
    if env.get(SECRET_ENV):
        return _checked(env[SECRET_ENV].encode(), SECRET_ENV), None
    if env.get(SECRET_FILE_ENV):
        named = Path(env[SECRET_FILE_ENV])
        try:
            return _checked(named.read_bytes().strip(), str(named)), None
        except OSError as err:
            reason = err.strerror or err
            raise InputError(f"cannot read the group secret ({SECRET_FILE_ENV}): {reason}", file=str(named)) from None
    path = secret_path(shared_folder, job)
    if create:
        _create(path)
    deadline = time.monotonic() + timeout
    while True:
        found = _read_private(path)
        if found is not None:
            return found, path
        if time.monotonic() >= deadline:
            raise NoSecret(
                f"no group secret at {path} within {timeout:g}s: node 0 creates it on the checkpoint storage "
                f"every node shares (or set {SECRET_ENV} or {SECRET_FILE_ENV} on every node)"
            )
        time.sleep(0.2)


def forget(path: Path | None) -> None:
    """Remove a secret node 0 created, once the job is over: the next job on this storage gets a new one."""
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _checked(secret: bytes, where: str) -> bytes:
    if len(secret) < MIN_SECRET_BYTES:
        raise InputError(f"the group secret in {where} is {len(secret)} bytes; it needs at least {MIN_SECRET_BYTES}")
    return secret


def _create(path: Path) -> None:
    """Write a new secret beside ``path`` and link it into place: no node ever reads half of one,
    and a secret that is already there (a restarted node 0) is kept."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    draft = path.with_name(f".{path.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        draft.unlink()  # a draft of an earlier node 0 that died writing it
    try:
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            secret = secrets.token_hex(32).encode()
            if os.write(fd, secret) < len(secret):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(draft))
            os.fsync(fd)
        finally:
            os.close(fd)
        with contextlib.suppress(FileExistsError):
            os.link(draft, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            draft.unlink()


def _read_private(path: Path) -> bytes | None:
    """The secret in ``path``; None while it is not there yet. A link, a file others may read, or one
    another user owns (who could have chosen the secret) is refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as err:
        reason = err.strerror or err
        raise InputError(f"cannot open the group secret: {reason} (a symlink is refused)", file=str(path)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o077:
            mode = stat.filemode(info.st_mode)
            need = "a regular file only its owner can read (600)"
            raise InputError(f"the group secret must be {need}, not {mode}", file=str(path))
        if info.st_uid != os.geteuid():
            owner = f"user {info.st_uid}, not to this agent's user {os.geteuid()}"
            raise InputError(f"the group secret belongs to {owner}: remove it, node 0 makes a new one", file=str(path))
        return _checked(os.read(fd, 4096).strip(), str(path))
    finally:
        os.close(fd)
