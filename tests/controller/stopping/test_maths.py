"""The posterior maths against closed forms derived independently of the implementation."""

from __future__ import annotations

import math
import random

import pytest

from retryctl.controller.stopping import beta_sf_half
from retryctl.controller.stopping._maths import dirichlet_leader_prob, gamma_p, regularised_beta


def _binomial_cdf_half(n: int, k: int) -> float:
    """P(Binomial(n, 1/2) <= k), exactly."""
    return float(sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


def _arcsine_cdf(x: float) -> float:
    """CDF of Beta(1/2, 1/2): (2/π)·asin(√x)."""
    return 2 / math.pi * math.asin(math.sqrt(x))


def _beta_cdf_up(a: float, b: float, x: float, cdf: float) -> float:
    """I_x(a+1, b) from I_x(a, b): I_x(a+1,b) = I_x(a,b) - x^a (1-x)^b / (a·B(a,b))."""
    log_beta = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    return cdf - math.exp(a * math.log(x) + b * math.log(1 - x) - log_beta) / a


class TestRegularisedBeta:
    @pytest.mark.parametrize(("a", "b"), [(1, 1), (4, 1), (3, 2), (7, 2), (10, 6), (25, 20)])
    def test_integer_parameters_match_the_binomial_identity(self, a: int, b: int) -> None:
        # For integers, I_x(a, b) = P(Binomial(a+b-1, x) >= a).
        expected = 1 - _binomial_cdf_half(a + b - 1, a - 1)
        assert regularised_beta(a, b, 0.5) == pytest.approx(expected, abs=1e-12)

    @pytest.mark.parametrize("x", [0.01, 0.2, 0.5, 0.77, 0.99])
    def test_jeffreys_matches_the_arcsine_law(self, x: float) -> None:
        assert regularised_beta(0.5, 0.5, x) == pytest.approx(_arcsine_cdf(x), abs=1e-12)

    def test_half_integer_leader_from_the_recurrence(self) -> None:
        # Beta(3.5, 0.5) at 1/2, built from the arcsine law by three steps of the recurrence.
        cdf, a = _arcsine_cdf(0.5), 0.5
        for _ in range(3):
            cdf = _beta_cdf_up(a, 0.5, 0.5, cdf)
            a += 1
        assert regularised_beta(3.5, 0.5, 0.5) == pytest.approx(cdf, abs=1e-12)
        assert beta_sf_half(3.5, 0.5) == pytest.approx(1 - cdf, abs=1e-12)

    def test_symmetry_and_bounds(self) -> None:
        assert regularised_beta(2.5, 2.5, 0.5) == pytest.approx(0.5, abs=1e-12)
        assert regularised_beta(2.0, 3.0, 0.0) == 0.0
        assert regularised_beta(2.0, 3.0, 1.0) == 1.0

    def test_rejects_non_positive_parameters(self) -> None:
        with pytest.raises(ValueError, match="positive"):
            regularised_beta(0.0, 1.0, 0.5)


class TestGammaP:
    @pytest.mark.parametrize("x", [0.1, 1.0, 2.5, 8.0, 30.0])
    def test_shape_one_is_the_exponential_cdf(self, x: float) -> None:
        assert gamma_p(1.0, x) == pytest.approx(1 - math.exp(-x), abs=1e-12)

    @pytest.mark.parametrize("x", [0.05, 0.5, 2.0, 9.0])
    def test_shape_half_is_erf(self, x: float) -> None:
        assert gamma_p(0.5, x) == pytest.approx(math.erf(math.sqrt(x)), abs=1e-12)

    def test_zero_and_invalid(self) -> None:
        assert gamma_p(3.0, 0.0) == 0.0
        with pytest.raises(ValueError, match="positive"):
            gamma_p(-1.0, 1.0)


class TestDirichletLeaderProb:
    @pytest.mark.parametrize(("a", "b"), [(4, 1), (3, 2), (2.5, 0.5), (10.5, 3.5), (1, 1)])
    def test_two_outcomes_reduce_to_the_beta(self, a: float, b: float) -> None:
        assert dirichlet_leader_prob([a, b]) == pytest.approx(beta_sf_half(a, b), abs=1e-6)

    @pytest.mark.parametrize("k", [2, 3, 5, 8])
    def test_equal_parameters_give_one_in_k(self, k: int) -> None:
        assert dirichlet_leader_prob([2.0] * k) == pytest.approx(1 / k, abs=1e-6)

    def test_matches_seeded_monte_carlo(self) -> None:
        alphas = [3.0, 2.0, 1.5, 0.5]
        rng = random.Random(7)
        draws = 40_000
        wins = 0
        for _ in range(draws):
            g = [rng.gammavariate(a, 1.0) for a in alphas]
            wins += g[0] > max(g[1:])
        estimate = wins / draws
        se = math.sqrt(estimate * (1 - estimate) / draws)
        assert abs(dirichlet_leader_prob(alphas) - estimate) < 4 * se

    def test_single_outcome_is_certain_and_order_of_others_is_irrelevant(self) -> None:
        assert dirichlet_leader_prob([3.0]) == 1.0
        assert dirichlet_leader_prob([5, 1, 2, 1]) == dirichlet_leader_prob([5, 2, 1, 1])

    def test_rejects_bad_parameters(self) -> None:
        with pytest.raises(ValueError, match="empty"):
            dirichlet_leader_prob([])
        with pytest.raises(ValueError, match="positive"):
            dirichlet_leader_prob([2.0, 0.0])
        with pytest.raises(ValueError, match="leader"):
            dirichlet_leader_prob([0.2, 0.1])
