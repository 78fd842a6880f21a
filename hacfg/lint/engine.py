"""Lint: every rule over scenario files and ModelArts request bodies, findings with exact positions.

Flow per file: load (HA100 if it does not parse) -> take each document as the kind discovery
read it (:func:`hacfg.lint.discover.ours`) -> for a scenario, merge the preset and validate
(HA101/HA102; the rules then judge what is valid, without the keys and values those name) -> run
every enabled rule (HA000 if one raises) -> drop what suppression comments silence (HA099 for
those that silence nothing).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

from hacfg.lint.discover import Found, Linted, choose_named, discover, is_request_body, ours
from hacfg.lint.settings import Settings, find_settings, read_settings
from hacfg.plugin import manager as plugin_manager
from hacfg.plugin import provided
from hacfg.plugin.ruletypes import Fix, JobBody, JobContext, Manifest, ManifestContext, Problem, Rule, ScenarioContext
from hacfg.scenario.config import (
    ConfigError,
    ConfigInvalid,
    as_base,
    deep_merge,
    inherited_at,
    preset_advice,
    read_base,
    salvage,
    validate,
    with_presets,
)
from hacfg.scenario.modelarts import ENVIRONMENTS_AT
from hacfg.scenario.names import SEVERITIES, Severity, at_least
from hacfg.scenario.passthrough import PASSTHROUGH, passthrough_agreements
from hacfg.scenario.request import environments_as_mapping, environments_note, undocumented_values, unknown_keys
from hacfg.scenario.source import (
    Document,
    InputError,
    LogicalPath,
    Span,
    dotted,
    line_starts,
    load_all,
    lookup,
    parse,
    parse_all,
)

BUILTIN_PREFIX = "HA"


def _engine_rule(rule_id: str, name: str, severity: Severity, help_text: str) -> Rule:
    """A rule the engine reports itself, on any file: it has no checks of its own."""
    return Rule(rule_id, name, severity, inspect.cleandoc(help_text))


ENGINE_RULES = (
    _engine_rule(
        "HA000",
        "plugin-error",
        "error",
        """
        A plugin failed: it did not load, or one of its rules raised.

        The finding names the plugin and the rule. Every other rule still ran; fix or
        uninstall the plugin, or run with HACFG_DISABLE_PLUGIN_AUTOLOAD=1 to load only
        hacfg's own plugins.""",
    ),
    _engine_rule(
        "HA099",
        "unused-suppression",
        "info",
        """
        A suppression comment that suppressed nothing, or names an unknown rule.

        `# hacfg: disable=HA003` on a line (or alone on the line above) silences HA003 there;
        `# hacfg: disable-file=HA011` silences it in the whole file. A comment that matches no
        finding is stale and hides the next real problem; remove it. A comment naming an
        unknown rule is an error.""",
    ),
    _engine_rule(
        "HA100",
        "parse-error",
        "error",
        """
        The file cannot be parsed.

        The finding points at the syntax error: invalid YAML or JSON, a duplicate key, a YAML
        language tag (`!!python/object` is refused), bytes that are not UTF-8.""",
    ),
    _engine_rule(
        "HA101",
        "unknown-key",
        "error",
        """
        An unknown key in a scenario file, a request body or its `passthrough:`, with the nearest known key.

        Unknown keys are errors, not silence: a misspelled `restart.on_hnag` would otherwise
        leave hang restart off. `hacfg schema` prints every key the format has.

        In a request body, and under `passthrough:` (merged into one), the keys are those of the
        ModelArts SDK's request model (`huaweicloudsdkmodelarts.v1.model.Job`, from which
        hacfg's schema is generated). The platform drops a key it does not know without a word:
        `spec: {volume: [...]}` mounts no checkpoint volume, and every restart starts from step 0.
        A field only a fetched job has (`metadata.id`, `status`, `spec.resource.flavor_name`) is a
        warning: the platform sets it, a create request leaves it out.

        The rest of the file is still judged, so a typo hides no risk. `hacfg fix` (and the
        editor's quick fix) renames the key to the one suggested, unless the mapping has that
        key already.""",
    ),
    _engine_rule(
        "HA102",
        "invalid-value",
        "error",
        """
        A value of the wrong type or out of range in a scenario file.

        Reported by the config model: `nodes: four`, `restart.max: 500`, `hang.timeout: 30`
        (a duration needs a unit), an unknown scenario or preset, OTC's limit of 3 restarts.""",
    ),
    _engine_rule(
        "HA103",
        "environments-list",
        "info",
        """
        Environment variables written as a list of pairs, as a fetched job shows them.

        The ModelArts SDK shows `algorithm.environments` of a fetched job
        (`show_training_job_details`, `JobAlgorithmResponse`) as a list of objects of one pair,
        `[{"MA_HANG_DETECT_TIME": "45"}]`, while a create request takes one mapping. hacfg reads
        the list as the mapping it means, in a request body and under `passthrough:`, so every
        rule judges the variables; lint, build and import say so. `hacfg fix` writes the mapping.""",
    ),
    _engine_rule(
        "HA104",
        "undocumented-value",
        "warning",
        """
        A request field set to a value the ModelArts SDK does not document for it.

        The SDK's docstrings list the values of some fields: `kind` (`job`, `edge_job`, ...),
        `spec.log_export_config.version` (`v0`, `v1`), `spec.notification.events`
        (`JobHanged`, ...). Its client checks none of them, and the API takes values before
        the SDK lists them, so hacfg builds such a body as the SDK would send it; but a
        misspelled value (`JobHung`) fails only when the job is submitted. Checked in a request
        body and under `passthrough:`, with the nearest documented value. Where the value is
        newer than the SDK on purpose, suppress the finding on its line.""",
    ),
)


