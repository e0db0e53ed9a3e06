"""A driver's own say on errors (``retry_on=``, ``classify=``) and an exception's own (``is_retryable``)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import pytest
import requests
from langchain.agents.middleware._retry import should_retry_exception
from langchain_core.exceptions import (
    ModelAuthenticationError,
    ModelConnectionError,
    ModelError,
    ModelRateLimitError,
)
from langchain_openai.chat_models.base import OpenAIRateLimitError

from retryctl.controller import Classification, ErrorClass, classify, error_classifier
from retryctl.exceptions import BreakerOpen, BudgetExceeded, ConfigError, RuntimeFailure

T, V, X = ErrorClass.TRANSIENT, ErrorClass.VALIDATION, ErrorClass.TERMINAL


class WithStatus(Exception):
    def __init__(self, status: int, retry_after: str | None = None) -> None:
        super().__init__(f"HTTP {status}")
        self.status_code = status
        self.headers = {"retry-after": retry_after} if retry_after else {}


def raised_from(outer: BaseException, inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as err:
            raise outer from err
    except BaseException as exc:
        return exc


class TestRetryableMark:
    """langchain-core's ``ModelError`` says itself whether a retry may work (``is_retryable``)."""

    def test_a_mark_of_true_makes_an_unknown_error_transient(self) -> None:
        for exc in (ModelRateLimitError("slow down"), ModelConnectionError("gone")):
            got = classify(exc)
            assert got.error_class is T and "is_retryable" in got.reason

    def test_a_mark_of_false_is_never_transient(self) -> None:
        assert classify(ModelAuthenticationError("who")).error_class is X
        assert classify(ModelError("odd")).error_class is X

        class FlakyButFinal(TimeoutError):
            is_retryable = False

        got = classify(FlakyButFinal("slow"))
        assert got.error_class is X and "not retryable" in got.reason

        class BadInput(ValueError):
            @property
            def is_retryable(self) -> bool:
                return False

        assert classify(BadInput("x")).error_class is V  # not transient already: its class stands

    def test_a_class_wide_true_does_not_overrule_the_response(self) -> None:
        # What ChatOpenAI raises: openai's RateLimitError and langchain-core's ModelRateLimitError at once.
        request = httpx2.Request("POST", "http://127.0.0.1:1/v1/chat/completions")
        response = httpx2.Response(429, request=request, headers={"retry-after": "2"})
        busy = OpenAIRateLimitError("busy", response=response, body={})
        assert busy.is_retryable
        got = classify(busy)
        assert (got.error_class, got.retry_after_s, got.status_code) == (T, 2.0, 429)
        broke = OpenAIRateLimitError("quota", response=response, body={"code": "insufficient_quota"})
        assert classify(broke).error_class is X


