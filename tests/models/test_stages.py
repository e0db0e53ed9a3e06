"""Stages: what a Stage accepts, what a schedule and its draws carry, and backends that cannot stage."""

from __future__ import annotations

import asyncio
import math

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from retryctl._answers import default_equivalence
from retryctl.exceptions import ConfigError
from retryctl.models import LangChainBackend, SamplingParams, Stage
from retryctl.models._stages import StageOutcome, answer_text, check_stages, staged_input_bound
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

    @pytest.mark.parametrize("name", ["a:b", "a,b", " think", "think "])
    def test_a_name_the_stage_option_cannot_write_is_refused(self, name):
        with pytest.raises(ConfigError) as err:
            check_stages([{"name": name, "max_tokens": 4}])
        assert err.value.field == "stages[0].name" and "--stage NAME" in err.value.problem
        with pytest.raises(ConfigError) as err:
            Stage(name=name, max_tokens=4)
        assert err.value.field == f"stages[{name!r}].name"

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


class TestAnswerText:
    """A staged sample's answer is read from its last stage alone, with no delimiter in it."""

    @staticmethod
    def _outcomes(think: str, answer: str) -> tuple[StageOutcome, ...]:
        return (StageOutcome("think", think, 5, "stop"), StageOutcome("answer", answer, 3, "stop"))

    def test_the_last_stage_without_its_start_and_closing_end(self):
        answer = Stage(name="answer", max_tokens=8, start="\nAnswer:", end=(".",))
        outcomes = self._outcomes("<think>\nThe answer is 12.</think>", "\nAnswer: 12.5.")
        assert answer_text(outcomes, (THINK, answer)) == " 12.5"  # one-character end: at the edge only

    def test_a_delimiter_the_model_wrote_again_never_reaches_the_answer(self):
        answer = Stage(name="answer", max_tokens=8, start="\nAnswer:")
        outcomes = self._outcomes("<think>\n12 + 7</think>", "\nAnswer: 19</think> Answer: 19")
        text = answer_text(outcomes, (THINK, answer))
        assert text is not None and "</think>" not in text and "Answer:" not in text
        assert default_equivalence(text) == "19"

    def test_no_last_stage_no_answer(self):
        cut = (StageOutcome("think", "<think>\nThe answer is 12", 5, "cut"),)
        assert answer_text(cut, (THINK, ANSWER)) is None
        assert answer_text(self._outcomes("<think>\nThe answer is 12.</think>", ""), (THINK, ANSWER)) == ""


class TestScheduleTemperaturesAndStages:
    def test_a_disagreement_temperature_no_stage_takes_is_refused(self):
        hot = Stage(name="answer", temperature=1.0, max_tokens=8)
        with pytest.raises(ConfigError) as err:
            SamplingSchedule(stages=(THINK, hot), disagreement_temperature=1.2)
        assert err.value.field == "disagreement_temperature"
        assert "think=0, answer=1" in err.value.problem
        with pytest.raises(ConfigError) as err:
            SamplingSchedule(stages=(THINK, hot), temperatures=(0.2, 0.9))
        assert err.value.field == "temperatures"

    def test_it_reaches_the_stages_that_leave_theirs_unset(self):
        schedule = SamplingSchedule(stages=(THINK, ANSWER), disagreement_temperature=1.2)
        params = schedule.params(attempt=1, drawn=2, disagreed=True)
        assert params.temperature == 1.2 and params.stages[0].temperature == 0.0
        assert params.stages[1].temperature is None  # the answer stage draws at the draw's 1.2

    def test_repeats_are_judged_at_the_stages_temperatures(self):
        from retryctl.nodes._sampling import drawn_temperature

        greedy = Stage(name="answer", temperature=0.0, max_tokens=8)
        assert drawn_temperature(SamplingParams(temperature=0.9, stages=(THINK, greedy))) == 0.0
        assert drawn_temperature(SamplingParams(temperature=0.9, stages=(THINK, ANSWER))) == 0.9
        assert drawn_temperature(SamplingParams(temperature=0.4)) == 0.4
