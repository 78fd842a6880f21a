"""``hacfg server``: a language server, so an editor shows hacfg's findings while the file is typed.

On open and on every change it lints the editor's text, not the file on disk, with the same
``lint_file`` as ``hacfg lint`` and under the file's own path: settings, per-file ignores and
suppression comments apply as on the command line. Hovering over a finding shows what
``hacfg explain`` prints; a finding with a safe fix offers it as a quick fix, and the fix-all
action does what ``hacfg fix`` would. Positions go out in the client's code units (UTF-16
unless it negotiated another encoding).

Only the files a ``hacfg lint`` of the repository picks are linted: by name (``ha.yaml``,
``*.ha.yaml``, the ``include`` globs) or by content (a scenario file or a request body, as the
editor holds it), unless ``.gitignore`` or a skipped folder keeps the walk away; an editor that
starts the server for every YAML and JSON file sees nothing on the others.

Lines are the protocol's (broken at ``\r\n``, ``\r`` and ``\n`` only), not libyaml's, which also
break at U+0085, U+2028 and U+2029. The framing is read here rather than by pygls, so that a bad
or oversized ``Content-Length`` is answered with an error and skipped, and the next message is
read as usual (``shutdown`` included).
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.workspace import TextDocument
from pygls.workspace.position_codec import ServerTextPosition, ServerTextRange

from hacfg import __version__
from hacfg.lint import discover, fix
from hacfg.lint import engine as lint
from hacfg.lint import formatters as report
from hacfg.lint.settings import Settings, find_settings
from hacfg.scenario import config
from hacfg.scenario.source import MAX_BYTES, InputError, line_starts

FIX_ALL = f"{types.CodeActionKind.SourceFixAll.value}.hacfg"
_SEVERITY = {
    "error": types.DiagnosticSeverity.Error,
    "warning": types.DiagnosticSeverity.Warning,
    "info": types.DiagnosticSeverity.Information,
}
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # the protocol's lines, whatever else str.splitlines breaks on


@dataclass(frozen=True)
class Shown:
    """One diagnostic as the client has it, and the finding it came from (None: the file could not be linted)."""

    diagnostic: types.Diagnostic
    finding: lint.Finding | None


class HacfgServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("hacfg", __version__)
        self.shown: dict[str, list[Shown]] = {}

    def lint(self, uri: str) -> None:
        """Lint the editor's text of ``uri`` and publish the findings in place of the previous ones."""
        document = self.workspace.get_text_document(uri)
        self.shown[uri] = shown = _lint(document)
        diagnostics = [s.diagnostic for s in shown]
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=document.version)
        )

    def forget(self, uri: str) -> None:
        self.shown.pop(uri, None)
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    def start_io(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
        """Serve until ``exit`` or the end of input, with hacfg's framing; exit as the client was told:
        0 after ``shutdown``, else 1."""
        from pygls.io_ import StdoutWriter

        self._stop_event = threading.Event()
        self.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
        code = 0
        try:
            asyncio.run(self._serve(Frames(stdin or sys.stdin.buffer)))
        except BrokenPipeError:
            pass  # the client went away
        except SystemExit as done:  # how pygls ends on exit
            code = done.code if isinstance(done.code, int) else 0
        finally:
            self.shutdown()  # type: ignore[no-untyped-call]
        if code:
            raise SystemExit(code)

    async def _serve(self, frames: Frames) -> None:
        loop = asyncio.get_running_loop()
        while self._stop_event is not None and not self._stop_event.is_set():
            frame = await loop.run_in_executor(self.thread_pool, frames.next)
            if frame is None:
                return
            self._receive(frame)

    def _receive(self, frame: bytes | str) -> None:
        """Handle one message; answer what cannot be handled with JSON-RPC's error, if anyone waits for it."""
        if isinstance(frame, str):
            self._answer(None, PARSE_ERROR, frame)
            return
        try:
            data = json.loads(frame)
        except ValueError as err:
            self._answer(None, PARSE_ERROR, f"the message is not JSON: {err}")
            return
        if not isinstance(data, dict) or data.get("jsonrpc") != "2.0":
            request = isinstance(data, dict) and "method" in data and isinstance(data.get("id"), int | str)
            why = 'a message is an object with "jsonrpc": "2.0"'
            self._answer(data["id"] if request else None, INVALID_REQUEST, why)
            return
        try:
            message = self.protocol.structure_message(data)  # params it cannot read: logged by _Answered
        except JsonRpcException as err:
            if "id" in data and "method" in data:  # a request: its sender waits for an answer
                self._answer(data["id"], err.code, f"{data['method']}: {err.message}")
            return
        try:
            self.protocol.handle_message(message)
        except Exception as err:  # a handler's bug must not end the session
            self._report_server_error(err, JsonRpcInternalError)

    def _answer(self, msg_id: object, code: int, message: str) -> None:
        self.protocol._send_data({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}})


