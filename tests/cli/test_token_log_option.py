"""``--token-log`` and ``--token-log-max`` on ``demo``, ``batch`` and ``serve``: applied on top of each
command's own policy, bad values refused naming the option."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

import retryctl.agent
from retryctl.agent import demo_policy
from retryctl.cli import app
from retryctl.cli._batch import _demo_agent_policy
from retryctl.cli._token_log_option import Keep
from retryctl.controller import TokenLog
from retryctl.evals._choice import choose_calibration
from retryctl.gateway import GatewayConfig
from retryctl.gateway._request import ChatRequest
from tests.gateway._support import serving
from tests.models.conftest import needs_llama

runner = CliRunner()


class _Built(Exception):
    """Stops the demo once its graph's policy is seen (no model is run)."""


class TestDemo:
    def _policy(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *options: str) -> Any:
        seen: dict[str, Any] = {}

        def build(**kwargs: Any) -> None:
            seen.update(kwargs)
            raise _Built

        monkeypatch.setattr(retryctl.agent, "build_demo_graph", build)
        server = ["--base-url", "http://127.0.0.1:9/v1", "--model-name", "m"]
        runner.invoke(app, ["demo", "2+2?", *server, "--log", str(tmp_path / "d.jsonl"), *options])
        return seen["policy"]

    def test_the_option_changes_only_the_token_log_of_the_demos_policy(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        policy = self._policy(monkeypatch, tmp_path, "--token-log", "accepted", "--token-log-max", "8")
        assert policy.token_log == TokenLog(keep="accepted", max_tokens=8)
        assert policy.model_copy(update={"token_log": TokenLog()}) == demo_policy(None)

    def test_without_the_option_the_graph_keeps_its_own_policy(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        assert self._policy(monkeypatch, tmp_path) is None

    @pytest.mark.parametrize("command", ["demo", "batch", "serve"])
    def test_a_bad_value_names_the_option(self, command: str) -> None:
        result = runner.invoke(app, [command, "--token-log", "none"])
        assert result.exit_code == 2
        assert "--token-log" in result.output and "'off'" in result.output


class TestBatch:
    def test_the_demo_agents_policy_keeps_its_samples(self) -> None:
        choice = choose_calibration(None, embedded=True)
        policy = _demo_agent_policy(choice, Keep.off, None)
        assert policy is not None and policy.token_log == TokenLog(keep="off")
        assert (policy.min_samples, policy.max_samples) == (3, 5)
        assert policy.calibration == demo_policy().calibration

    def test_a_graph_of_ones_own_is_told_to_set_it_itself(self, tmp_path: Path) -> None:
        tasks = tmp_path / "t.jsonl"
        tasks.write_text('{"id": "a", "question": "q"}\n')
        own = ["--graph", "tests.batch._graphs:build", "--token-log", "off"]
        result = runner.invoke(app, ["batch", str(tasks), "--out", str(tmp_path / "o.jsonl"), *own])
        assert result.exit_code == 2
        assert "--token-log" in result.output and "Policy(token_log=" in result.output


class TestServe:
    def test_the_configs_token_log_reaches_adaptive_requests_policy(self) -> None:
        config = GatewayConfig(embedded=True, token_log=TokenLog(keep="accepted"))
        chat = ChatRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert chat.options.controller_policy(None, config.token_log).token_log.keep == "accepted"
        assert chat.options.controller_policy().token_log == TokenLog()


@needs_llama
def test_serve_writes_the_token_log_it_is_given(tmp_path: Path) -> None:
    """``serve --token-log-max 3``, end to end: an adaptive request's records keep 3 tokens a candidate."""
    log = tmp_path / "decisions.jsonl"
    with serving("--embedded", "--calibration", "none", "--token-log-max", "3", log=log) as (url, _):
        body = {
            "model": "smollm2",
            "messages": [{"role": "user", "content": "What is 2 + 3? Answer with the number only."}],
            "max_tokens": 6,
            "seed": 3,
            "adaptive": True,
            "retryctl": {"max_samples": 3},
        }
        assert httpx.post(url + "/chat/completions", json=body, timeout=300).status_code == 200
    records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line]
    items = [i for r in records for i in (r.get("extra") or {}).get("token_samples", [])]
    assert items and all(len(i["token_text"]) <= 3 for i in items)
    assert any(i["tokens_total"] > 3 for i in items)  # cut to the option's 3, not short by themselves
