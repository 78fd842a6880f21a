"""JSON Schemas shipped with hacfg (data: the JSON files beside this one)."""
