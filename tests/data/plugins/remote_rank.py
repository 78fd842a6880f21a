"""A site classifier: gloo's "by peer" errors mean a rank died elsewhere, an environment fault."""

import re

from hacfg import hookimpl
from hacfg.agent.classify import Classification

GLOO_PEER = re.compile(r"gloo/transport/tcp/pair\.cc:\d+\].*Connection (?:closed|reset) by peer")


@hookimpl
def hacfg_classify_failure(failure):
    if any(GLOO_PEER.search(line) for line in failure.tail):
        return Classification("environment", "a rank on another process or node died first (gloo lost its peer)")
    return None
