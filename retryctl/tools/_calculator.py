"""Exact arithmetic from a safe expression parser, and the ``calculator`` tool around it.

The expression is parsed with :mod:`ast` (never evaluated by Python) and walked over a whitelist:
numbers, ``+ - * / // % **``, unary signs, parentheses and ``abs``/``min``/``max``. Values are
:class:`~fractions.Fraction`, so ``0.1 + 0.2`` is exactly ``3/10`` and big integers stay exact. Anything
else is a :class:`CalculatorError` that names the offending token and its column.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

from langchain_core.tools import BaseTool, ToolException
from pydantic import BaseModel, Field

from retryctl.exceptions import UsageError

__all__ = ["CalculatorArgs", "CalculatorError", "CalculatorTool", "calculate", "format_exact"]

MAX_EXPRESSION_CHARS = 2000
"""Longer input is refused before parsing (the parser's own recursion is the limit otherwise)."""
MAX_RESULT_BITS = 100_000
"""No value may need more bits than this (about 30,000 decimal digits), numerator or denominator."""

_BINARY: dict[type[ast.operator], Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
           ast.Mod: "%", ast.Pow: "**", ast.BitXor: "^", ast.BitAnd: "&", ast.BitOr: "|",
           ast.LShift: "<<", ast.RShift: ">>", ast.MatMult: "@"}  # fmt: skip
_FUNCTIONS: dict[str, Callable[..., Fraction]] = {"abs": abs, "min": min, "max": max}


class CalculatorError(UsageError):
    """The expression is not exact arithmetic this calculator accepts. ``token`` is what was refused,
    ``column`` its 1-based position (0 when unknown)."""

    def __init__(self, problem: str, *, token: str = "", column: int = 0) -> None:
        self.problem = problem
        self.token = token
        self.column = column
        where = f" at column {column}" if column else ""
        shown = f" {token!r}" if token else ""
        super().__init__(f"{problem}{shown}{where}")


def _bits(value: Fraction) -> int:
    return max(value.numerator.bit_length(), value.denominator.bit_length())


class _Evaluator:
    def __init__(self, text: str) -> None:
        self.text = text

    def fail(self, node: ast.AST, problem: str) -> CalculatorError:
        token = ast.get_source_segment(self.text, node) or type(node).__name__
        return CalculatorError(problem, token=token, column=getattr(node, "col_offset", -1) + 1)

    def checked(self, node: ast.AST, value: Fraction) -> Fraction:
        if _bits(value) > MAX_RESULT_BITS:
            raise self.fail(node, f"result needs more than {MAX_RESULT_BITS} bits:")
        return value

    def eval(self, node: ast.AST) -> Fraction:
        if isinstance(node, ast.Constant):
            return self.constant(node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd | ast.USub):
            value = self.eval(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp):
            return self.checked(node, self.binary(node))
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Name):
            raise self.fail(node, "unknown name (only numbers, operators, abs, min and max):")
        raise self.fail(node, f"unsupported syntax ({type(node).__name__}):")

    def constant(self, node: ast.Constant) -> Fraction:
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise self.fail(node, "not a number:")
        if isinstance(node.value, int):
            return Fraction(node.value)
        # The literal as written (0.1 is one tenth), not the binary float it would round to.
        literal = (ast.get_source_segment(self.text, node) or repr(node.value)).replace("_", "")
        number = Decimal(literal)
        if not number.is_finite() or abs(number.adjusted()) > MAX_RESULT_BITS // 4:
            raise self.fail(node, "number out of range:")
        return Fraction(number)

    def binary(self, node: ast.BinOp) -> Fraction:
        op = type(node.op)
        left, right = self.eval(node.left), self.eval(node.right)
        if op is ast.Pow:
            return self.power(node, left, right)
        if op in (ast.Div, ast.FloorDiv, ast.Mod) and right == 0:
            raise self.fail(node, "division by zero in")
        if op in _BINARY:
            return _BINARY[op](left, right)
        if op is ast.FloorDiv:
            return Fraction(left // right)
        if op is ast.Mod:
            return left % right
        symbol = _SYMBOL.get(op, op.__name__)
        hint = " (use ** for powers)" if op is ast.BitXor else ""
        column = self.text.find(symbol, node.left.end_col_offset or 0) + 1
        raise CalculatorError(f"unsupported operator{hint}:", token=symbol, column=column)

    def power(self, node: ast.BinOp, base: Fraction, exponent: Fraction) -> Fraction:
        if exponent.denominator != 1:
            raise self.fail(node, "a non-integer power is not exact:")
        if base == 0 and exponent < 0:
            raise self.fail(node, "division by zero in")
        # Guard before computing: |exponent| * bits(base) bounds the result's size.
        if base not in (0, 1, -1) and abs(exponent.numerator) * _bits(base) > MAX_RESULT_BITS:
            raise self.fail(node, f"result needs more than {MAX_RESULT_BITS} bits:")
        return base**exponent.numerator

    def call(self, node: ast.Call) -> Fraction:
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            raise self.fail(node.func, "unknown function (only abs, min, max):")
        if node.keywords or not node.args:
            raise self.fail(node, "functions take positional numbers only:")
        args = [self.eval(arg) for arg in node.args]
        if node.func.id == "abs" and len(args) != 1:
            raise self.fail(node, "abs takes one number:")
        return Fraction(_FUNCTIONS[node.func.id](*args))


def calculate(expression: str) -> Fraction:
    """The exact value of an arithmetic ``expression``; :class:`CalculatorError` for anything else."""
    text = expression.strip()
    if not text:
        raise CalculatorError("empty expression")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        bad = (exc.text or "")[(exc.offset or 1) - 1 : (exc.offset or 1)].strip()
        raise CalculatorError("syntax error near", token=bad, column=exc.offset or 0) from None
    except (RecursionError, MemoryError, ValueError):
        raise CalculatorError("expression is nested too deeply") from None
    try:
        return _Evaluator(text).eval(tree.body)
    except RecursionError:
        raise CalculatorError("expression is nested too deeply") from None


def format_exact(value: Fraction) -> str:
    """An integer as itself, a terminating fraction as a decimal (``0.5``), otherwise ``p/q``."""
    if value.denominator == 1:
        return str(value.numerator)
    den, twos, fives = value.denominator, 0, 0
    while den % 2 == 0:
        den, twos = den // 2, twos + 1
    while den % 5 == 0:
        den, fives = den // 5, fives + 1
    if den != 1:
        return f"{value.numerator}/{value.denominator}"
    # n / (2^a 5^b) = n * 10^k / d / 10^k with k = max(a, b): exact digits, no Decimal rounding.
    places = max(twos, fives)
    digits = str(abs(value.numerator) * (10**places // value.denominator)).rjust(places + 1, "0")
    sign = "-" if value < 0 else ""
    return f"{sign}{digits[:-places]}.{digits[-places:]}"


class CalculatorArgs(BaseModel):
    """Arguments of the ``calculator`` tool."""

    expression: str = Field(
        description="An arithmetic expression: numbers, + - * / // % ** and parentheses, "
        "abs(), min(), max(). Example: (3 + 4) * 2 / 7"
    )


class CalculatorTool(BaseTool):
    """Exact arithmetic (rationals and big integers). A bad expression comes back as a message that
    names the offending token, so the model can fix it."""

    name: str = "calculator"
    description: str = (
        "Exact arithmetic on rationals and big integers. Input one expression using numbers, "
        "+ - * / // % ** and parentheses, abs(), min(), max(). Returns the exact value (a fraction "
        "p/q when the decimal does not terminate, with a decimal approximation)."
    )
    args_schema: type[BaseModel] = CalculatorArgs
    handle_tool_error: bool = True

    def _run(self, expression: str, **_: Any) -> str:
        try:
            value = calculate(expression)
        except CalculatorError as exc:
            raise ToolException(f"calculator error: {exc}") from exc
        exact = format_exact(value)
        if "/" in exact:
            approx = Decimal(value.numerator) / Decimal(value.denominator)
            return f"{exact} (≈ {approx:.12g})"
        return exact
