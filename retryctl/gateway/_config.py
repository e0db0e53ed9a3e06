"""The gateway's settings, validated by pydantic (a bad one is an error naming the field)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from retryctl.controller import Breaker, BreakerConfig
from retryctl.controller._token_log import TokenLog
from retryctl.evals._choice import CalibrationChoice, choose_calibration
from retryctl.exceptions import ConfigError
from retryctl.models import RetrySettings
from retryctl.runtime._stores import breaker_store, check_breakers

__all__ = ["GatewayConfig"]

EMBEDDED_NAME = "smollm2"
"""The name the embedded model is served under (``--model-name`` changes it)."""


class GatewayConfig(BaseModel):
    """Everything ``retryctl serve`` takes; :func:`~retryctl.gateway.create_app` builds the app from it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    embedded: bool = False
    """Serve the embedded model in this process."""
    upstream: str | None = None
    """An OpenAI-compatible server's base URL (``http://127.0.0.1:8000/v1``) to proxy and sample."""
    upstream_model: str | None = None
    """The model's name on the upstream."""
    model_name: str | None = None
    """The name clients send as ``model`` (default: ``upstream_model``, or ``smollm2`` embedded)."""
    log: Path | None = None
    """The decision log adaptive requests append to (``None``: no log)."""
    max_concurrency: int = Field(default=64, ge=1)
    """Chat requests in progress at once per worker; past it the answer is 429 with ``Retry-After``."""
    timeout_s: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    """Longest wait for one upstream request."""
    retries: int = Field(default=3, ge=0, le=20)
    """Transport retries of one upstream request after its first try (0: none)."""
    retry_wait_s: float = Field(default=0.5, ge=0, allow_inf_nan=False)
    """Backoff before the first retry (it doubles, with full jitter; a ``Retry-After`` is waited exactly)."""
    breakers: str = "memory"
    """Where breaker state lives: ``memory`` (per worker), ``sqlite:PATH`` (workers of one host) or a
    ``redis://`` URL (replicas on many hosts)."""
    breaker_failures: int = Field(default=5, ge=1)
    """Consecutive upstream failures that open its breaker."""
    breaker_cooldown_s: float = Field(default=30.0, ge=0, allow_inf_nan=False)
    """Seconds an open breaker refuses requests before it lets a probe through."""
    n_threads: int | None = Field(default=None, ge=1)
    """Threads of the embedded model (default: llama.cpp's choice)."""
    token_log: TokenLog = TokenLog()
    """The per-token data adaptive requests' verdict records carry (the policy's ``token_log``)."""
    calibration: str | None = None
    """What an adaptive request's confidence is mapped through before the threshold: ``shipped`` (the
    embedded model's, fitted on the demo's word problems), ``none`` (the raw fused confidence) or a
    file of ``retryctl calibrate``. ``None``: ``shipped`` on the embedded model; on an upstream the
    raw confidence, labelled ``uncalibrated`` in every record and response."""

    @field_validator("calibration")
    @classmethod
    def _readable_calibration(cls, value: str | None, info: ValidationInfo) -> str | None:
        # Checked here, so that a bad file fails `retryctl serve` before it listens, not each request.
        try:
            choose_calibration(value, embedded=bool(info.data.get("embedded")))
        except ConfigError as exc:
            where = "" if value in ("shipped", "none") else f"{value}: "
            raise ValueError(f"{where}{exc.problem}") from None
        return value

    @field_validator("upstream")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("http://", "https://")):
            raise ValueError(f"must be an http:// or https:// URL (got {url!r})")
        return url

    @field_validator("breakers")
    @classmethod
    def _known_store(cls, where: str) -> str:
        try:  # the syntax `retryctl batch --breakers` takes too (retryctl.runtime._stores)
            return check_breakers(where)
        except ConfigError as exc:
            got = f" (got {where!r})" if exc.problem.startswith("must be") else ""
            raise ValueError(f"{exc.problem}{got}") from None

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if self.embedded == (self.upstream is not None):
            raise ValueError("choose one model source: the embedded model (--embedded) or an upstream URL")
        if self.upstream is not None and not self.upstream_model:
            raise ValueError("--upstream-model must name the model served at the upstream")
        return self

    @property
    def served_name(self) -> str:
        """The model name clients use."""
        return self.model_name or self.upstream_model or EMBEDDED_NAME

    @property
    def source(self) -> Literal["embedded", "upstream"]:
        """Where the answers come from."""
        return "embedded" if self.embedded else "upstream"

    def calibration_choice(self) -> CalibrationChoice:
        """The calibration adaptive requests apply, and its label for records and responses."""
        return choose_calibration(self.calibration, embedded=self.embedded)

    def retry_settings(self) -> RetrySettings:
        """Tenacity's settings for one upstream request."""
        return RetrySettings(attempts=self.retries + 1, initial_wait_s=self.retry_wait_s)

    def breaker(self) -> Breaker:
        """The upstream's breakers, on the store :attr:`breakers` names."""
        return Breaker(
            BreakerConfig(failure_threshold=self.breaker_failures, cooldown_s=self.breaker_cooldown_s),
            store=breaker_store(self.breakers),
        )
