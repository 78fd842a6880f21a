"""What the agent writes and reads back: the node's state and events (:mod:`.state`), which job it
is (:mod:`.identity`), the goodput of a run (:mod:`.goodput`), its timeline (:mod:`.timeline`),
the Prometheus metrics (:mod:`.metrics`) and what the planning model learns from it
(:mod:`.calibration`)."""