class Finding(NamedTuple):
    rule: str
    severity: Severity
    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    logical_path: str
    message: str
    fix: Fix | None = None
    suppressed: str | None = None  # why it is not reported: the comment's reason, or the baseline
    suppression: str = "inSource"  # SARIF's kind of suppression: a comment, or "external" (the baseline)

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "logical_path": self.logical_path,
            "message": self.message,
            "fixable": self.fix is not None,
        }


class RuleSource:
    __slots__ = ("distribution", "plugin", "rule")

    def __init__(self, rule: Rule, plugin: str, distribution: str) -> None:
        self.rule = rule
        self.plugin = plugin
        self.distribution = distribution


def registry() -> dict[str, RuleSource]:
    """Every rule by ID: the engine's own, then each plugin's. Conflicts are plugin failures."""
    manager = plugin_manager.get()
    manager.require_builtins("hacfg_rules")

    def collect() -> dict[str, RuleSource]:
        entries = ((plugin, item.id, item) for plugin, item in manager.items("hacfg_rules", Rule))
        found = manager.unique("hacfg_rules", entries, what="rule", admit=_prefix_refusal)
        engine = {r.id: RuleSource(r, "hacfg", "hacfg") for r in ENGINE_RULES}
        for rule_id, source in found.items():
            if rule_id in engine:
                manager.fail(source.plugin, "hacfg_rules", f"rule {rule_id} is already provided by hacfg")
            else:
                engine[rule_id] = RuleSource(source.item, source.plugin, source.distribution)
        return dict(sorted(engine.items()))

    return manager.memo("rules", collect)


def configured(
    config: Path | None = None,
    *,
    select: Sequence[str] = (),
    extend_select: Sequence[str] = (),
    ignore: Sequence[str] = (),
) -> tuple[Settings, dict[str, RuleSource]]:
    """The nearest settings (or those in ``config``) with the command line's choice of rules over them,
    checked against the installed rules, and those rules."""
    settings = read_settings(config) if config is not None else find_settings()
    settings = settings.chosen_on_the_command_line(select, extend_select, ignore)
    rules = registry()
    settings.check_rule_ids(set(rules))
    return settings, rules


def _prefix_refusal(rule_id: str, distribution: str) -> str | None:
    if rule_id.startswith(BUILTIN_PREFIX) and distribution != plugin_manager.BUILTIN_DISTRIBUTION:
        return f"the {BUILTIN_PREFIX} prefix is hacfg's own; pick a prefix for your plugin"
    return None


class Report:
    """What a lint found, in how many files, what it skipped and why, and the baseline it applied."""

    __slots__ = ("baseline", "files", "findings", "notes")

    def __init__(
        self,
        findings: list[Finding] | None = None,
        files: int = 0,
        notes: list[str] | None = None,  # files named but skipped, and why
        baseline: str | None = None,  # the baseline applied, if any
    ):
        self.findings: list[Finding] = [] if findings is None else findings
        self.files = files
        self.notes: list[str] = [] if notes is None else notes
        self.baseline = baseline

    def worst(self) -> Severity | None:
        active = [f.severity for f in self.findings if f.suppressed is None]
        return max(active, key=SEVERITIES.index) if active else None

    def fails(self, threshold: Severity) -> bool:
        """Whether a finding not suppressed is at or above ``threshold`` (exit 1)."""
        worst = self.worst()
        return worst is not None and at_least(worst, threshold)


