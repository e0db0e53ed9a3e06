"""ConstrainedBackend: a member decoding under the rung of its grammar ladder that its strictness allows."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from retryctl.exceptions import ConfigError
from retryctl.models import (
    BackendTimeout,
    Candidate,
    ConstrainedBackend,
    Grammar,
    SamplingParams,
    sample_blocking,
)
from retryctl.models._messages import Message
from retryctl.testing import ScriptedBackend
from tests.models.conftest import needs_llama

NARROW = Grammar(name="permutations", gbnf='root ::= "3 + 4" | "4 + 3"', strictness=1.0)
MIDDLE = Grammar(name="numbers", gbnf='root ::= [0-9]+ (" + " [0-9]+)?', strictness=0.6)
WIDE = Grammar(name="digits", regex=r"[0-9 +*/-]+", strictness=0.3, description="digits and operators")
LADDER = [NARROW, MIDDLE, WIDE]
Q = [{"role": "user", "content": "What is 3 + 4?"}]


def honouring(messages: list[Message], params: SamplingParams) -> Candidate:
    """A scripted candidate that says it was decoded under the grammar it was given."""
    name = params.grammar.name if params.grammar is not None else None
    return Candidate(text=f"under {name}", model="scripted", grammar=name)


class TestRungs:
    @pytest.mark.parametrize(
        ("strictness", "rung"),
        [(1.0, "permutations"), (0.8, "numbers"), (0.6, "numbers"), (0.5, "digits"), (0.3, "digits"),
         (0.2, None)],
    )  # fmt: skip
    def test_each_call_decodes_under_the_narrowest_rung_allowed(
        self, strictness: float, rung: str | None
    ) -> None:
        inner = ScriptedBackend([honouring], cycle=True)
        member = ConstrainedBackend(inner, LADDER)
        [cand] = member.sample_sync(Q, SamplingParams(strictness=strictness, temperature=0.3))
        sent = inner.calls[-1].params
        assert (sent.grammar.name if sent.grammar else None) == rung
        assert (sent.strictness, sent.temperature) == (strictness, 0.3)  # the rest goes through as given
        assert cand.grammar == rung
        assert member.grammar_at(Q, strictness) == (sent.grammar)

    def test_async_calls_pick_the_same_rung(self) -> None:
        inner = ScriptedBackend([honouring], cycle=True)
        member = ConstrainedBackend(inner, LADDER)
        cands = asyncio.run(member.sample(Q, SamplingParams(strictness=0.64), k=2))
        assert [c.grammar for c in cands] == ["numbers", "numbers"]
        assert inner.calls[-1].k == 2

    def test_no_params_means_the_strictest_rung(self) -> None:
        inner = ScriptedBackend([honouring])
        [cand] = ConstrainedBackend(inner, LADDER).sample_sync(Q)
        assert cand.grammar == "permutations"

    def test_a_ladder_can_be_a_function_of_the_conversation(self) -> None:
        seen: list[list[Message]] = []

        def ladder(messages: list[Message]) -> list[Grammar]:
            seen.append(messages)
            numbers = [w for w in str(messages[-1]["content"]).split() if w.isdigit()]
            alternatives = " | ".join(f'"{n}"' for n in numbers)
            return [Grammar(name="own-numbers", gbnf=f"root ::= {alternatives}", strictness=0.9)]

        inner = ScriptedBackend([honouring], cycle=True)
        member = ConstrainedBackend(inner, ladder)
        member.sample_sync([HumanMessage("What is 3 + 4 ?")], SamplingParams(strictness=0.8))
        assert inner.calls[-1].params.grammar is None  # its one rung is used down to 0.9 only
        member.sample_sync([HumanMessage("What is 3 + 4 ?")], SamplingParams(strictness=0.9))
        grammar = inner.calls[-1].params.grammar
        assert grammar is not None and grammar.gbnf == 'root ::= "3" | "4"'
        assert seen[-1] == [{"role": "user", "content": "What is 3 + 4 ?"}]  # normalised

    def test_a_model_that_ignores_grammars_says_so_in_its_notes(self) -> None:
        member = ConstrainedBackend(ScriptedBackend(["7", honouring]), LADDER)
        plain, honoured = member.sample_sync(Q, k=2)
        assert plain.grammar is None
        assert plain.notes == (
            "scripted did not decode under grammar 'permutations'; checked after decoding only",
        )
        assert honoured.grammar == "permutations" and honoured.notes == ()

    def test_no_rung_no_note(self) -> None:
        [cand] = ConstrainedBackend(ScriptedBackend(["7"]), LADDER).sample_sync(
            Q, SamplingParams(strictness=0.1)
        )
        assert cand.notes == ()


class TestWrapping:
    def test_it_keeps_the_models_name_and_output_limit(self) -> None:
        inner = ScriptedBackend(["7"], model="calculator")
        member = ConstrainedBackend(inner, LADDER)
        assert member.name == "calculator"
        assert member.output_limit(SamplingParams(max_tokens=9)) == 9

    def test_a_sync_call_is_bounded_by_the_timeout(self) -> None:
        class Hanging:
            name = "hanging"

            async def sample(self, messages: Any, params: Any = None, *, k: int = 1) -> list[Candidate]:
                await asyncio.Event().wait()  # never answers
                return []

        member = ConstrainedBackend(Hanging(), LADDER)
        with pytest.raises(BackendTimeout):
            sample_blocking(member, Q, SamplingParams(), timeout_s=0.05)

    @pytest.mark.parametrize(
        ("grammars", "field"),
        [
            ([], "grammars"),
            (NARROW, "grammars"),
            ([NARROW, "numbers"], "grammars[1]"),
            ([NARROW, NARROW], "grammars"),
            ([WIDE, NARROW], "grammars[1].strictness"),
        ],
    )
    def test_a_bad_ladder_is_refused_naming_the_field(self, grammars: Any, field: str) -> None:
        with pytest.raises(ConfigError) as info:
            ConstrainedBackend(ScriptedBackend(["7"]), grammars)
        assert info.value.field == field

    def test_a_ladder_function_returning_a_bad_ladder_fails_the_call(self) -> None:
        member = ConstrainedBackend(ScriptedBackend(["7"]), lambda messages: [WIDE, NARROW])
        with pytest.raises(ConfigError) as info:
            member.sample_sync(Q)
        assert info.value.field == "grammars[1].strictness"

    def test_an_empty_ladder_from_a_function_decodes_unconstrained(self) -> None:
        inner = ScriptedBackend(["7"])
        ConstrainedBackend(inner, lambda messages: []).sample_sync(Q)
        assert inner.calls[-1].params.grammar is None

    def test_the_model_must_be_a_backend(self) -> None:
        with pytest.raises(ConfigError) as info:
            ConstrainedBackend("smollm2", LADDER)  # type: ignore[arg-type]
        assert info.value.field == "model"


@needs_llama
class TestEmbeddedLadder:
    def test_the_embedded_model_decodes_under_each_rung(self, embedded: Any) -> None:
        narrow = Grammar(name="yes-no", gbnf='root ::= "yes" | "no"', strictness=1.0)
        wide = Grammar(name="digits", gbnf="root ::= [0-9] [0-9]?", strictness=0.5)
        member = ConstrainedBackend(embedded, [narrow, wide])
        strict = member.sample_sync(Q, SamplingParams(temperature=0.7, seed=1, max_tokens=8, strictness=1.0))
        loose = member.sample_sync(Q, SamplingParams(temperature=0.7, seed=1, max_tokens=8, strictness=0.5))
        assert strict[0].grammar == "yes-no" and strict[0].text in {"yes", "no"}
        assert loose[0].grammar == "digits" and loose[0].text.isdigit() and len(loose[0].text) <= 2
