"""`hacfg server` in a real editor session: a language client talking to the real process over stdio."""

from __future__ import annotations

import asyncio
import json
import queue
import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.lsp.client import LanguageClient

SCENARIO = textwrap.dedent("""\
    version: 1
    scenario: multi-node
    job:
      name: llama
      nodes: 4
      accelerator: gpu
      network: infiniband
    checkpoint:
      path: /mnt/sfs/ckpt
      interval: 30m
      resume: true
    restart:
      max: 3
      pod_reschedules: 1
""")
# A non-BMP character before the finding: UTF-16 counts it as two code units, Python as one.
JOB = textwrap.dedent("""\
    kind: job
    metadata:
      name: llama
      annotations: {"note/😋": "x", fault-tolerance/job-retry-num: 3}
    algorithm:
      outputs: [{name: ckpt, remote: {obs: {obs_url: "obs://bucket/ckpt/"}}}]
""")


class Editor:
    """An editor's side of the protocol, talking to a real `hacfg server` over stdio.

    The client's event loop runs in a thread, so tests read as plain calls: open, change, hover.
    """

    def __init__(self, root: Path):
        self.root = root
        self.versions: dict[str, int] = {}
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.client = LanguageClient("hacfg-tests", "1")
        self.published: asyncio.Queue[types.PublishDiagnosticsParams] = self.call(self._queue())
        self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)(lambda params: self.published.put_nowait(params))
        self.call(self.client.start_io(sys.executable, "-m", "hacfg", "server", cwd=str(root)))
        self.initialized = self.call(self.client.initialize_async(types.InitializeParams(types.ClientCapabilities(), process_id=None, root_uri=root.as_uri())))
        self.client.initialized(types.InitializedParams())

    @staticmethod
    async def _queue() -> asyncio.Queue:
        return asyncio.Queue()

    def call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(60)

    def uri(self, name: str) -> str:
        return (self.root / name).as_uri()

    def diagnostics(self, name: str) -> list[types.Diagnostic]:
        """The next diagnostics published for ``name``."""
        while True:
            params = self.call(asyncio.wait_for(self.published.get(), 30))
            if params.uri == self.uri(name):
                return list(params.diagnostics)

    def open(self, name: str, text: str) -> list[types.Diagnostic]:
        self.versions[name] = 1
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(self.uri(name), "yaml", 1, text)))
        return self.diagnostics(name)

    def change(self, name: str, where: types.Range, text: str) -> list[types.Diagnostic]:
        self.versions[name] += 1
        document = types.VersionedTextDocumentIdentifier(version=self.versions[name], uri=self.uri(name))
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(document, [types.TextDocumentContentChangePartial(range=where, text=text)]))
        return self.diagnostics(name)

    def save(self, path: Path) -> None:
        self.client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(path.as_uri())))

    def hover(self, name: str, line: int, character: int) -> types.Hover | None:
        params = types.HoverParams(types.TextDocumentIdentifier(self.uri(name)), types.Position(line, character))
        return self.call(self.client.text_document_hover_async(params))

    def code_actions(self, name: str, where: types.Range, only: list[str] | None = None) -> list[types.CodeAction]:
        params = types.CodeActionParams(types.TextDocumentIdentifier(self.uri(name)), where, types.CodeActionContext(diagnostics=[], only=only))
        return list(self.call(self.client.text_document_code_action_async(params)) or [])

    def close(self) -> int | None:
        """Shut down and exit as an editor does; the server's exit code."""
        self.call(self.client.shutdown_async(None))
        self.client.exit(None)
        code = self.call(asyncio.wait_for(self.client._server.wait(), 30))
        self.call(self.client.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        return code


@pytest.fixture(scope="module")
def editor(tmp_path_factory):
    """One server for the tests that only open files: starting one takes a while."""
    root = tmp_path_factory.mktemp("workspace")
    (root / ".hacfg.toml").write_text('include = ["jobs/*.yaml"]\nper-file-ignores = {"jobs/legacy.yaml" = ["HA007"]}\n')
    (root / "jobs").mkdir()
    session = Editor(root)
    yield session
    assert session.close() == 0


def span(line: int, start: int, end: int) -> types.Range:
    return types.Range(types.Position(line, start), types.Position(line, end))


def apply(text: str, edit: types.TextEdit) -> str:
    """Apply one edit the way an editor does (the protocol's lines, positions in UTF-16 code units)."""
    lines = re.findall(r".*?(?:\r\n|\r|\n)|.+$", text, re.DOTALL)

    def offset(position: types.Position) -> int:
        before = "".join(lines[: position.line])
        line = lines[position.line] if position.line < len(lines) else ""
        return len(before) + len(line.encode("utf-16-le")[: 2 * position.character].decode("utf-16-le"))

    return text[: offset(edit.range.start)] + edit.new_text + text[offset(edit.range.end) :]


@pytest.mark.slow
def test_a_session_from_initialize_to_exit_diagnostics_on_open_and_change(tmp_path):
    editor = Editor(tmp_path)
    assert editor.initialized.server_info.name == "hacfg"
    (opened,) = editor.open("ha.yaml", SCENARIO)
    assert (opened.code, opened.range, opened.severity, opened.source) == ("HA009", span(12, 7, 8), types.DiagnosticSeverity.Warning, "hacfg")
    # the editor's text, not the file on disk (there is none): a typo is reported where it is
    # the preset's budget still stands, and its risk is still shown
    inherited, unknown = editor.change("ha.yaml", span(12, 2, 5), "mxa")
    assert (inherited.code, inherited.range) == ("HA009", span(1, 10, 20))
    assert (unknown.code, unknown.range, unknown.severity) == ("HA101", span(12, 2, 5), types.DiagnosticSeverity.Error)
    assert unknown.message == "unknown key 'mxa' in restart; did you mean 'max'?"
    assert [d.code for d in editor.change("ha.yaml", span(12, 2, 5), "max")] == ["HA009"]
    assert editor.change("ha.yaml", span(12, 7, 8), "5") == []  # a budget above 3: nothing left
    assert editor.close() == 0


def test_diagnostics_match_hacfg_lint_exactly(editor, cli, monkeypatch):
    text = SCENARIO.replace("pod_reschedules: 1", "pod_reschedules: 1\n  on_hang: false  # hacfg: disable=HA016\nhang:\n  timeout: 2m")
    (editor.root / "match.ha.yaml").write_text(text)
    monkeypatch.chdir(editor.root)
    expected = [line.split(": ", 1) for line in cli("lint", "match.ha.yaml").out.splitlines()[:-1]]
    shown = editor.open("match.ha.yaml", text)
    severity = {types.DiagnosticSeverity.Error: "error", types.DiagnosticSeverity.Warning: "warning", types.DiagnosticSeverity.Information: "info"}
    assert [[f"match.ha.yaml:{d.range.start.line + 1}:{d.range.start.character + 1}", f"{d.code} {severity[d.severity]} {d.message}"] for d in shown] == expected
    assert len(expected) == 4


def test_settings_and_suppressions_apply_as_on_the_command_line(editor):
    assert [d.code for d in editor.open("jobs/train.yaml", JOB)] == ["HA007"]  # an include glob
    assert editor.open("jobs/legacy.yaml", JOB) == []  # per-file-ignores
    assert editor.open("jobs/quiet.yaml", JOB.replace("3}", "3}  # hacfg: disable=HA007 -- migrating")) == []
    kubernetes = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: llama, annotations: {a: 3}}\n"
    assert editor.open("notes.yaml", kubernetes) == []  # not a file `hacfg lint .` would pick


