"""The demo agent: a LangGraph graph whose arithmetic answers are judged by the controller.

The model answers a word problem in its own words; when its sampled answers disagree the controller
switches to a tool of one equivalence group (the calculator, then python in the sandbox), which
evaluates an expression the model writes under a JSON-schema grammar. ``retryctl demo`` runs it;
``retryctl batch`` runs it over many tasks.
"""

from retryctl.agent._graph import (
    DemoResult,
    DemoState,
    build_demo_graph,
    demo_budget,
    demo_policy,
    demo_schedule,
)
from retryctl.agent._members import (
    EXPRESSION_TOOLS,
    NUMBERS_CHECK,
    UNIT_CONSTANTS,
    AnswerBackend,
    ExpressionTool,
    ToolBackend,
    numbers_from_question,
    ungrounded_numbers,
    unused_numbers,
)
from retryctl.agent._prompts import (
    DEMO_QUESTION,
    EXPRESSION_FORMAT,
    NO_ANSWER,
    answer_prompt,
    demo_equivalence,
    expression_prompt,
    parse_expression,
)

__all__ = [
    "DEMO_QUESTION",
    "EXPRESSION_FORMAT",
    "EXPRESSION_TOOLS",
    "NO_ANSWER",
    "NUMBERS_CHECK",
    "UNIT_CONSTANTS",
    "AnswerBackend",
    "DemoResult",
    "DemoState",
    "ExpressionTool",
    "ToolBackend",
    "answer_prompt",
    "build_demo_graph",
    "demo_budget",
    "demo_equivalence",
    "demo_policy",
    "demo_schedule",
    "expression_prompt",
    "numbers_from_question",
    "parse_expression",
    "ungrounded_numbers",
    "unused_numbers",
]
