"""Safe automatic fixes, applied as text edits at each finding's span.

Editing the exact span keeps everything else in the file byte for byte (comments, key
order, quoting, JSON or YAML layout, a UTF-8 byte order mark, CRLF line ends), which a
parse-and-dump round trip cannot promise.
"""

from __future__ import annotations

import codecs
import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hacfg.fsutil import write_output
from hacfg.lint.engine import Finding, Report
from hacfg.scenario.source import decode, line_starts


def apply(text: str, findings: Iterable[Finding]) -> str:
    """``text`` with every fixable finding's span replaced; overlapping edits keep the first."""
    starts = line_starts(text)

    def offset(line: int, column: int) -> int:
        return starts[line - 1] + column - 1

    edits = sorted(
        {
            (offset(f.line, f.column), offset(f.end_line, f.end_column), f.fix.replacement)
            for f in findings
            if f.fix is not None and f.suppressed is None
        }
    )
    result, cursor = [], 0
    for start, end, replacement in edits:
        if start < cursor:
            continue
        result.append(text[cursor:start])
        result.append(replacement)
        cursor = end
    result.append(text[cursor:])
    return "".join(result)


def diff(path: str, before: str, after: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True), path, path))


@dataclass(frozen=True)
class FileFix:
    """One file's bytes before and after its fixes."""

    path: str
    before: bytes
    after: bytes
    count: int  # fixable findings in the file

    def diff(self) -> str:
        return diff(self.path, self.before.decode("utf-8-sig"), self.after.decode("utf-8-sig"))

    def write(self, *, force: bool = False) -> None:
        """Replace the file whole or not at all, as :func:`~hacfg.fsutil.write_output` writes outputs."""
        write_output(self.path, self.after, force=force)


def fixes(report: Report) -> list[FileFix]:
    """``hacfg fix``: each file whose fixable findings (not suppressed) change it, by path."""
    by_file: dict[str, list[Finding]] = {}
    for finding in report.findings:
        if finding.fix is not None and finding.suppressed is None:
            by_file.setdefault(finding.path, []).append(finding)
    changed = []
    for path, findings in sorted(by_file.items()):
        before = Path(path).read_bytes()
        bom = codecs.BOM_UTF8 if before.startswith(codecs.BOM_UTF8) else b""
        # the spans were measured on the decoded text, which has no BOM: edit that, then put it back
        after = bom + apply(decode(before, path), findings).encode("utf-8")
        if after != before:
            changed.append(FileFix(path, before, after, len(findings)))
    return changed