def test_positions_are_utf16_code_units_and_the_quick_fix_edits_exactly_the_value(editor):
    line = JOB.splitlines()[3]
    character = len(line[: line.index(": 3}") + 2].encode("utf-16-le")) // 2  # one more than Python's index
    (finding,) = editor.open("jobs/emoji.yaml", JOB)
    assert (finding.code, finding.range) == ("HA007", span(3, character, character + 1))
    (action,) = editor.code_actions("jobs/emoji.yaml", span(3, character, character), only=[types.CodeActionKind.QuickFix])
    assert action.kind == types.CodeActionKind.QuickFix and list(action.diagnostics) == [finding]
    (edit,) = action.edit.changes[editor.uri("jobs/emoji.yaml")]
    assert apply(JOB, edit) == JOB.replace("job-retry-num: 3}", 'job-retry-num: "3"}')
    assert editor.change("jobs/emoji.yaml", edit.range, edit.new_text) == []
    assert editor.code_actions("jobs/emoji.yaml", span(0, 0, 20)) == []


def test_fix_all_does_what_hacfg_fix_does(editor, cli, monkeypatch):
    text = JOB.replace("job-retry-num: 3}", "job-retry-num: 3, fault-tolerance/hang-retry: True}")
    (editor.root / "jobs/all.yaml").write_text(text)
    assert [d.code for d in editor.open("jobs/all.yaml", text)] == ["HA007", "HA007"]
    (action,) = editor.code_actions("jobs/all.yaml", span(0, 0, 0), only=[types.CodeActionKind.SourceFixAll])
    (edit,) = action.edit.changes[editor.uri("jobs/all.yaml")]
    monkeypatch.chdir(editor.root)
    assert cli("fix", "jobs/all.yaml").code == 0
    assert apply(text, edit) == (editor.root / "jobs/all.yaml").read_text() != text


