"""Every middleware test runs twice: through ``agent.invoke`` and ``agent.ainvoke``."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)
