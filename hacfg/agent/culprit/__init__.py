"""Naming the culprit of a hang before anything is killed.

- :mod:`hook` runs in the training's interpreter: stacks on a signal, the flight recorder on request.
- :mod:`evidence` is the agent's side: it asks its ranks, reads their answers and /proc, and
  keeps the files under the node's state folder.
- :mod:`analysis` is a pure function from every node's summary to a culprit, or to none.
"""