def lint_paths(
    paths: Iterable[str | Path],
    settings: Settings,
    *,
    platform: str | None = None,
    respect_gitignore: bool = True,
    force_exclude: bool = False,
) -> Report:
    """Lint files and directories (chosen by :func:`hacfg.lint.discover.discover`); a missing path is an InputError."""
    rules = registry()
    found = discover(paths, settings, respect_gitignore=respect_gitignore, force_exclude=force_exclude)
    report = Report(notes=found.notes)
    for file in found.files:
        report.files += 1
        report.findings.extend(lint_file(file.path, settings, rules, platform=platform, found=file))
    anchor = settings.source or (str(found.files[0].path) if found.files else None)
    report.findings.extend(_plugin_failures(anchor))
    return report


def lint_text(text: str, name: str, settings: Settings, *, platform: str | None = None) -> Report:
    """Text from standard input, linted as the file ``name`` named on the command line would be."""
    report = Report()
    found = choose_named(Path(name), settings, text, report.notes)
    if found is not None:
        report.files = 1
        report.findings = lint_file(found.path, settings, registry(), platform=platform, text=text, found=found)
    report.findings.extend(_plugin_failures(settings.source or name))
    return report


def _plugin_failures(anchor: str | None) -> Iterator[Finding]:
    """A plugin's failure belongs to no file; it is shown at the settings file (or the first file linted),
    because code scanning takes only results with a location."""
    for failure in plugin_manager.drain():
        yield Finding("HA000", "error", anchor or f"<plugin {failure.plugin}>", 1, 1, 1, 1, "", str(failure))


def lint_file(
    path: Path,
    settings: Settings,
    rules: dict[str, RuleSource],
    *,
    platform: str | None = None,
    text: str | None = None,
    found: Found | None = None,
) -> list[Finding]:
    """``text``: the file as an editor holds it, unsaved, instead of what is on disk; ``found``: the file as
    discovery chose it, its documents read and each to lint with its kind, and whether it is a base, a file
    others extend, checked for its own keys and values (the risks are judged where it is extended). Of a
    YAML file of several documents, each body, scenario and manifest is linted."""
    name = str(path)
    documents, linted = (found.documents, found.linted) if found is not None else ((), ())
    try:
        read = documents or (load_all(path) if text is None else parse_all(text, name))
        if len(read) > 1 and not all(_streamed(document.data) for document in read):
            parse(read[0].text, name)  # a scenario file is one document: HA100 where the second starts
    except InputError as err:
        if err.span is None:  # could not read the file at all
            raise
        if "HA100" not in settings.enabled_rules(["HA100"], name):
            return []
        return [finding_at("HA100", rules, err.span, (), err.message)]
    base = found is not None and found.base
    linters = [_FileLinter(item, settings, rules, base=base) for item in linted or ours(read)]
    for linter in linters:
        linter.run(platform)
    return linters[0].finish([finding for linter in linters for finding in linter.placed()])


def _streamed(data: Any) -> bool:
    """What comes several to a YAML file: request bodies, Kubernetes objects (hacfg's own Volcano output)."""
    return data is None or is_request_body(data) or (isinstance(data, dict) and "apiVersion" in data)


