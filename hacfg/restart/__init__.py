"""The restart rules of the platform: the words an attempt's ending, a decision and an event are
written in (:mod:`.vocabulary`), and the pure policy that decides (:mod:`.policy`).

They sit below the plugin API, so that the types plugins receive (``Policy``, ``Cause``,
``RETRY_ELSEWHERE``) import them for real, and below the agent, which applies them.
"""