def test_hover_over_a_finding_explains_its_rule(editor, cli):
    _, unknown = editor.open("hover.ha.yaml", SCENARIO.replace("  max: 3", "  mxa: 3"))
    hover = editor.hover("hover.ha.yaml", unknown.range.start.line, unknown.range.start.character + 1)
    assert hover.contents.kind == types.MarkupKind.Markdown
    assert hover.contents.value == cli("explain", "HA101").out.rstrip("\n")
    assert editor.hover("hover.ha.yaml", 0, 0) is None  # nothing wrong there


def test_settings_written_while_the_server_runs_apply_at_the_next_change(editor):
    (editor.root / "later").mkdir()
    assert [d.code for d in editor.open("later/ha.yaml", SCENARIO)] == ["HA009"]
    (editor.root / "later/.hacfg.toml").write_text('ignore = ["HA009"]\n')
    assert editor.change("later/ha.yaml", span(0, 0, 0), "# budget reviewed\n") == []


def test_unreadable_settings_are_shown_on_the_file(editor):
    (editor.root / "broken").mkdir()
    (editor.root / "broken/.hacfg.toml").write_text('select = ["HA9999"]\n')
    (shown,) = editor.open("broken/ha.yaml", SCENARIO)
    assert shown.severity == types.DiagnosticSeverity.Error and "unknown rule 'HA9999'" in shown.message


def test_saving_a_base_file_relints_the_files_that_extend_it(editor):
    base = editor.root / "base.yaml"
    base.write_text(SCENARIO)
    assert [d.code for d in editor.open("child.ha.yaml", "extends: ./base.yaml\nversion: 1\nscenario: multi-node\n")] == ["HA009"]
    base.write_text(SCENARIO.replace("nodes: 4", "nodes: four"))
    editor.save(base)
    assert [d.code for d in editor.diagnostics("child.ha.yaml")] == ["HA009", "HA102"]  # the valid part still judged


