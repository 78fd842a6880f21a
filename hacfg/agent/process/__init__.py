"""The processes of an attempt: the supervised child and its process group (:mod:`.attempt`),
its output (:mod:`.relay`), warm starts forked from a prepared interpreter (:mod:`.warm`, and
:mod:`.warm_server`, which runs inside the user's interpreter on the standard library alone),
what a killed agent left running (:mod:`.leftovers`), and the accelerators' utilisation
(:mod:`.accelerator`)."""
