"""A scripted stand-in for the demo agent's model, for CLI tests of decisions (never the real path):
its expression member writes a right expression for the two tasks these tests use, its answer member
says 7."""

from __future__ import annotations

import json

from retryctl.models import Message, SamplingParams
from retryctl.testing import ScriptedBackend


def scripted_demo_model(*_args: object, **_kwargs: object) -> ScriptedBackend:
    """A replacement for ``retryctl.agent._graph.demo_model`` (its arguments are ignored)."""

    def reply(messages: list[Message], params: SamplingParams) -> str:
        if params.response_format is not None:
            return json.dumps({"expression": "3 + 4" if "Tom" in str(messages) else "2 + 5"})
        return "The answer is 7."

    return ScriptedBackend([reply], model="scripted", confidence=0.95, cycle=True)
