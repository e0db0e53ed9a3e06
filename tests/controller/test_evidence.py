"""Which candidates are votes: a repeat of a near-greedy or same-seed decoding is not new evidence."""

from __future__ import annotations

from retryctl.controller import NEAR_GREEDY, Repeats, cross_member


class TestRepeats:
    def test_near_greedy_copies_of_one_text_are_one_vote(self) -> None:
        seen = Repeats()
        flags = [seen.check("7 * 8 - 5", seed=s, temperature=0.2) for s in (1, 2, 3)]
        assert flags == [False, True, True]
        assert seen.check("7 * 8 + 5", seed=4, temperature=0.2) is False  # another text is evidence

    def test_the_same_seed_repeats_at_any_temperature(self) -> None:
        seen = Repeats()
        assert seen.check("51", seed=9, temperature=1.0) is False
        assert seen.check("51", seed=9, temperature=1.0) is True
        assert seen.check("51", seed=10, temperature=1.0) is False  # another seed could have differed

    def test_equal_texts_sampled_hot_stay_separate_votes(self) -> None:
        seen = Repeats()
        assert [seen.check("51", seed=None, temperature=0.7) for _ in range(3)] == [False] * 3

    def test_the_bound_is_inclusive_and_an_unknown_temperature_is_not_greedy(self) -> None:
        seen = Repeats()
        seen.check("x", seed=None, temperature=NEAR_GREEDY)
        assert seen.check("x", seed=None, temperature=NEAR_GREEDY) is True
        other = Repeats()
        other.check("x", seed=None, temperature=None)
        assert other.check("x", seed=None, temperature=None) is False


class TestCrossMember:
    def test_another_members_votes_for_the_answer(self) -> None:
        signal = cross_member("51", {"model": {"51": 2, "10": 3}, "python": {"48": 1}})
        assert signal.available and signal.value == 0.4
        assert "model gave it 40%" in signal.note

    def test_unavailable_before_another_member_answered(self) -> None:
        assert not cross_member("51", {}).available
        assert not cross_member("51", {"model": {}}).available

    def test_no_answer_agrees_with_nothing(self) -> None:
        assert cross_member(None, {"model": {"51": 3}}).value == 0.0
