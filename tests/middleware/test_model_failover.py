"""RetryController's breaker per model: a dead primary is skipped across turns and runs until its probe,
and a chat model's own client retries are not stacked under the controller's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from langchain.agents.structured_output import ToolStrategy
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, SecretStr

from retryctl.controller import Breaker, BreakerConfig, ManualClock, Policy
from retryctl.exceptions import ConfigError
from retryctl.middleware import MODEL_BREAKER, RetryController
from retryctl.models._client_retries import client_retries, without_client_retries
from retryctl.runtime import SQLiteBreakerStore
from tests.middleware._scripted import ScriptedChat, call, say
from tests.middleware._support import Agent, ano_wait, last_ai, multiply, records
from tests.models._fault_server import FaultServer, status


class Answer(BaseModel):
    value: int


class Dead(ScriptedChat):
    """A primary whose every call fails with ``error``; counts its calls in ``seen``."""

    error: Any = None

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        raise self.error


def _controller(clock: ManualClock, waits: list[float], **kw: Any) -> RetryController:
    return RetryController(clock=clock, sleep=waits.append, asleep=ano_wait, **kw)


def _model_targets(log: Path) -> list[tuple[str, str]]:
    return [
        (r["target"], r["action"])
        for r in records(log)
        if r["kind"] == "verdict" and r["step_id"].startswith("model:")
    ]


def _turns(agent: Agent, n: int) -> list[str]:
    return [str(last_ai(agent.ask(f"question {i}")).content) for i in range(n)]


class TestModelBreaker:
    @pytest.mark.parametrize(
        ("error", "first_turn_calls"),
        [(PermissionError("401: invalid key"), 1), (TimeoutError("read timed out"), 2)],
    )
    def test_a_dead_primary_is_skipped_across_turns_until_its_probe(
        self, tmp_path: Path, mode: str, error: Exception, first_turn_calls: int
    ) -> None:
        primary = Dead(model_name="primary", script=[], error=error)
        backup = ScriptedChat(model_name="backup", script=[say(f"answer {i}") for i in range(8)])
        clock, waits = ManualClock(), list[float]()
        controller = _controller(clock, waits, fallback_models=[backup], log=tmp_path / "log.jsonl")
        agent = Agent(primary, [multiply], controller, mode)
        assert _turns(agent, 1) == ["answer 0"]
        assert len(primary.seen) == first_turn_calls
        # Two failures in a row open it (a terminal fault: one per turn, so the second turn's).
        assert _turns(agent, 4) == ["answer 1", "answer 2", "answer 3", "answer 4"]
        assert len(primary.seen) == MODEL_BREAKER.failure_threshold
        assert controller.model_breaker is not None
        assert controller.model_breaker.state("primary").value == "open"
        # Skipped turns ask for no wait; only a transient fault's one retry on the first turn did.
        assert len(waits) == (1 if mode == "sync" and first_turn_calls == 2 else 0)
        skipped = [t for t in _model_targets(tmp_path / "log.jsonl") if t == ("primary", "switch")]
        assert len(skipped) >= 3  # every turn's record says it was switched away from
        # At the probe time one call goes through; it fails, so the breaker opens again.
        clock.advance(MODEL_BREAKER.cooldown_s)
        assert _turns(agent, 2) == ["answer 5", "answer 6"]
        assert len(primary.seen) == MODEL_BREAKER.failure_threshold + 1

    def test_a_primary_that_recovers_is_used_again_after_its_probe(self, mode: str) -> None:
        primary = ScriptedChat(
            model_name="primary",
            script=[PermissionError("401"), PermissionError("401"), say("primary is back")],
        )
        backup = ScriptedChat(model_name="backup", script=[say("backup") for _ in range(4)])
        clock = ManualClock()
        agent = Agent(primary, [multiply], _controller(clock, [], fallback_models=[backup]), mode)
        assert _turns(agent, 3) == ["backup", "backup", "backup"]
        assert len(primary.seen) == 2
        clock.advance(MODEL_BREAKER.cooldown_s)
        assert _turns(agent, 1) == ["primary is back"]

    def test_a_probe_answering_unparsable_structured_output_closes_it(self, mode: str) -> None:
        # The model answered: its refine round goes to it, not to a breaker still half open.
        primary = ScriptedChat(
            model_name="primary",
            script=[
                PermissionError("401"),
                PermissionError("401"),
                call("Answer", {"value": "many"}),
                call("Answer", {"value": 42}, "c2"),
            ],
        )
        backup = ScriptedChat(
            model_name="backup", script=[call("Answer", {"value": i}, f"b{i}") for i in range(2)]
        )
        clock = ManualClock()
        strategy = ToolStrategy(Answer, handle_errors=False)
        controller = _controller(clock, [], fallback_models=[backup])
        agent = Agent(primary, [multiply], controller, mode, response_format=strategy)
        assert [agent.ask(f"q{i}")["structured_response"] for i in range(2)] == [
            Answer(value=0),
            Answer(value=1),
        ]
        clock.advance(MODEL_BREAKER.cooldown_s)
        assert agent.ask("q2")["structured_response"] == Answer(value=42)
        assert controller.model_breaker is not None
        assert controller.model_breaker.state("primary").value == "closed"

    def test_the_breaker_is_remembered_across_runs_and_processes_in_its_store(
        self, tmp_path: Path, mode: str
    ) -> None:
        clock = ManualClock(1000.0)

        def shared() -> Breaker:  # what each process builds on the same file
            return Breaker(MODEL_BREAKER, store=SQLiteBreakerStore(tmp_path / "breakers.db"), clock=clock)

        primary = Dead(model_name="primary", script=[], error=PermissionError("401"))
        backup = ScriptedChat(model_name="backup", script=[say("ok") for _ in range(4)])
        first = Agent(
            primary,
            [multiply],
            _controller(clock, [], fallback_models=[backup], model_breaker=shared()),
            mode,
        )
        _turns(first, 2)
        assert len(primary.seen) == 2
        # A new middleware (another process, a restarted server) on the same store skips it at once.
        second = Agent(
            primary,
            [multiply],
            _controller(clock, [], fallback_models=[backup], model_breaker=shared()),
            mode,
        )
        assert _turns(second, 1) == ["ok"]
        assert len(primary.seen) == 2

    def test_a_lone_model_is_not_refused_by_the_default_breaker(self, mode: str) -> None:
        # Nothing to route to: each turn retries as the policy says, as it did without a breaker.
        model = ScriptedChat(
            model_name="only",
            script=[TimeoutError("t"), TimeoutError("t"), say("one"), TimeoutError("t"), say("two")],
        )
        agent = Agent(model, [multiply], _controller(ManualClock(), []), mode)
        assert _turns(agent, 2) == ["one", "two"]

    def test_a_given_breaker_guards_even_a_lone_model(self, mode: str) -> None:
        model = Dead(model_name="only", script=[], error=PermissionError("401"))
        breaker = Breaker(BreakerConfig(failure_threshold=1, cooldown_s=60.0), clock=ManualClock())
        agent = Agent(model, [multiply], _controller(ManualClock(), [], model_breaker=breaker), mode)
        first, second = _turns(agent, 2)
        assert "retryctl stopped the agent" in first and "breaker" in second
        assert len(model.seen) == 1

    def test_none_turns_it_off(self, mode: str) -> None:
        primary = Dead(model_name="primary", script=[], error=PermissionError("401"))
        backup = ScriptedChat(model_name="backup", script=[say("ok") for _ in range(4)])
        agent = Agent(
            primary,
            [multiply],
            _controller(ManualClock(), [], fallback_models=[backup], model_breaker=None),
            mode,
        )
        _turns(agent, 4)
        assert len(primary.seen) == 4  # called first on every turn, as ModelFallbackMiddleware does

    def test_a_wrong_kind_is_refused_naming_the_argument(self) -> None:
        with pytest.raises(ConfigError, match="model_breaker"):
            RetryController(model_breaker={"failure_threshold": 2})  # type: ignore[arg-type]


@pytest.fixture
def unavailable() -> Iterator[FaultServer]:
    """A server on 127.0.0.1 that answers every request 503 (``requests`` counts them)."""
    server = FaultServer(default=status(503)).start()
    yield server
    server.stop()


@pytest.fixture
def faults() -> Iterator[FaultServer]:
    server = FaultServer().start()
    yield server
    server.stop()


def _openai(url: str, **settings: Any) -> ChatOpenAI:
    return ChatOpenAI(model="m", base_url=url, api_key=SecretStr("k"), timeout=5, **settings)


class TestClientRetries:
    def test_chat_openai_retries_are_not_stacked_under_the_controller(
        self, tmp_path: Path, mode: str, unavailable: FaultServer
    ) -> None:
        model = ChatOpenAI(
            model="m", base_url=unavailable.url, api_key=SecretStr("k"), max_retries=2, timeout=5
        )
        policy = Policy(weights={"validators": 1.0}, max_retries=2)
        controller = RetryController(
            model_policy=policy, log=tmp_path / "log.jsonl", sleep=lambda s: None, asleep=ano_wait
        )
        out = Agent(model, [multiply], controller, mode).ask("hi")
        assert "retryctl stopped the agent" in str(last_ai(out).content)
        tries = _model_targets(tmp_path / "log.jsonl")
        assert [a for _, a in tries] == ["retry", "retry", "stop"]
        # One HTTP request per try the controller made, charged and logged: not 3 each.
        assert len(unavailable.requests) == len(tries) == 3
        # The user's model is left as it was.
        assert model.max_retries == 2 and model.root_client.max_retries == 2

    def test_the_quiet_copy_still_answers(self, mode: str, faults: FaultServer) -> None:
        faults.script.extend([status(503)])  # then an answer
        model = ChatOpenAI(
            model="m", base_url=faults.url, api_key=SecretStr("k"), timeout=5
        )  # the SDK's 2 retries
        controller = RetryController(sleep=lambda s: None, asleep=ano_wait)
        out = Agent(model, [multiply], controller, mode).ask("hi")
        assert last_ai(out).content == "42-0"
        assert len(faults.requests) == 2  # the 503, then the controller's retry

    def test_without_client_retries(self) -> None:
        default = ChatOpenAI(model="m", base_url="http://127.0.0.1:9/v1", api_key=SecretStr("k"))
        assert client_retries(default) == 2  # the openai client's own default
        quiet = cast("ChatOpenAI", without_client_retries(default))
        assert quiet is not default and client_retries(quiet) == 0
        assert quiet.client is quiet.root_client.chat.completions
        assert quiet.async_client is quiet.root_async_client.chat.completions
        assert client_retries(default) == 2
        none = ChatOpenAI(model="m", base_url="http://127.0.0.1:9/v1", api_key=SecretStr("k"), max_retries=0)
        assert without_client_retries(none) is none
        scripted = ScriptedChat(script=[])
        assert without_client_retries(scripted) is scripted
