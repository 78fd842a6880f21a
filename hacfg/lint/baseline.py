"""A baseline: the findings a repository already had when it adopted hacfg, reported no more.

``hacfg lint --write-baseline FILE`` records today's findings; ``hacfg lint --baseline FILE`` (or
``baseline = "FILE"`` in ``[tool.hacfg]``) reports only findings that are not in it. An entry is
keyed on the file's path (relative to the baseline's folder), the rule and the finding's logical
key path, never its line, so reformatting a file, moving its keys or adding lines keeps every
entry matched. Entries that match nothing any more (the finding was fixed) are reported as
HA099, an unused suppression, at their line of the baseline; writing the baseline again prunes
them. Checkov's ``--baseline`` works the same way.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hacfg.lint.engine import Finding, Report, RuleSource, finding_at
from hacfg.scenario.source import InputError, Span, load

VERSION = 1
Key = tuple[str, str, str]  # path, rule, logical key path (the message where a finding has none)


@dataclass(frozen=True)
class Baseline:
    path: Path
    entries: list[Key]
    spans: list[Span]  # where each entry stands in the file

    @classmethod
    def read(cls, path: Path) -> Baseline:
        document = load(path)
        data = document.data
        if not (isinstance(data, dict) and data.get("version") == VERSION and isinstance(data.get("findings"), list)):
            raise InputError(f"not a hacfg baseline (version {VERSION}): --write-baseline writes one", file=str(path))
        entries, spans = [], []
        for index, entry in enumerate(data["findings"]):
            fields = ("path", "rule", "key")
            if not (isinstance(entry, dict) and all(isinstance(entry.get(k), str) for k in fields)):
                raise InputError("a baseline entry needs path, rule and key", document.span(("findings", index)))
            entries.append((entry["path"], entry["rule"], entry["key"]))
            spans.append(document.span(("findings", index)))
        return cls(path, entries, spans)

    def key(self, finding: Finding) -> Key:
        relative = os.path.relpath(os.path.abspath(finding.path), os.path.abspath(self.path.parent))
        return Path(relative).as_posix(), finding.rule, finding.logical_path or finding.message

    def apply(self, report: Report, rules: dict[str, RuleSource]) -> Report:
        """The report with every finding in the baseline marked as such, and stale entries as HA099."""
        left = Counter(self.entries)
        findings = []
        for finding in report.findings:
            key = self.key(finding)
            if finding.suppressed is None and left[key] > 0:
                left[key] -= 1
                finding = finding._replace(suppressed=f"in the baseline {self.path}", suppression="external")
            findings.append(finding)
        for entry, span in zip(self.entries, self.spans, strict=True):
            if left[entry] > 0:
                left[entry] -= 1
                where, rule, logical = entry
                message = (
                    f"baseline entry for {rule} at {logical} in {where} matches no finding; --write-baseline prunes it"
                )
                findings.append(finding_at("HA099", rules, span, (), message, severity="info"))
        return Report(findings, report.files, report.notes, str(self.path))


def write(path: Path, findings: Iterable[Finding]) -> int:
    """Record the findings that are not suppressed otherwise; how many."""
    baseline = Baseline(path, [], [])
    keys = sorted(baseline.key(f) for f in findings if f.suppressed is None)
    entries = [{"path": p, "rule": rule, "key": key} for p, rule, key in keys]
    text = json.dumps({"version": VERSION, "findings": entries}, indent=2, ensure_ascii=False) + "\n"
    from hacfg.fsutil import write_output

    write_output(path, text.encode())
    return len(entries)