class _Passthrough:
    """The request body ``hacfg build`` makes of a scenario, with its ``passthrough:`` and without: what
    a rule finds only in the first, passthrough brought about."""

    __slots__ = ("agreeing", "alone", "merged", "origins")

    def __init__(
        self,
        merged: JobContext,
        alone: JobContext,
        origins: dict[LogicalPath, LogicalPath],
        agreeing: set[LogicalPath],
    ) -> None:
        self.merged = merged  # positions from passthrough, as the platform reads it: beside what the scenario writes
        self.alone = alone  # the scenario's own body
        self.origins = origins  # body path -> the scenario key it was built from
        self.agreeing = agreeing  # in the scenario file: owned keys passthrough writes as the scenario means them

    @classmethod
    def of(cls, ctx: ScenarioContext) -> _Passthrough:
        modelarts = provided.targets().get("modelarts")
        built = modelarts.build(replace(ctx.config, passthrough={})) if modelarts is not None else None
        document = built.document if built is not None else {"metadata": {"name": ctx.config.name}}
        merged = deep_merge(document, ctx.config.passthrough)

        def under(spans: dict[LogicalPath, Span]) -> dict[LogicalPath, Span]:
            return {path[1:]: span for path, span in spans.items() if path[:1] == PASSTHROUGH}

        view = Document(ctx.own.path, ctx.own.text, merged, under(ctx.document.values), under(ctx.document.keys))
        alone = Document(ctx.own.path, ctx.own.text, document, {}, {})
        return cls(
            JobContext(view, view, ctx.platform, JobBody(merged)),
            JobContext(alone, alone, ctx.platform, JobBody(document)),
            built.origins if built is not None else {},
            passthrough_agreements(ctx.config),
        )

    def brought_about(self, rule: Rule) -> Iterator[Problem]:
        """``rule``'s problems in passthrough, each placed in the scenario file: at the passthrough key,
        else (a problem passthrough causes elsewhere) at the scenario key the body path was built from.

        A rule that also reads scenarios judged the scenario's own body in its own words: what it
        finds there, or at a key passthrough only repeats, is not said twice."""
        if rule.scenario_check is None:
            yield from (_under(PASSTHROUGH, p) for p in rule.problems(self.merged) if self.merged.is_set(p.at))
            return
        before = {(problem.at, problem.message) for problem in rule.problems(self.alone)}
        for problem in rule.problems(self.merged):
            if (problem.at, problem.message) in before:
                continue
            if self.merged.is_set(problem.at):
                placed = _under(PASSTHROUGH, problem)
                if placed.at not in self.agreeing:
                    yield placed
            else:
                origin = self.origins.get(tuple(problem.at))
                yield problem._replace(at=origin or PASSTHROUGH, fix=None, on_key=False)


def _under(prefix: LogicalPath, problem: Problem) -> Problem:
    if not prefix:
        return problem
    fix = problem.fix and problem.fix._replace(path=(*prefix, *problem.fix.path))
    return problem._replace(at=(*prefix, *problem.at), fix=fix)


def finding_at(
    rule_id: str,
    rules: dict[str, RuleSource],
    span: Span,
    path: LogicalPath,
    message: str,
    *,
    severity: Severity | None = None,
    fix: Fix | None = None,
) -> Finding:
    return Finding(
        rule_id,
        severity or rules[rule_id].rule.severity,
        span.file,
        span.line,
        span.column,
        span.end_line,
        span.end_column,
        dotted(path),
        message,
        fix,
    )


