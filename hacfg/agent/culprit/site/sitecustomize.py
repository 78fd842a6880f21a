"""Arms the evidence hook at interpreter start, then runs the ``sitecustomize`` this one shadows.

The agent puts this folder first on ``PYTHONPATH`` for its command, so every Python process it
starts (the script, a launcher's workers) loads :mod:`hook` by path: no ``hacfg`` package is
imported in the training's interpreter.
"""

import importlib.machinery
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("_hacfg_evidence", os.path.join(os.path.dirname(_here), "hook.py"))
if _spec is not None and _spec.loader is not None and "_hacfg_evidence" not in sys.modules:
    _hook = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = _hook
    _spec.loader.exec_module(_hook)
    _hook.install()

# The user's own sitecustomize, if any, found on the rest of the path.
_rest = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _here]
_theirs = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _theirs is not None and _theirs.loader is not None:
    _module = importlib.util.module_from_spec(_theirs)
    sys.modules["sitecustomize"] = _module
    _theirs.loader.exec_module(_module)