class _Answered(logging.Filter):
    """Drops pygls's tracebacks of a client's mistake: params it cannot read (``"params": 5``, a
    position past 2**31) or a command nobody registered. The request is answered with its error
    code (-32602); a client's mistake is no server error to print."""

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("Unable to deserialize message"):
            return False
        return not (record.exc_info and isinstance(record.exc_info[1], JsonRpcInvalidParams))


logging.getLogger("pygls.protocol.json_rpc").addFilter(_Answered())

PARSE_ERROR, INVALID_REQUEST = -32700, -32600
MAX_MESSAGE = 4 * MAX_BYTES  # a file hacfg reads, JSON-escaped in a didOpen, fits with room to spare
_MAX_HEADER = 1 << 12
_CONTENT_LENGTH = re.compile(rb"Content-Length:[ \t]*(\d+)[ \t]*\r?\n$", re.IGNORECASE)


class Frames:
    """JSON-RPC messages from a stream framed by ``Content-Length`` headers, which keeps its place
    whatever the client sends: ``next()`` is a message's bytes, a framing error to answer (a string;
    the stream then resynchronises at the next ``Content-Length`` header, also one glued to the end
    of a body its length did not cover), or None at the end of the input."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.buffer = bytearray()

    def next(self) -> bytes | str | None:
        length: int | None = None
        error = None
        while True:
            line = self._line()
            if line is None:
                return None
            if line.strip():
                match = _CONTENT_LENGTH.search(line)
                if match:
                    length, error = int(match.group(1)), None
                    if length > MAX_MESSAGE:
                        length, error = None, f"Content-Length {match.group(1).decode()} is over {MAX_MESSAGE} bytes"
                elif line.startswith(b"Content-Length") and length is None:
                    error = f"bad header {line.decode('utf-8', 'replace').strip()!r}"
                continue
            if length is not None:
                return self._body(length)
            if error is not None:
                return error
            # a blank line between messages, or the end of a body skipped after a framing error

    def _fill(self) -> bool:
        chunk = self.stream.read1(1 << 16) if hasattr(self.stream, "read1") else self.stream.read(1 << 16)
        self.buffer += chunk
        return bool(chunk)

    def _line(self) -> bytes | None:
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0:
                line = bytes(self.buffer[: end + 1])
                del self.buffer[: end + 1]
                return line
            if len(self.buffer) > _MAX_HEADER:  # a skipped body: only its end may hold the next header
                del self.buffer[:-_MAX_HEADER]
            if not self._fill():
                return None

    def _body(self, length: int) -> bytes | None:
        """``length`` bytes; fewer when a whole message and the next header arrive first (the length was
        too large, and waiting for the rest would wait for ever)."""
        while len(self.buffer) < length:
            glued = self._next_header()
            if glued is not None:
                body = bytes(self.buffer[:glued])
                del self.buffer[:glued]
                return body
            if not self._fill():
                return None
        body = bytes(self.buffer[:length])
        del self.buffer[:length]
        return body

    def _next_header(self) -> int | None:
        at = self.buffer.find(b"Content-Length:")
        while at > 0:
            try:
                json.loads(self.buffer[:at])
                return at
            except ValueError:
                at = self.buffer.find(b"Content-Length:", at + 1)
        return None


def _lint(document: TextDocument) -> list[Shown]:
    """What `hacfg lint` would report for this text, unsuppressed, placed as the client counts."""
    path = Path(document.path or document.uri)
    places = _Places(document)
    try:
        settings = _settings(path.parent.resolve())
        rules = lint.registry()
        found = None if _passed_by(path) else discover.chosen(path, settings, document.source)
        if found is None:
            return []
        findings = lint.lint_file(path, settings, rules, text=document.source, found=found)
    except InputError as err:  # the settings, or a file that cannot be read as text at all
        start = types.Position(line=0, character=0)
        return [
            Shown(
                types.Diagnostic(
                    types.Range(start=start, end=start), str(err), types.DiagnosticSeverity.Error, source="hacfg"
                ),
                None,
            )
        ]
    shown = []
    for finding in findings:
        if finding.suppressed is None:
            where = places.range(finding)
            diagnostic = types.Diagnostic(
                where, finding.message, _SEVERITY[finding.severity], code=finding.rule, source="hacfg"
            )
            shown.append(Shown(diagnostic, finding))
    return shown


_SETTINGS_FILES = (".hacfg.toml", "pyproject.toml")  # where find_settings looks, in each folder upwards
_settings_read: dict[Path, tuple[tuple[int | None, ...], Settings]] = {}


def _settings(folder: Path) -> Settings:
    """The settings for files in ``folder``, parsed again only when a file that may hold them changed:
    a stat per candidate is a hundred times cheaper than reading a pyproject.toml on every keystroke."""
    stamp = tuple(_mtime(candidate / name) for candidate in (folder, *folder.parents) for name in _SETTINGS_FILES)
    known = _settings_read.get(folder)
    if known is None or known[0] != stamp:
        settings = find_settings(folder)
        settings.check_rule_ids(set(lint.registry()))
        known = _settings_read[folder] = (stamp, settings)
    return known[1]


_passed: dict[Path, bool] = {}


def _passed_by(path: Path) -> bool:
    """Whether a walk passes ``path`` by (.gitignore, skipped folders), decided again after a save:
    reading the ignore files of a repository on every keystroke costs more than the lint."""
    if path not in _passed:
        _passed[path] = discover.passed_by(path)
    return _passed[path]


def _mtime(path: Path) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


class _Places:
    """Findings' places (libyaml's lines, 1-based, in characters) as the client's positions."""

    def __init__(self, document: TextDocument) -> None:
        self.codec = document.position_codec
        self.lines = _LINE_BREAK.split(document.source)
        self.starts = line_starts(document.source)  # libyaml's
        self.lsp_starts = [0, *(match.end() for match in _LINE_BREAK.finditer(document.source))]

    def range(self, finding: lint.Finding) -> types.Range:
        start = self._position(finding.line, finding.column)
        span = ServerTextRange(start, self._position(finding.end_line, finding.end_column))
        return self.codec.range_to_client_units(self.lines, span)

    def end(self) -> types.Position:
        last = ServerTextPosition(len(self.lines) - 1, len(self.lines[-1]))
        return self.codec.position_to_client_units(self.lines, last)

    def _position(self, line: int, column: int) -> ServerTextPosition:
        offset = self.starts[min(line, len(self.starts)) - 1] + column - 1
        lsp_line = bisect.bisect_right(self.lsp_starts, offset) - 1
        return ServerTextPosition(lsp_line, offset - self.lsp_starts[lsp_line])


