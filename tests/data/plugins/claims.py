"""A plugin claiming IDs it may not: hacfg's HA prefix, and one another plugin already has."""
from hacfg.plugin import hookimpl, rule


@rule("HA050", "not-yours", "info")
def not_yours(ctx):
    """Claims an ID in hacfg's range.

    Third-party plugins pick their own prefix.
    Loading refuses this rule.
    """
    return []


@rule("RAI001", "duplicate", "info")
def duplicate(ctx):
    """Claims an ID another plugin has.

    Two plugins may not share a rule ID.
    Loading refuses this rule.
    """
    return []


@hookimpl
def hacfg_rules():
    return [not_yours, duplicate]