def test_a_saved_base_file_speaks_again_through_its_comments(editor):
    """What the base's comments vouch for is read from the same cache as its data, forgotten on save."""
    base = editor.root / "vouching.yaml"
    base.write_text(SCENARIO)
    child = "extends: ./vouching.yaml\nversion: 1\nscenario: multi-node\n"
    assert [d.code for d in editor.open("vouched.ha.yaml", child)] == ["HA009"]
    base.write_text(SCENARIO.replace("max: 3", "max: 3  # hacfg: disable=HA009 -- the job resumes cheaply"))
    editor.save(base)
    assert editor.diagnostics("vouched.ha.yaml") == []


@pytest.mark.slow
def test_without_pygls_the_command_says_what_to_install(tmp_path):
    (tmp_path / "pygls").mkdir()
    (tmp_path / "pygls" / "__init__.py").write_text("raise ModuleNotFoundError('No module named pygls', name='pygls')\n")
    result = subprocess.run([sys.executable, "-m", "hacfg", "server"], capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 2
    assert result.stderr == "hacfg: error: hacfg server needs pygls: pip install 'hacfg[server]'\n"


@pytest.mark.slow
def test_the_files_hacfg_lint_picks_get_its_findings_at_its_ranges(tmp_path, cli, monkeypatch):
    """By name, by content (a scenario file under any name, a request body), not what .gitignore hides."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    files = {
        "ha.yaml": SCENARIO.replace("  max: 3", "  mxa: 3"),
        "sub/train-ha.yml": SCENARIO.replace("interval: 30m", "interval: 2h") + "hang: {timeout: 2m}\n",
        "job.json": json.dumps({"kind": "job", "metadata": {"name": "llama", "annotations": {
            "fault-tolerance/job-retry-num": 3, "fault-tolerance/hang-retry": "True"}}}, indent=2) + "\n",
        "ignored/ha.yaml": SCENARIO,
        ".gitignore": "ignored/\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    linted = json.loads(cli("lint", "-f", "json", ".").out)["findings"]
    assert {f["path"] for f in linted} == {"ha.yaml", "sub/train-ha.yml", "job.json"}
    editor = Editor(tmp_path)
    try:
        for name in ("ha.yaml", "sub/train-ha.yml", "job.json"):
            shown = [(d.code, d.range) for d in editor.open(name, files[name])]
            expected = [
                (f["rule"], span(f["line"] - 1, f["column"] - 1, f["end_column"] - 1)) for f in linted if f["path"] == name
            ]
            assert shown == expected and expected, name
        assert editor.open("ignored/ha.yaml", SCENARIO) == []
        (tmp_path / ".gitignore").write_text("")  # saved in the editor: the walk reaches the folder again
        editor.save(tmp_path / ".gitignore")
        assert [d.code for d in editor.diagnostics("ignored/ha.yaml")] == ["HA009"]
    finally:
        assert editor.close() == 0


# libyaml breaks lines at these too; the protocol (and every editor) does not
SEPARATORS = {"NEL": "\x85", "LS": "\u2028", "PS": "\u2029"}


@pytest.mark.parametrize("separator", SEPARATORS.values(), ids=SEPARATORS.keys())
def test_a_unicode_line_separator_before_a_finding_moves_neither_it_nor_its_fix(editor, separator):
    text = JOB.replace("metadata:", f"# owner: ml-infra{separator}# reviewed\nmetadata:")
    (finding,) = editor.open(f"jobs/sep-{ord(separator)}.yaml", text)
    line = text.split("\n")[4]  # the protocol's line 4: the annotations, whatever libyaml counts
    character = len(line[: line.index(": 3}") + 2].encode("utf-16-le")) // 2
    assert (finding.code, finding.range) == ("HA007", span(4, character, character + 1))
    (quick,) = editor.code_actions(f"jobs/sep-{ord(separator)}.yaml", finding.range, only=[types.CodeActionKind.QuickFix])
    (edit,) = quick.edit.changes[editor.uri(f"jobs/sep-{ord(separator)}.yaml")]
    assert apply(text, edit) == text.replace("job-retry-num: 3}", 'job-retry-num: "3"}')
    (every,) = editor.code_actions(f"jobs/sep-{ord(separator)}.yaml", span(0, 0, 0), only=[types.CodeActionKind.SourceFixAll])
    (whole,) = every.edit.changes[editor.uri(f"jobs/sep-{ord(separator)}.yaml")]
    assert apply(text, whole) == text.replace("job-retry-num: 3}", 'job-retry-num: "3"}')


def test_the_misspelled_key_quick_fix_renames_it(editor):
    (_, unknown) = editor.open("rename.ha.yaml", SCENARIO.replace("  max: 3", "  mxa: 3"))
    (action,) = editor.code_actions("rename.ha.yaml", unknown.range, only=[types.CodeActionKind.QuickFix])
    assert action.title == "Rename 'mxa' to 'max' (HA101)"
    (edit,) = action.edit.changes[editor.uri("rename.ha.yaml")]
    assert apply(SCENARIO.replace("  max: 3", "  mxa: 3"), edit) == SCENARIO


class Wire:
    """The server's stdin and stdout as bytes: what a broken or hostile client sends, and every reply."""

    def __init__(self, root: Path):
        self.proc = subprocess.Popen([sys.executable, "-m", "hacfg", "server"], cwd=root, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.replies: queue.Queue[dict] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def close(self) -> None:
        """End the server if it still runs, let the reader reach the end of its stdout, then close the pipes."""
        self.proc.kill()
        self.proc.wait()
        self.reader.join(timeout=30)
        with self.proc:  # Popen's exit closes its pipes
            pass

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            headers = {}
            while (line := out.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                headers[name.lower()] = value.strip()
            if not line:
                return
            self.replies.put(json.loads(out.read(int(headers["content-length"]))))

    def send(self, raw: bytes) -> None:
        self.proc.stdin.write(raw)
        self.proc.stdin.flush()

    def request(self, msg_id: int, method: str, params: object = None) -> bytes:
        return frame({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})

    def reply(self) -> dict:
        """The next reply that answers something (notifications such as logs are passed over)."""
        while True:
            message = self.replies.get(timeout=30)
            if "id" in message:
                return message


def frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


@pytest.fixture
def wire(tmp_path) -> Iterator[Wire]:
    """A server on a raw wire, closed after the test, failed or not."""
    opened = Wire(tmp_path)
    yield opened
    opened.close()


@pytest.mark.slow
def test_framing_errors_are_answered_and_skipped_and_shutdown_is_always_honoured(tmp_path, wire):
    wire.send(wire.request(1, "initialize", {"capabilities": {}, "processId": None, "rootUri": None}))
    assert wire.reply()["id"] == 1
    notification = b'{"jsonrpc": "2.0", "method": "initialized", "params": {}}'
    hostile = {  # what was sent, and the error code answered (None: read as the message it held)
        "a length that is no number": (b"Content-Length: twelve\r\n\r\n" + notification, -32700),
        "a length no memory holds": (b"Content-Length: 1000000000000\r\n\r\n" + notification, -32700),
        "a body that is no JSON": (b"Content-Length: 9\r\n\r\n{not json", -32700),
        "a length longer than the body": (b"Content-Length: 500\r\n\r\n" + notification, None),
        "a length shorter than the body": (b"Content-Length: 5\r\n\r\n" + notification, -32700),
        "a message that is no object": (b"Content-Length: 3\r\n\r\n[1]", -32600),
        "a message of no JSON-RPC version": (frame({"method": "initialized", "params": {}}), -32600),
    }
    hover = {"textDocument": {"uri": (tmp_path / "ha.yaml").as_uri()}, "position": {"line": 0, "character": 0}}
    for number, (what, (raw, code)) in enumerate(hostile.items(), start=2):
        wire.send(raw + wire.request(number, "textDocument/hover", hover))
        answers = [wire.reply()]
        while answers[-1]["id"] != number:
            answers.append(wire.reply())
        assert [a["error"]["code"] for a in answers[:-1]] == ([] if code is None else [code]), what
        assert all(a["id"] is None for a in answers[:-1]), what
        assert answers[-1] == {"jsonrpc": "2.0", "id": number, "result": None}, what  # the next message, read whole
    wire.send(frame({"jsonrpc": "1.0", "id": 98, "method": "shutdown"}))  # a request is answered by its id
    refused = wire.reply()
    assert (refused["id"], refused["error"]["code"]) == (98, -32600)
    wire.send(wire.request(99, "shutdown"))
    assert wire.reply() == {"jsonrpc": "2.0", "id": 99, "result": None}
    wire.send(frame({"jsonrpc": "2.0", "method": "exit"}))
    assert wire.proc.wait(30) == 0


@pytest.mark.slow
def test_exit_without_shutdown_exits_1_as_the_protocol_says(wire):
    wire.send(frame({"jsonrpc": "2.0", "method": "exit"}))
    assert wire.proc.wait(30) == 1


@pytest.mark.slow
def test_malformed_params_are_answered_without_a_traceback(tmp_path, wire):
    """What a broken client sends inside well-framed messages: each request gets -32602, notifications
    are dropped, the server goes on, and its stderr stays empty."""
    wire.send(wire.request(1, "initialize", {"capabilities": {}, "processId": None, "rootUri": None}))
    assert wire.reply()["id"] == 1
    uri = (tmp_path / "ha.yaml").as_uri()
    document = {"textDocument": {"uri": uri, "languageId": "yaml", "version": 1, "text": SCENARIO.replace("max: 3", "max: '3'")}}
    for method, params in [("initialized", {}), ("textDocument/didOpen", document), ("textDocument/didChange", None),
                           ("textDocument/didChange", 5), ("textDocument/didSave", {"textDocument": None})]:
        wire.send(frame({"jsonrpc": "2.0", "method": method, "params": params}))
    at = {"line": 0, "character": 10**12}
    malformed = [
        ("textDocument/formatting", {"textDocument": {"uri": uri}, "options": None}),
        ("textDocument/hover", 5),
        ("textDocument/hover", {"textDocument": {"uri": uri}, "position": at}),
        ("textDocument/codeAction", {"textDocument": {"uri": uri}, "range": {"start": at, "end": at}, "context": None}),
        ("workspace/executeCommand", {"command": "no-such-command"}),
    ]
    for number, (method, params) in enumerate(malformed, start=2):
        wire.send(wire.request(number, method, params))
        answer = wire.reply()
        assert (answer["id"], answer["error"]["code"]) == (number, -32602), method
    wire.send(wire.request(10, "textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": 12, "character": 7}}))
    assert wire.reply()["result"]["contents"]["value"].startswith("HA102 ")  # the document opened before the noise is still served
    wire.send(wire.request(99, "shutdown"))
    assert wire.reply()["id"] == 99
    wire.send(frame({"jsonrpc": "2.0", "method": "exit"}))
    assert wire.proc.wait(30) == 0
    assert wire.proc.stderr.read() == b""


def test_a_key_the_request_model_has_not_is_shown_in_a_body_with_its_rename(editor):
    body = 'kind: job\nmetadata: {name: j}\nspec:\n  volume: [{nfs: {nfs_server_path: "1.2.3.4:/", local_path: /mnt}}]\n'
    (unknown,) = [d for d in editor.open("volume.yaml", body) if d.code == "HA101"]
    assert (unknown.range.start.line, unknown.range.start.character) == (3, 2)
    (action,) = editor.code_actions("volume.yaml", unknown.range, only=[types.CodeActionKind.QuickFix])
    assert action.title == "Rename 'volume' to 'volumes' (HA101)"
    (edit,) = action.edit.changes[editor.uri("volume.yaml")]
    assert apply(body, edit) == body.replace("volume:", "volumes:")