def _contains(where: types.Range, position: types.Position) -> bool:
    return (
        (where.start.line, where.start.character)
        <= (position.line, position.character)
        <= (where.end.line, where.end.character)
    )


def _overlaps(a: types.Range, b: types.Range) -> bool:
    return (a.start.line, a.start.character) <= (b.end.line, b.end.character) and (b.start.line, b.start.character) <= (
        a.end.line,
        a.end.character,
    )


def _offered(kind: str, only: Sequence[str] | None) -> bool:
    """Whether the client asked for actions of ``kind`` (``source.fixAll`` covers ``source.fixAll.hacfg``)."""
    return only is None or any(kind == wanted or kind.startswith(f"{wanted}.") for wanted in only)


server = HacfgServer()


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: HacfgServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.lint(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: HacfgServer, params: types.DidChangeTextDocumentParams) -> None:
    ls.lint(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: HacfgServer, params: types.DidSaveTextDocumentParams) -> None:
    """The saved file may be a base that open files extend: read base files again, lint them all."""
    config.forget_bases()
    _passed.clear()  # the saved file may be a .gitignore
    for uri in list(ls.shown):
        ls.lint(uri)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: HacfgServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.forget(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_HOVER)
def hover(ls: HacfgServer, params: types.HoverParams) -> types.Hover | None:
    """The explanation of every rule with a finding under the cursor."""
    rules = lint.registry()
    under = [
        (s.diagnostic, s.finding)
        for s in ls.shown.get(params.text_document.uri, [])
        if s.finding is not None and _contains(s.diagnostic.range, params.position)
    ]
    explained = list(dict.fromkeys(finding.rule for _, finding in under if finding.rule in rules))
    if not explained:
        return None
    text = "\n\n---\n\n".join(report.explain(rules[rule_id]) for rule_id in explained)
    return types.Hover(types.MarkupContent(types.MarkupKind.Markdown, text), range=under[0][0].range)


@server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION,
    types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL]),
)
def code_action(ls: HacfgServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    """Each safe fix in the range as a quick fix, and all of them at once as ``hacfg fix`` applies them."""
    uri = params.text_document.uri
    fixable = [
        (s.diagnostic, s.finding, s.finding.fix)
        for s in ls.shown.get(uri, [])
        if s.finding is not None and s.finding.fix is not None
    ]
    only = params.context.only
    actions = []
    if _offered(types.CodeActionKind.QuickFix, only):
        for diagnostic, finding, safe_fix in fixable:
            if _overlaps(diagnostic.range, params.range):
                edit = types.TextEdit(diagnostic.range, safe_fix.replacement)
                actions.append(
                    types.CodeAction(
                        f"{safe_fix.description} ({finding.rule})",
                        kind=types.CodeActionKind.QuickFix,
                        diagnostics=[diagnostic],
                        edit=types.WorkspaceEdit(changes={uri: [edit]}),
                        is_preferred=True,
                    )
                )
    if fixable and _offered(FIX_ALL, only):
        document = ls.workspace.get_text_document(uri)
        after = fix.apply(document.source, [finding for _, finding, _ in fixable])
        edit = types.TextEdit(types.Range(types.Position(line=0, character=0), _Places(document).end()), after)
        actions.append(
            types.CodeAction(
                "Apply every safe hacfg fix", kind=FIX_ALL, edit=types.WorkspaceEdit(changes={uri: [edit]})
            )
        )
    return actions


def serve() -> None:
    """Speak the protocol on stdin and stdout until the client says exit."""
    server.start_io()
