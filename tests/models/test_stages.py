"""Stages: what a Stage accepts, what a schedule and its draws carry, and backends that cannot stage."""

from __future__ import annotations

import asyncio
import math

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from retryctl.exceptions import ConfigError
from retryctl.models import LangChainBackend, SamplingParams, Stage
from retryctl.models._stages import check_stages, staged_input_bound
from retryctl.nodes import SamplingSchedule

THINK = Stage(name="think", temperature=0.0, max_tokens=64, start="<think>\n", end=("</think>",))
ANSWER = Stage(name="answer", max_tokens=16)


class TestStageValidation:
    @pytest.mark.parametrize(
        ("knob", "value"),
        [
            ("temperature", 5.5),
            ("temperature", math.nan),
            ("top_p", 0.0),
            ("top_p", 1.5),
            ("top_k", 0),
            ("min_p", -0.1),
            ("max_tokens", 0),
            ("max_tokens", True),
        ],
    )
    def test_a_bad_knob_names_the_stage_and_the_knob(self, knob, value):
        with pytest.raises(ConfigError) as err:
            Stage(**{"name": "think", "max_tokens": 8, knob: value})
        assert err.value.field == f"stages['think'].{knob}"

    def test_a_stage_given_as_a_dict_is_named_by_its_place(self):
        with pytest.raises(ConfigError) as err:
            bad = [{"name": "a", "max_tokens": 4}, {"name": "b", "max_tokens": 4, "temperature": 9}]
            SamplingSchedule(stages=bad)  # type: ignore[arg-type]  # dicts are taken at run time
        assert err.value.field == "stages[1].temperature"
        with pytest.raises(ConfigError) as err:
            check_stages([{"name": "a", "max_tokens": 4, "colour": "red"}])
        assert err.value.field == "stages[0]" and "colour" in err.value.problem

    def test_names_are_unique_and_not_blank(self):
        with pytest.raises(ConfigError) as err:
            SamplingParams(stages=(THINK, Stage(name="think", max_tokens=3)))
        assert err.value.field == "stages[1].name"
        with pytest.raises(ConfigError) as err:
            Stage(name=" ", max_tokens=3)
        assert err.value.field.endswith(".name")

    def test_end_strings_are_non_empty_and_a_lone_string_is_one_end(self):
        with pytest.raises(ConfigError) as err:
            Stage(name="t", max_tokens=3, end=("",))
        assert err.value.field == "stages['t'].end"
        assert Stage(name="t", max_tokens=3, end="</t>").end == ("</t>",)  # type: ignore[arg-type]

    def test_stages_must_be_a_sequence_of_stages(self):
        with pytest.raises(ConfigError) as err:
            SamplingParams(stages=THINK)  # type: ignore[arg-type]
        assert err.value.field == "stages"
        with pytest.raises(ConfigError):
            SamplingParams(stages=("think",))  # type: ignore[arg-type]


class TestScheduleAndParams:
    def test_a_draw_reserves_the_stages_caps_summed(self):
        assert SamplingParams(max_tokens=7).token_cap == 7
        assert SamplingParams(max_tokens=7, stages=(THINK, ANSWER)).token_cap == 80

    def test_the_schedule_hands_its_stages_to_every_draw(self):
        schedule = SamplingSchedule(temperatures=(0.2, 0.9), seed=3, stages=[THINK, ANSWER])  # type: ignore[arg-type]
        assert schedule.stages == (THINK, ANSWER)  # a list is frozen into a tuple
        first = schedule.params(attempt=1, drawn=0, disagreed=False)
        second = schedule.params(attempt=2, drawn=0, disagreed=False)
        assert first.stages == second.stages == (THINK, ANSWER)
        # The draw's temperature is what a stage with temperature None takes.
        assert (first.temperature, second.temperature) == (0.2, 0.9)
        assert SamplingSchedule().params(attempt=1, drawn=0, disagreed=False).stages == ()


class TestInputBound:
    def test_each_stage_reads_the_prompt_and_all_before_it(self):
        def one_per_char(text: str) -> int:
            return len(text)

        # think: prompt + "<think>\n" (8); answer: prompt + 8 + 64 + "</think>" (8) + "\nAnswer:" (8).
        bound = staged_input_bound(
            100, (THINK, Stage(name="answer", max_tokens=16, start="\nAnswer:")), one_per_char
        )
        assert bound == (100 + 8) + (100 + 8 + 64 + 8 + 8)
        assert staged_input_bound(100, (ANSWER,), one_per_char) == 100


class TestBackendsThatCannotStage:
    def test_langchain_refuses_stages_naming_why(self):
        backend = LangChainBackend(FakeListChatModel(responses=["x"]))
        params = SamplingParams(stages=(THINK, ANSWER))
        with pytest.raises(ConfigError) as err:
            asyncio.run(backend.sample([{"role": "user", "content": "hi"}], params))
        assert err.value.field == "stages" and "continue a partial answer" in err.value.problem
        with pytest.raises(ConfigError):
            backend.output_limit(params)  # refused before a draw reserves anything
        assert backend.output_limit(SamplingParams(max_tokens=9)) == 9
