"""A plugin returning the wrong types from its hooks."""
from hacfg.plugin import hookimpl


@hookimpl
def hacfg_rules():
    return [42]


@hookimpl
def hacfg_presets():
    return "not a mapping"


@hookimpl
def hacfg_targets():
    return ["a string"]
