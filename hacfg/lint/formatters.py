"""Lint output formats: text for people, json for scripts, sarif for code scanning, github for Actions."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hacfg.lint.engine import Finding, Report, RuleSource
from hacfg.scenario.source import InputError

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
DOCS_URL = "https://github.com/hacfg/hacfg/blob/main/docs/rules.md"
_SARIF_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
_GITHUB_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def render(
    fmt: str,
    report: Report,
    rules: dict[str, RuleSource],
    *,
    excerpts: bool = False,
    colour: bool = False,
    quiet: bool = False,
) -> str:
    renderers: dict[str, Callable[[Report, dict[str, RuleSource]], str]] = {
        "text": lambda r, _: text(r, excerpts=excerpts, colour=colour, quiet=quiet),
        "json": lambda r, _: as_json(r),
        "sarif": sarif,
        "github": lambda r, _: github(r),
    }
    return renderers[fmt](report, rules)


def _active(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.suppressed is None]


def summary(report: Report) -> dict[str, int]:
    findings = _active(report)
    counts = Counter(f.severity for f in findings)
    return {
        "files": report.files,
        "findings": len(findings),
        "errors": counts["error"],
        "warnings": counts["warning"],
        "infos": counts["info"],
        "fixable": sum(f.fix is not None for f in findings),
        "suppressed": len(report.findings) - len(findings),
        "baselined": sum(f.suppressed is not None and f.suppression == "external" for f in report.findings),
    }


# SGR codes, as ruff paints its output: the path bold, the rule in its severity's colour
_BOLD, _FAINT = "1", "2"
_SEVERITY_COLOUR = {"error": "1;31", "warning": "1;33", "info": "1;36"}


def _paint(text: str, code: str, colour: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if colour else text


def text(report: Report, *, excerpts: bool = False, colour: bool = False, quiet: bool = False) -> str:
    """One line per finding, with the source line under it (``excerpts``), and a summary unless ``quiet``."""
    lines = []
    for finding in _active(report):
        where = _paint(finding.path, _BOLD, colour) + f":{finding.line}:{finding.column}"
        rule = _paint(finding.rule, _SEVERITY_COLOUR[finding.severity], colour)
        lines.append(f"{where}: {rule} {finding.severity} {finding.message}")
        if excerpts:
            lines.extend(_excerpt(finding, colour))
    counts = summary(report)
    if counts["findings"] and not quiet:
        fixable = f", {counts['fixable']} fixable with `hacfg fix`" if counts["fixable"] else ""
        lines.append(
            f"Found {counts['findings']} finding{'s' * (counts['findings'] != 1)} in {report.files} "
            f"file{'s' * (report.files != 1)} ({_count(counts['errors'], 'error')}, "
            f"{_count(counts['warnings'], 'warning')}, {counts['infos']} info){fixable}."
        )
    if counts["baselined"] and not quiet:
        lines.append(f"{counts['baselined']} more in the baseline {report.baseline}, not reported.")
    return "\n".join(lines) + ("\n" if lines else "")


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' * (number != 1)}"


def _excerpt(finding: Finding, colour: bool) -> list[str]:
    try:
        source = Path(finding.path).read_text(encoding="utf-8").splitlines()[finding.line - 1]
    except (OSError, UnicodeDecodeError, IndexError):
        return []
    width = max(1, finding.end_column - finding.column) if finding.end_line == finding.line else 1
    gutter = f"{finding.line:>4} | "
    caret = _paint("^" * width, _SEVERITY_COLOUR[finding.severity], colour)
    return [_paint(gutter, _FAINT, colour) + source, " " * (len(gutter) + finding.column - 1) + caret]


def statistics(fmt: str, report: Report, rules: dict[str, RuleSource]) -> str:
    """``--statistics``: how many findings of each rule, the most frequent first (ruff's columns)."""
    findings = _active(report)
    counts = Counter(f.rule for f in findings)
    fixable = {f.rule for f in findings if f.fix is not None}
    rows = sorted(counts.items(), key=lambda item: (-item[1], item[0]))

    def name(rule_id: str) -> str:
        return rules[rule_id].rule.name if rule_id in rules else ""

    if fmt == "json":
        listed = [{"code": r, "name": name(r), "count": n, "fixable": r in fixable} for r, n in rows]
        return _json_text(listed)
    if fmt != "text":
        raise InputError(f"--statistics prints text or json, not {fmt}")
    width = max((len(str(n)) for _, n in rows), default=1)
    return "".join(f"{n:>{width}}\t{r}\t{'[*]' if r in fixable else '   '} {name(r)}\n" for r, n in rows)


def _json_text(document: Any) -> str:
    """``document`` as indented JSON. The module is imported here: the text output, what a lint
    prints by default, does without it."""
    import json

    return json.dumps(document, indent=2) + "\n"


def as_json(report: Report) -> str:
    document = {"version": 1, "findings": [f.as_dict() for f in _active(report)], "summary": summary(report)}
    return _json_text(document)


def github(report: Report) -> str:
    """Workflow commands: GitHub Actions turns each into an annotation on the pull request, at a path it
    reads from the repository's root whatever the step's ``working-directory``."""
    active = _active(report)
    root = _source_root([f.path for f in active if not f.path.startswith("<")])
    lines = []
    for f in active:
        message = _escape(f"{f.rule} {f.message}", data=True)
        path = f.path if f.path.startswith("<") else _from_root(f.path, root)
        lines.append(
            f"::{_GITHUB_LEVEL[f.severity]} file={_escape(path)},line={f.line},col={f.column},"
            f"endLine={f.end_line},endColumn={f.end_column},title={_escape(f.rule)}::{message}"
        )
    return "\n".join(lines) + ("\n" if lines else "")


def _escape(value: str, *, data: bool = False) -> str:
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return value if data else value.replace(":", "%3A").replace(",", "%2C")


def sarif(report: Report, rules: dict[str, RuleSource]) -> str:
    """SARIF 2.1.0 as GitHub code scanning takes it; suppressed findings are kept, marked as suppressed
    (in source by a comment, externally by the baseline), and with a baseline every result has its state.

    Paths are percent-encoded URIs relative to ``%SRCROOT%`` (the repository's root, else the
    current directory), whichever directory hacfg ran from; columns count UTF-16 code units.
    """
    from hacfg import __version__  # only SARIF names it: reading it imports importlib.metadata

    root = _source_root([f.path for f in report.findings if not f.path.startswith("<")])
    columns = _Utf16Columns()
    rule_ids = list(rules)
    results = []
    for f in report.findings:
        result: dict[str, Any] = {
            "ruleId": f.rule,
            "ruleIndex": rule_ids.index(f.rule) if f.rule in rules else -1,
            "level": _SARIF_LEVEL[f.severity],
            "message": {"text": f.message},
        }
        if not f.path.startswith("<"):
            artifact = _artifact(f.path, root)
            start, end = columns.of(f.path, f.line, f.column), columns.of(f.path, f.end_line, f.end_column)
            region = {"startLine": f.line, "startColumn": start, "endLine": f.end_line, "endColumn": max(end, start)}
            result["locations"] = [{"physicalLocation": {"artifactLocation": artifact, "region": region}}]
            result["partialFingerprints"] = {"hacfgFinding/v1": _fingerprint(f, artifact["uri"])}
        if f.logical_path:
            result.setdefault("properties", {})["logicalPath"] = f.logical_path
        if f.suppressed is not None:
            justification = {"justification": f.suppressed} if f.suppressed else {}
            result["suppressions"] = [{"kind": f.suppression, **justification}]
        if report.baseline is not None:
            result["baselineState"] = "unchanged" if f.suppression == "external" else "new"
        if result["ruleIndex"] < 0:
            del result["ruleIndex"]
        results.append(result)
    driver = {
        "name": "hacfg",
        "version": __version__,
        "informationUri": DOCS_URL,
        "rules": [
            {
                "id": rule_id,
                "name": source.rule.name,
                "shortDescription": {"text": source.rule.summary},
                "fullDescription": {"text": _first_paragraph(source.rule.help) or source.rule.summary},
                "help": {
                    "text": source.rule.help or source.rule.summary,
                    "markdown": source.rule.help or source.rule.summary,
                },
                "helpUri": f"{DOCS_URL}#{rule_id.lower()}",
                "defaultConfiguration": {"level": _SARIF_LEVEL[source.rule.severity]},
                "properties": _rule_properties(source),
            }
            for rule_id, source in rules.items()
        ],
    }
    run = {
        "tool": {"driver": driver},
        "originalUriBaseIds": {SRCROOT: {"uri": root.as_uri() + "/"}},
        "columnKind": "utf16CodeUnits",
        "results": results,
    }
    document = {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}
    return _json_text(document)


SRCROOT = "%SRCROOT%"


def _source_root(paths: list[str]) -> Path:
    """Where GitHub resolves paths from: the checkout Actions names (``GITHUB_WORKSPACE``), else the root of
    the repository hacfg runs in, or else of the first file linted, or else the current directory."""
    workspace = os.environ.get("GITHUB_WORKSPACE")
    if workspace:
        return Path(os.path.abspath(workspace))
    for start in (Path.cwd(), *(Path(os.path.abspath(p)).parent for p in paths[:1])):
        root = next((folder for folder in (start, *start.parents) if (folder / ".git").exists()), None)
        if root is not None:
            return root
    return Path.cwd()


def _from_root(path: str, root: Path) -> str:
    """``path`` relative to ``root`` (POSIX spelling), or absolute when it lies outside."""
    absolute = Path(os.path.abspath(path))
    try:
        return absolute.relative_to(root).as_posix()
    except ValueError:
        return absolute.as_posix()


def _artifact(path: str, root: Path) -> dict[str, str]:
    from urllib.parse import quote

    relative = _from_root(path, root)
    if relative.startswith("/"):  # outside the repository: an absolute file URI
        return {"uri": Path(relative).as_uri()}
    return {"uri": quote(relative), "uriBaseId": SRCROOT}


def _fingerprint(finding: Finding, uri: str) -> str:
    """Stable while lines move: the rule, the file and the key it is about (the line only for findings on no key)."""
    import hashlib

    where = finding.logical_path or f"line {finding.line}:{finding.column}"
    return hashlib.sha256(f"{finding.rule}\0{uri}\0{where}".encode()).hexdigest()


def _first_paragraph(help_text: str) -> str:
    """The first paragraph of prose after the summary line (under its heading, if any), as plain text:
    what the rule checks, briefly."""
    for block in help_text.strip().split("\n\n")[1:]:
        lines = block.strip().splitlines()
        while lines and lines[0].startswith("#"):
            lines.pop(0)
        if lines and not lines[0].startswith("```"):
            return " ".join(" ".join(lines).split())
    return ""


def _rule_properties(source: RuleSource) -> dict[str, Any]:
    """What code scanning filters alerts by: hacfg's own checks of the file are about correctness and
    certain; a rule's judgement of a risk is about reliability, tagged with its family (its plugin)."""
    if source.plugin == "hacfg":
        return {"source": source.distribution, "tags": ["correctness", "hacfg"], "precision": "very-high"}
    family = source.plugin.removeprefix("rules-")
    return {"source": source.distribution, "tags": ["reliability", family], "precision": "high"}


class _Utf16Columns:
    """Character columns (as libyaml counts) to UTF-16 code units, the unit SARIF readers assume."""

    def __init__(self) -> None:
        self.lines: dict[str, list[str]] = {}

    def of(self, path: str, line: int, column: int) -> int:
        if path not in self.lines:
            self.lines[path] = self._read(path)
        lines = self.lines[path]
        before = lines[line - 1][: column - 1] if 0 < line <= len(lines) else ""
        return column + sum(ord(c) > 0xFFFF for c in before)  # a character beyond the BMP takes two units

    @staticmethod
    def _read(path: str) -> list[str]:
        from hacfg.scenario.source import decode, line_starts

        try:
            text = decode(Path(path).read_bytes(), path)
        except (OSError, InputError):
            return []
        starts = line_starts(text)
        return [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]


def explain(source: RuleSource) -> str:
    """A rule's documentation, as ``hacfg explain`` prints it and ``hacfg server`` shows it on hover."""
    rule = source.rule
    return f"{rule.id} {rule.name} ({rule.severity}, from {source.distribution})\n\n{rule.help}"


def rules_markdown(rules: dict[str, RuleSource]) -> str:
    """The rule reference page (docs/rules.md): the same help ``hacfg explain`` prints."""
    lines = [
        "# Lint rules",
        "",
        "Generated by `hacfg rules --format markdown`; `hacfg explain ID` prints one rule.",
        "",
        "| ID | name | severity | reads | source |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| [{i}](#{i.lower()}) | {s.rule.name} | {s.rule.severity} | {', '.join(s.rule.kinds) or 'any file'} "
        f"| {s.distribution} |"
        for i, s in rules.items()
    ]
    for rule_id, source in rules.items():
        help_text = source.rule.help.replace("\n## ", "\n#### ")
        lines += ["", f"## {rule_id}", "", f"`{source.rule.name}`, {source.rule.severity}.", "", help_text]
    return "\n".join(lines) + "\n"


def rules_listing(fmt: str, rules: dict[str, RuleSource]) -> str:
    """``hacfg rules``: one line per rule (text), a JSON array (json), or the docs page (markdown)."""
    if fmt == "markdown":
        return rules_markdown(rules)
    if fmt == "json":
        rows = [
            {
                "id": rule_id,
                "name": source.rule.name,
                "severity": source.rule.severity,
                "kinds": list(source.rule.kinds),
                "source": source.distribution,
                "summary": source.rule.summary,
            }
            for rule_id, source in rules.items()
        ]
        return _json_text(rows)
    return "".join(
        f"{rule_id}  {s.rule.severity:<7}  {s.rule.name:<36}  {s.distribution:<12}  {s.rule.summary}\n"
        for rule_id, s in rules.items()
    )


def explanation(rule_id: str, rules: dict[str, RuleSource]) -> str:
    """``hacfg explain``: one rule's heading and help; an unknown ID is an InputError naming the nearest."""
    from hacfg.scenario.source import InputError, did_you_mean

    source = rules.get(rule_id.upper())
    if source is None:
        hint = did_you_mean(rule_id.upper(), list(rules))
        raise InputError(f"unknown rule {rule_id!r}{hint}; `hacfg rules` lists them")
    return explain(source) + "\n"
