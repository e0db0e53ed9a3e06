"""The demo agent: a LangGraph graph whose arithmetic answers are judged by the controller.

The model answers a word problem in its own words; when its sampled answers disagree the controller
switches to a tool of one equivalence group (the calculator, then python in the sandbox), which
evaluates an expression the model writes under a grammar built from the question. ``retryctl demo`` runs it;
``retryctl batch`` runs it over many tasks.
"""

from retryctl.agent._graph import (
    DemoResult,
    DemoState,
    build_demo_graph,
    demo_policy,
    demo_schedule,
)
from retryctl.agent._prompts import (
    DEMO_QUESTION,
    NO_ANSWER,
)

__all__ = [
    "DEMO_QUESTION",
    "NO_ANSWER",
    "DemoResult",
    "DemoState",
    "build_demo_graph",
    "demo_policy",
    "demo_schedule",
]