class _FileLinter:
    """Findings for one file: positions, inheritance from presets, severities, suppressions."""

    def __init__(self, linted: Linted, settings: Settings, rules: dict[str, RuleSource], *, base: bool = False):
        self.own = self.document = linted.document
        self.kind = linted.kind  # as discovery read it
        self.base = base
        self.settings = settings
        self.rules = rules
        self.findings: list[Finding] = []
        self.enabled = settings.enabled_rules(rules, self.own.path)
        self.unjudged: tuple[LogicalPath, ...] = ()  # where invalid keys and values were left out

    def run(self, platform: str | None) -> None:
        """Every enabled rule over the document, and over its passthrough as the body it becomes part of."""
        ctx = self.context(platform)
        if ctx is None:
            return
        self._request_model(ctx)
        passthrough = _Passthrough.of(ctx) if isinstance(ctx, ScenarioContext) and ctx.config.passthrough else None
        for rule_id, source in self.rules.items():
            if rule_id not in self.enabled:
                continue
            try:
                for problem in source.rule.problems(ctx):
                    self.add(rule_id, problem)
                for problem in passthrough.brought_about(source.rule) if passthrough else ():
                    self.add(rule_id, problem)
            except Exception as err:  # a plugin's bug must not stop the other rules
                message = f"rule {rule_id} of plugin {source.plugin!r} raised {type(err).__name__}: {err}"
                span = self.own.span(())
                self.findings.append(finding_at("HA000", self.rules, span, (), message.splitlines()[0]))

    def context(self, platform: str | None) -> ScenarioContext | JobContext | ManifestContext | None:
        if self.kind == "job":
            self.own = self.document = self._environments_listed(self.own, ())
        if self.kind != "scenario":
            chosen_platform = platform or self.settings.platform or "huaweicloud"
            if self.kind == "manifest":
                return ManifestContext(self.own, self.own, chosen_platform, Manifest(self.own.data))
            return JobContext(self.own, self.own, chosen_platform, JobBody(self.own.data))
        self._environments_listed(self.own, PASSTHROUGH)  # validation reads them so, for lint and build alike
        file_platform = self.own.data.get("platform") if isinstance(self.own.data, dict) else None
        chosen = platform or (file_platform if isinstance(file_platform, str) else None) or self.settings.platform
        try:
            if self.base:
                validate(as_base(self.own), platform=chosen)
                return None
            self.document = with_presets(self.own, provided.presets())
            loaded = validate(self.document, platform=chosen)
        except ConfigInvalid as invalid:
            for error in invalid.errors:
                if isinstance(error, ConfigError) and error.unknown_key:
                    fix = self._rename(error.path, error.span, error.suggestion)
                    self._add("HA101", error.span, error.path, error.message, fix=fix)
                else:
                    self._add("HA102", error.span or self.own.span(()), getattr(error, "path", ()), error.message)
            salvaged = None if self.base else salvage(self.document, invalid, platform=chosen)
            if salvaged is None:
                return None
            loaded, self.unjudged = salvaged.loaded, salvaged.unjudged
        except InputError as err:  # extends: an unknown preset, a missing or unparsable base file
            self._add("HA102", err.span or self.own.span(()), ("extends",), err.message)
            return None
        config, self.document = loaded.config, loaded.document
        advice = preset_advice(config.scenario, provided.presets())
        return ScenarioContext(self.document, self.own, config.platform, config, advice)

    def _environments_listed(self, document: Document, within: LogicalPath) -> Document:
        """HA103 where the environment variables are a list of pairs, and ``document`` read as the mapping
        they mean (or as it is)."""
        view = environments_as_mapping(document, within)
        if view is None:
            return document
        import json  # only for such a list: a lint of most files does without the module

        at = (*within, *ENVIRONMENTS_AT)
        span = document.span(at)
        written = _written(document.text, span)  # a block list's span runs to the next line: keep its line end
        mapping = json.dumps(lookup(view.data, at), ensure_ascii=False) + written[len(written.rstrip()) :]
        self._add("HA103", span, at, environments_note(within), fix=Fix(at, mapping, "Write the pairs as one mapping"))
        return view

    def _request_model(self, ctx: ScenarioContext | JobContext | ManifestContext) -> None:
        """HA101 and HA104 in a request body, or in what ``passthrough:`` adds to the one the scenario becomes."""
        if isinstance(ctx, ManifestContext):
            return  # a Kubernetes manifest: its CRD, not the ModelArts request model
        body, within = (ctx.own.data, ()) if isinstance(ctx, JobContext) else (ctx.config.passthrough, PASSTHROUGH)
        for unknown in unknown_keys(body, within):
            span = self.own.span(unknown.at, key=True)
            fix = self._rename(unknown.at, span, unknown.suggestion) if unknown.misspelled else None
            severity: Severity | None = "warning" if unknown.read_only else None
            self._add("HA101", span, unknown.at, unknown.message, fix=fix, severity=severity)
        for value in undocumented_values(body, within):
            self._add("HA104", self.own.span(value.at), value.at, value.message)

    def _rename(self, path: LogicalPath, span: Span, suggestion: str | None) -> Fix | None:
        """HA101's fix: the key spelled as the known key it most likely meant, quoted as it was; none when
        the key stands in a preset or the mapping has that key already (a duplicate does not parse)."""
        key = path[-1]
        siblings = lookup(self.own.data, path[:-1])
        if suggestion is None or span.file != self.own.path or not isinstance(siblings, dict):
            return None
        if suggestion in siblings or not isinstance(key, str):
            return None
        written = _written(self.own.text, span)
        if key not in written:  # an escape in a quoted key: leave it to the user
            return None
        return Fix(path, written.replace(key, suggestion, 1), f"Rename {key!r} to {suggestion!r}")

    def add(self, rule_id: str, problem: Problem) -> None:
        if any(problem.at[: len(part)] == part for part in self.unjudged):
            return  # HA101 or HA102 says what is wrong there
        span = self.document.span(problem.at, key=problem.on_key)
        self._add(rule_id, span, problem.at, problem.message, fix=problem.fix, severity=problem.severity)

    def _add(
        self,
        rule_id: str,
        span: Span,
        path: LogicalPath,
        message: str,
        *,
        fix: Fix | None = None,
        severity: Severity | None = None,
    ) -> None:
        if rule_id not in self.enabled:
            return
        finding = finding_at(rule_id, self.rules, span, path, message, fix=fix, severity=severity)
        override = self.settings.severity.get(rule_id)
        if override:
            finding = finding._replace(severity=override)
        self.findings.append(finding)

    def placed(self) -> list[Finding]:
        """The findings, those inherited from a preset moved here unless the preset suppresses them itself."""
        result = []
        for finding in self.findings:
            if finding.path != self.own.path:
                if suppressions_in(_base_text(finding.path)).match(finding) is not None:
                    continue  # the preset vouches for its own choice
                finding = self._relocate(finding)
            result.append(finding)
        return result

    def finish(self, findings: list[Finding]) -> list[Finding]:
        """Apply this file's suppressions to ``findings`` (of every document in it), in file order."""
        own_suppressions = suppressions_in(self.own.text)
        result = []
        for finding in findings:
            reason = own_suppressions.match(finding)
            result.append(finding if reason is None else finding._replace(suppressed=reason))
        for line, column, message, severity in own_suppressions.leftovers(self.rules):
            # a base's comments speak for the files extending it: one that silences nothing here is not stale
            if "HA099" in self.enabled and not (self.base and severity == "info"):
                span = Span(self.own.path, line, column, line, column)
                result.append(finding_at("HA099", self.rules, span, (), message, severity=severity))
        return sorted(result, key=lambda f: (f.line, f.column, f.rule))

    def _relocate(self, finding: Finding) -> Finding:
        span = self.own.span(inherited_at(self.own))
        return finding._replace(
            path=self.own.path,
            line=span.line,
            column=span.column,
            end_line=span.end_line,
            end_column=span.end_column,
            message=f"{finding.message} (inherited from {Path(finding.path).name})",
        )