class TestErrorClassifier:
    def test_without_rules_it_is_classify(self) -> None:
        plain = error_classifier()
        exc = requests.ReadTimeout("slow")
        assert plain(exc) == classify(exc)

    def test_retry_on_types(self) -> None:
        rules = error_classifier(retry_on=(ValueError, requests.Timeout))
        assert rules(ValueError("bad")).error_class is T  # matched: retried, whatever its default
        assert "retry_on" in rules(ValueError("bad")).reason
        assert rules(requests.ReadTimeout("slow")).error_class is T
        unmatched = rules(requests.ConnectionError("refused"))
        assert unmatched.error_class is X and "retry_on does not match" in unmatched.reason
        assert rules(TypeError("f() takes 1 argument")).error_class is V  # still refined, not retried

    def test_one_class_is_that_class_not_a_predicate(self) -> None:
        rules = error_classifier(retry_on=KeyError)
        assert rules(KeyError("k")).error_class is T
        assert rules(TimeoutError()).error_class is X

    def test_retry_on_predicate_keeps_the_servers_wait(self) -> None:
        rules = error_classifier(retry_on=lambda exc: getattr(exc, "status_code", None) == 429)
        got = rules(WithStatus(429, "4"))
        assert (got.error_class, got.retry_after_s) == (T, 4.0)
        assert rules(WithStatus(503)).error_class is X

    def test_a_hook_decides_first_and_keeps_the_http_facts(self) -> None:
        def hook(exc: BaseException) -> ErrorClass | None:
            return X if isinstance(exc, WithStatus) else None

        rules = error_classifier(classify=hook, retry_on=(KeyError,))
        got = rules(WithStatus(429, "3"))
        assert (got.error_class, got.status_code, got.retry_after_s) == (X, 429, 3.0)
        assert "classify hook" in got.reason and "hook" in got.reason
        assert rules(KeyError("k")).error_class is T  # None: retry_on and the default decide

    def test_a_hook_may_return_a_classification_or_a_class_name(self) -> None:
        mine = Classification(V, "mine")
        assert error_classifier(classify=lambda exc: mine)(KeyError()) is mine
        by_name: Any = lambda exc: "transient"  # noqa: E731  # a str where an ErrorClass is typed
        assert error_classifier(classify=by_name)(KeyError()).error_class is T

    def test_a_hook_returning_something_else_is_a_config_error(self) -> None:
        with pytest.raises(ConfigError) as info:
            error_classifier(classify=lambda exc: True)(KeyError())  # type: ignore[arg-type,return-value]
        assert info.value.field == "classify"

    def test_the_controllers_own_decisions_are_not_overruled(self) -> None:
        rules = error_classifier(retry_on=(BaseException,), classify=lambda exc: T)
        assert rules(BreakerOpen(key="k", retry_at=1.0, failures=3)).error_class is X
        assert rules(BudgetExceeded(limit_name="usd", limit=1.0, value=2.0)).error_class is X
        assert rules(asyncio.CancelledError()).error_class is X

    def test_rules_see_the_error_under_retryctls_wrapper(self) -> None:
        wrapped = raised_from(RuntimeFailure("the model call failed"), requests.ReadTimeout("slow"))
        assert classify(wrapped).error_class is T  # a runtime failure declaring no class: its cause
        assert error_classifier(retry_on=(requests.ReadTimeout,))(wrapped).error_class is T
        assert error_classifier(retry_on=(ValueError,))(wrapped).error_class is X


SAMPLES: list[BaseException] = [
    ValueError("bad"),
    TimeoutError(),
    requests.ReadTimeout("slow"),
    requests.ConnectionError("refused"),
    KeyError("k"),
    WithStatus(429),
    WithStatus(400),
    ModelRateLimitError("slow"),
]
RULES: list[Any] = [
    (ValueError,),
    (requests.RequestException,),
    (TimeoutError, KeyError),
    (),
    lambda exc: isinstance(exc, KeyError | WithStatus),
    lambda exc: "slow" in str(exc),
]


@pytest.mark.parametrize("retry_on", RULES, ids=[str(i) for i in range(len(RULES))])
def test_retry_on_retries_what_langchain_retries(retry_on: Any) -> None:
    """On any exception, ``retry_on`` retries exactly what LangChain's retry middlewares retry."""
    rules = error_classifier(retry_on=retry_on)
    for exc in SAMPLES:
        assert rules(exc).retryable == should_retry_exception(exc, retry_on), exc  # type: ignore[arg-type]


class TestChecks:
    @pytest.mark.parametrize(
        ("value", "field"),
        [
            ("TimeoutError", "retry_on"),
            (42, "retry_on"),
            ([ValueError, "KeyError"], "retry_on[1]"),
            ((ValueError, int), "retry_on[1]"),
            (lambda: True, "retry_on"),
            (lambda exc, attempt: True, "retry_on"),
        ],
    )
    def test_a_bad_retry_on_names_itself(self, value: Any, field: str) -> None:
        with pytest.raises(ConfigError) as info:
            error_classifier(retry_on=value)
        assert info.value.field == field

    @pytest.mark.parametrize("value", [ErrorClass.TRANSIENT, "transient", Classification, lambda: None])
    def test_a_bad_classify_names_itself(self, value: Any) -> None:
        with pytest.raises(ConfigError) as info:
            error_classifier(classify=value)
        assert info.value.field == "classify"
