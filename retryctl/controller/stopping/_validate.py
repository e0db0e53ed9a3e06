"""Checks shared by the rules' constructors: each failure is a ConfigError naming the field."""

from __future__ import annotations

from retryctl.exceptions import ConfigError

__all__ = ["check_int_at_least", "check_positive", "check_probability"]


def check_int_at_least(field: str, value: object, minimum: int) -> None:
    """``value`` must be an int (not a bool) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(field=field, value=value, problem="must be an integer")
    if value < minimum:
        raise ConfigError(field=field, value=value, problem=f"must be >= {minimum}")


def check_probability(field: str, value: object, *, open_low: bool = True) -> None:
    """``value`` must be a real number in (0, 1] (or [0, 1] when ``open_low`` is false)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(field=field, value=value, problem="must be a number")
    low_ok = value > 0 if open_low else value >= 0
    if not (low_ok and value <= 1):
        interval = "(0, 1]" if open_low else "[0, 1]"
        raise ConfigError(field=field, value=value, problem=f"must be in {interval}")


def check_positive(field: str, value: object) -> None:
    """``value`` must be a real number > 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(field=field, value=value, problem="must be a number")
    if not value > 0:
        raise ConfigError(field=field, value=value, problem="must be > 0")
