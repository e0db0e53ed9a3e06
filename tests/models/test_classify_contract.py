"""The contract between backend errors and the controller's ``classify``: error class, status and Retry-After
must survive classification (the nodes layer retries, refines or switches on it)."""

from __future__ import annotations

import httpx2
import openai

from retryctl.controller import classify
from retryctl.controller._errors import ErrorClass
from retryctl.models import (
    BackendTimeout,
    MalformedResponse,
    ReplayExhausted,
    TerminalBackendError,
    TransientBackendError,
    UnsupportedParameter,
)


class TestBackendErrorsClassify:
    def test_transient_keeps_status_and_retry_after(self):
        got = classify(TransientBackendError("x", backend="b", status_code=429, retry_after_s=3.0))
        assert got.error_class is ErrorClass.TRANSIENT
        assert got.status_code == 429 and got.retry_after_s == 3.0
        assert classify(BackendTimeout("slow", backend="b")).error_class is ErrorClass.TRANSIENT

    def test_malformed_is_validation(self):
        assert classify(MalformedResponse("junk", backend="b")).error_class is ErrorClass.VALIDATION

    def test_terminal_stays_terminal(self):
        got = classify(TerminalBackendError("bad", backend="b", status_code=400))
        assert got.error_class is ErrorClass.TERMINAL and got.status_code == 400
        assert classify(ReplayExhausted("none left", backend="b")).error_class is ErrorClass.TERMINAL


class TestCapabilityErrorsClassify:
    def test_an_unsupported_parameter_is_terminal(self):
        got = classify(UnsupportedParameter("no", backend="b", parameter="logprobs", status_code=500))
        assert got.error_class is ErrorClass.TERMINAL and got.status_code == 500

    def test_the_openai_api_code_for_an_unsupported_parameter_is_terminal_not_validation(self):
        # What a LangChain ChatOpenAI raises: classify sees the SDK's error, not retryctl's.
        request = httpx2.Request("POST", "http://127.0.0.1:1/v1/chat/completions")
        body = {"message": "Unsupported parameter: 'logprobs'", "code": "unsupported_parameter"}
        refused = openai.BadRequestError("refused", response=httpx2.Response(400, request=request), body=body)
        assert classify(refused).error_class is ErrorClass.TERMINAL
        plain = openai.BadRequestError("bad", response=httpx2.Response(400, request=request), body={})
        assert classify(plain).error_class is ErrorClass.VALIDATION


class TestUnclassifiedBackendErrors:
    def test_an_error_the_backend_does_not_know_is_judged_by_its_cause(self):
        # What a LangChain chat model of another provider raises, wrapped by LangChainBackend.
        import anthropic

        from retryctl.models._langchain import _classify

        request = httpx2.Request("POST", "http://127.0.0.1:1/v1/messages")
        for cause, expected in [
            (anthropic.APIConnectionError(request=request), ErrorClass.TRANSIENT),
            (RuntimeError("model deleted"), ErrorClass.TERMINAL),
        ]:
            try:
                try:
                    raise cause
                except Exception as err:
                    raise _classify(err, "langchain:claude") from err
            except Exception as wrapped:
                got = classify(wrapped)
            assert got.error_class is expected, got
            assert type(cause).__name__ in got.reason
