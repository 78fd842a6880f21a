"""``hacfg server``: a language server, so an editor shows hacfg's findings while the file is typed.

On open and on every change it lints the editor's text, not the file on disk, with the same
``lint_file`` as ``hacfg lint`` and under the file's own path: settings, per-file ignores and
suppression comments apply as on the command line. Hovering over a finding shows what
``hacfg explain`` prints; a finding with a safe fix offers it as a quick fix, and the fix-all
action does what ``hacfg fix`` would. Positions go out in the client's code units (UTF-16
unless it negotiated another encoding).

Only the files ``hacfg lint DIR`` picks are linted (``ha.yaml``, ``*.ha.yaml``, the ``include``
globs), so an editor that starts the server for every YAML file sees nothing on the others.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.workspace import TextDocument
from pygls.workspace.position_codec import ServerTextPosition, ServerTextRange

from hacfg import __version__
from hacfg.lint import discover, fix
from hacfg.lint import engine as lint
from hacfg.lint import formatters as report
from hacfg.lint.settings import Settings, find_settings
from hacfg.scenario import config
from hacfg.scenario.source import InputError

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


def _lint(document: TextDocument) -> list[Shown]:
    """What `hacfg lint` would report for this text, unsuppressed, placed as the client counts."""
    path = Path(document.path or document.uri)
    lines = _LINE_BREAK.split(document.source)
    try:
        settings = _settings(path.parent.resolve())
        rules = lint.registry()
        if not discover.wanted(path, settings):
            return []
        findings = lint.lint_file(path, settings, rules, text=document.source)
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
            where = _range(document, lines, finding)
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


def _mtime(path: Path) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _range(document: TextDocument, lines: list[str], finding: lint.Finding) -> types.Range:
    """A finding's span (1-based, in characters) as a range in the client's code units."""
    span = ServerTextRange(
        ServerTextPosition(finding.line - 1, finding.column - 1),
        ServerTextPosition(finding.end_line - 1, finding.end_column - 1),
    )
    return document.position_codec.range_to_client_units(lines, span)


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
        lines = _LINE_BREAK.split(document.source)
        end = document.position_codec.position_to_client_units(
            lines, ServerTextPosition(len(lines) - 1, len(lines[-1]))
        )
        after = fix.apply(document.source, [finding for _, finding, _ in fixable])
        edit = types.TextEdit(types.Range(types.Position(line=0, character=0), end), after)
        actions.append(
            types.CodeAction(
                "Apply every safe hacfg fix", kind=FIX_ALL, edit=types.WorkspaceEdit(changes={uri: [edit]})
            )
        )
    return actions


def serve() -> None:
    """Speak the protocol on stdin and stdout until the client says exit."""
    server.start_io()
