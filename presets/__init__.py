"""Scenario presets shipped with hacfg (data: the YAML files beside this one)."""
