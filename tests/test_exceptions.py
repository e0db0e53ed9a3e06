"""Every retryctl error survives pickling (a process pool, a multiprocessing queue): same type, same
message, same attributes."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from retryctl import exceptions
from retryctl._paths import PathError
from retryctl.models import _errors as backend_errors
from retryctl.tools._calculator import CalculatorError


def _gateway_errors() -> list[BaseException]:
    """The gateway's own backend errors (its extra may be missing: then none)."""
    try:
        from retryctl.gateway._faults import RepeatedFault, ServerFault
    except ImportError:
        return []
    fault = ServerFault("HTTP 500: refused", backend="m", detail="refused: messages[1]")
    return [fault, RepeatedFault(fault)]


ERRORS: list[BaseException] = [
    exceptions.BudgetExceeded(limit_name="samples", limit=8, value=9, scope="step 'plan'", used=8),
    exceptions.BreakerOpen(key="search", retry_at=12.5, failures=5),
    exceptions.BreakerOpen(key="search", retry_at=12.5, failures=5, wait_s=3.2),
    exceptions.SemanticError(check="uses the question's numbers", detail="7 is not in it", confidence=0.4),
    exceptions.ConfigError(field="max_samples", value=0, problem="must be >= 1"),
    exceptions.UnknownPolicyError(name="nope", known=["default", "esc"]),
    exceptions.FileFormatError(path="x.jsonl", line=2, problem="not JSON"),
    exceptions.BankFormatError(path="bank.jsonl", line=3, problem="no 'samples'"),
    exceptions.TaskFormatError(path="tasks.jsonl", line=1, problem="no 'question'"),
    exceptions.LogIntegrityError(path="d.jsonl", line=7, index=6, problem="hash mismatch"),
    exceptions.SandboxUnavailable(wanted="auto", reasons={"bwrap": "not installed"}),
    exceptions.SandboxError(tier="bwrap", problem="worker exited"),
    exceptions.BreakerStoreError(store="redis://127.0.0.1:1/0", operation="get", problem="refused"),
    exceptions.MissingExtra(feature="retryctl serve", extra="gateway", module="starlette"),
    PathError(path="/tmp/x.jsonl", what="decision log", problem="is a directory"),
    CalculatorError("unknown name", token="x", column=3),
    backend_errors.BackendError("HTTP 401: bad key", backend="m", status_code=401, attempts=1),
    backend_errors.TransientBackendError("HTTP 503: busy", backend="m", status_code=503, retry_after_s=2.0),
    backend_errors.BackendTimeout("no answer in time", backend="m"),
    backend_errors.MalformedResponse("unreadable", backend="m"),
    backend_errors.UnsupportedParameter("no logprobs", backend="m", parameter="logprobs"),
    *_gateway_errors(),
]


def _every_error_class(base: type[BaseException]) -> set[type[BaseException]]:
    found = set()
    for sub in base.__subclasses__():
        found |= {sub, *_every_error_class(sub)}
    return found


class TestPickling:
    @pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
    def test_an_error_comes_back_whole(self, error: BaseException) -> None:
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error)
        assert str(back) == str(error)
        assert vars(back) == vars(error)

    def test_the_sample_covers_every_error_with_a_constructor_of_its_own(self) -> None:
        # A new error class with its own constructor must be added above, or its pickling is untested.
        own_init = {
            cls
            for cls in _every_error_class(exceptions.RetryctlError)
            if "__init__" in vars(cls) and cls.__module__.startswith("retryctl")
        }
        sampled: set[Any] = {type(e) for e in ERRORS}
        assert own_init - sampled == set()
