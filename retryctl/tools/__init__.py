"""Built-in tools (LangChain ``BaseTool``s) and the registry of equivalence groups.

``calculator`` does exact arithmetic from a safe parser; ``python`` runs code in
:mod:`retryctl.sandbox`; :class:`ToolRegistry` says which tool to switch to when one fails.
"""

from retryctl.tools._calculator import (
    CalculatorArgs,
    CalculatorError,
    CalculatorTool,
    calculate,
)
from retryctl.tools._python import (
    PythonArgs,
    PythonRunReport,
    PythonTool,
)
from retryctl.tools._registry import ToolRegistry, default_registry

__all__ = [
    "CalculatorArgs",
    "CalculatorError",
    "CalculatorTool",
    "PythonArgs",
    "PythonRunReport",
    "PythonTool",
    "ToolRegistry",
    "calculate",
    "default_registry",
]