def _written(text: str, span: Span) -> str:
    """The source text ``span`` covers."""
    starts = line_starts(text)
    return text[starts[span.line - 1] + span.column - 1 : starts[span.end_line - 1] + span.end_column - 1]


def _base_text(path: str) -> str:
    """The text of the base a finding comes from, as merging read it; a base that does not parse
    vouches for nothing."""
    try:
        return read_base(Path(path)).text
    except InputError:
        return ""


# compiled (and kept by re's cache) on the first line that may hold one: most files have none
_SUPPRESSION = r"(?:^|\s)#\s*hacfg:\s*(disable|disable-file)\s*=\s*([A-Za-z0-9_, ]+?)\s*(?:--\s*(.*?))?\s*$"


class _Suppression:
    __slots__ = ("column", "comment_line", "ids", "line", "reason", "used")

    def __init__(
        self,
        line: int,
        comment_line: int,
        column: int,
        ids: tuple[str, ...],
        reason: str,
        used: set[str],
    ) -> None:
        self.line = line  # the line it silences (0: the whole file)
        self.comment_line = comment_line
        self.column = column
        self.ids = ids
        self.reason = reason
        self.used = used  # the rules it silenced


class Suppressions:
    __slots__ = ("items",)

    def __init__(self, items: list[_Suppression]) -> None:
        self.items = items

    def match(self, finding: Finding) -> str | None:
        """The reason of the first suppression that silences ``finding``, else None."""
        for item in self.items:
            if finding.rule in item.ids and item.line in (0, finding.line):
                item.used.add(finding.rule)
                return item.reason
        return None

    def leftovers(self, rules: dict[str, RuleSource]) -> Iterator[tuple[int, int, str, Severity]]:
        for item in self.items:
            for rule_id in item.ids:
                if rule_id not in rules:
                    yield item.comment_line, item.column, f"unknown rule {rule_id!r} in suppression comment", "error"
                elif rule_id not in item.used:
                    yield item.comment_line, item.column, f"suppression of {rule_id} matched nothing: remove it", "info"


def suppressions_in(text: str) -> Suppressions:
    """``# hacfg: disable=ID[,ID] [-- reason]`` on a line or alone above it; ``disable-file=`` anywhere."""
    found = Suppressions([])
    if "hacfg:" not in text:
        return found
    lines = text.splitlines()
    for index, line in enumerate(lines):
        match = re.search(_SUPPRESSION, line)
        if not match:
            continue
        kind, ids, reason = match.groups()
        column = line.index("#", match.start()) + 1
        alone = not line[: column - 1].strip()
        if kind == "disable-file":
            target = 0
        elif alone:
            target = next(
                (
                    i + 1
                    for i in range(index + 1, len(lines))
                    if lines[i].strip() and not lines[i].lstrip().startswith("#")
                ),
                -1,
            )
        else:
            target = index + 1
        rule_ids = tuple(part.strip().upper() for part in ids.split(",") if part.strip())
        found.items.append(_Suppression(target, index + 1, column, rule_ids, reason or "", set()))
    return found
