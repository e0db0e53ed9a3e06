"""The calculator: exact values, refusals that name the token, and the tool wrapper."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from retryctl.exceptions import UsageError
from retryctl.tools import CalculatorError, CalculatorTool, calculate
from retryctl.tools._calculator import format_exact


class TestCalculate:
    @pytest.mark.parametrize(
        ("expression", "expected"),
        [
            ("0.1 + 0.2", Fraction(3, 10)),
            ("1/3 + 1/6", Fraction(1, 2)),
            ("2**100", Fraction(1267650600228229401496703205376)),
            ("(3 + 4) * 2 / 7", Fraction(2)),
            ("-7 // 2", Fraction(-4)),
            ("-7 % 3", Fraction(2)),
            ("2 ** -3", Fraction(1, 8)),
            ("abs(-5) + max(1, 2, 3) - min(4, 5)", Fraction(4)),
            ("1_000 * 1e3", Fraction(1_000_000)),
            ("--3", Fraction(3)),
        ],
    )
    def test_exact_values(self, expression, expected):
        assert calculate(expression) == expected

    @given(st.integers(-(10**30), 10**30), st.integers(-(10**30), 10**30).filter(bool))
    def test_agrees_with_fraction_arithmetic(self, a, b):
        assert calculate(f"({a}) / ({b}) + ({a}) * ({b})") == Fraction(a, b) + a * b

    @pytest.mark.parametrize(
        ("expression", "token", "column"),
        [
            ("2 ^ 3", "^", 3),
            ("x + 1", "x", 1),
            ("__import__('os')", "__import__", 1),
            ("(1).real", "(1).real", 1),
            ("1 + 'a'", "'a'", 5),
            ("2 ** 0.5", "2 ** 0.5", 1),
            ("9 ** 999999999", "9 ** 999999999", 1),
            ("1e999999999", "1e999999999", 1),
            ("4 / (2 - 2)", "4 / (2 - 2)", 1),
            ("True + 1", "True", 1),
        ],
    )
    def test_refusals_name_the_token(self, expression, token, column):
        with pytest.raises(CalculatorError) as err:
            calculate(expression)
        assert err.value.token == token and err.value.column == column
        assert repr(token) in str(err.value)
        assert isinstance(err.value, UsageError)

    @pytest.mark.parametrize(
        "expression", ["", "1 +", "(" * 300 + "1" + ")" * 300, "-" * 5000 + "1", "1" * 3000]
    )
    def test_malformed_or_huge_input_is_a_clear_error(self, expression):
        with pytest.raises(CalculatorError):
            calculate(expression)


class TestFormatExact:
    @pytest.mark.parametrize(
        ("value", "text"),
        [
            (Fraction(42), "42"),
            (Fraction(-7, 8), "-0.875"),
            (Fraction(1, 3), "1/3"),
            (Fraction(123456789012345678901234567891, 2), "61728394506172839450617283945.5"),
            (Fraction(1, 1000), "0.001"),
        ],
    )
    def test_format(self, value, text):
        assert format_exact(value) == text
        assert calculate(text) == value


class TestCalculatorTool:
    def test_answers_and_reports_errors_as_content(self):
        tool = CalculatorTool()
        assert tool.invoke({"expression": "6 * 7"}) == "42"
        assert tool.invoke({"expression": "1/3"}).startswith("1/3 (≈ 0.3333")
        error = tool.invoke({"expression": "2 ^ 3"})
        assert error.startswith("calculator error") and "'^'" in error and "**" in error

    def test_schema_names_the_argument(self):
        assert list(CalculatorTool().args) == ["expression"]
