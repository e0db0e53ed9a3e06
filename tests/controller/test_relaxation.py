"""``Relaxation``: the policy's schedule from strict to lenient, and its place on ``Policy``."""

from __future__ import annotations

import pydantic
import pytest

from retryctl.controller import Policy, Relaxation
from retryctl.exceptions import ConfigError


class TestRelaxation:
    def test_the_default_schedule_steps_down_to_its_floor(self) -> None:
        schedule = Relaxation()
        steps = [schedule.strictness(n) for n in range(8)]
        assert steps == pytest.approx([1.0, 0.8, 0.64, 0.512, 0.4096, 0.32768, 0.3, 0.3])
        assert [schedule.at_floor(n) for n in range(8)] == [False] * 6 + [True] * 2

    def test_the_floor_holds_however_many_failures(self) -> None:
        assert Relaxation().strictness(10_000) == 0.3
        assert Relaxation(factor=0.5, floor=0.5).strictness(1) == 0.5

    def test_a_schedule_that_starts_at_its_floor_never_moves(self) -> None:
        schedule = Relaxation(start=0.6, floor=0.6)
        assert schedule.strictness(0) == schedule.strictness(3) == 0.6
        assert schedule.at_floor(0)

    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"start": 0.0}, "relaxation.start"),
            ({"start": 1.5}, "relaxation.start"),
            ({"factor": 1.0}, "relaxation.factor"),
            ({"factor": 0.0}, "relaxation.factor"),
            ({"floor": 0.0}, "relaxation.floor"),
            ({"start": 0.5, "floor": 0.6}, "relaxation.floor"),
            ({"factor": float("nan")}, "relaxation.factor"),
            ({"floor": True}, "relaxation.floor"),
        ],
    )
    def test_bad_values_name_their_field(self, kwargs: dict[str, float], field: str) -> None:
        with pytest.raises(ConfigError) as info:
            Relaxation(**kwargs)
        assert info.value.field == field

    @pytest.mark.parametrize("failures", [-1, 1.5, True])
    def test_a_failure_count_is_a_whole_number(self, failures: object) -> None:
        with pytest.raises(ConfigError) as info:
            Relaxation().strictness(failures)  # type: ignore[arg-type]
        assert info.value.field == "failures"


class TestPolicyRelaxation:
    def test_a_policy_relaxes_by_default_and_none_turns_it_off(self) -> None:
        assert Policy().relaxation == Relaxation()
        assert Policy(relaxation=None).relaxation is None

    def test_a_dict_is_read_and_a_bad_one_refused_naming_the_field(self) -> None:
        assert Policy(relaxation={"factor": 0.5}).relaxation == Relaxation(factor=0.5)  # type: ignore[arg-type]
        with pytest.raises(pydantic.ValidationError) as info:
            Policy(relaxation={"floor": 2.0})  # type: ignore[arg-type]
        [error] = info.value.errors()
        assert error["loc"] == ("relaxation",) and "relaxation.floor" in error["msg"]

    def test_json_writes_the_schedule(self) -> None:
        dumped = Policy().model_dump(mode="json")["relaxation"]
        assert dumped == {"start": 1.0, "factor": 0.8, "floor": 0.3}
        assert Policy(relaxation=None).model_dump(mode="json")["relaxation"] is None
