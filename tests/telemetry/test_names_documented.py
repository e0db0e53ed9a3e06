"""Every span, event and attribute name retryctl writes is in docs/observability.md: a name added to
``retryctl.telemetry.names`` without its line in the docs fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from retryctl.telemetry import names

DOC = Path(__file__).resolve().parents[2] / "docs" / "observability.md"
NAMES = {constant: getattr(names, constant) for constant in names.__all__}


def test_names_holds_strings_only() -> None:
    # Guards the test below: each constant is a name as written on a span.
    assert NAMES and all(isinstance(value, str) and value for value in NAMES.values())


@pytest.mark.parametrize("constant", sorted(NAMES))
def test_each_name_is_documented(constant: str) -> None:
    value = NAMES[constant]
    # A prefix (``retryctl.budget.used.``) is documented with what follows it (``...used.<name>``).
    assert f"`{value}" in DOC.read_text(encoding="utf-8"), (
        f"names.{constant} = {value!r} is not in {DOC.name}"
    )


@pytest.mark.parametrize(
    "name",
    [
        "retryctl.budget.used.transport_retries",
        "retryctl.task.id",
        "retryctl.batch.tasks",
        "retryctl.call_made",
    ],
)
def test_the_names_a_user_looked_for_are_there(name: str) -> None:
    assert f"`{name}`" in DOC.read_text(encoding="utf-8")


def test_error_type_lists_the_real_error_classes() -> None:
    from retryctl.controller import ErrorClass

    row = next(
        line for line in DOC.read_text(encoding="utf-8").splitlines() if line.startswith("| `error.type`")
    )
    assert all(f"`{c.value}`" in row for c in ErrorClass)
    assert "rate_limit" not in row.replace("a rate limit", "")
