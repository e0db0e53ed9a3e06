"""The embedded model decoding under ``SamplingParams.grammar``: GBNF, JSON schema and regex grammars
hold every sample (at a high temperature, where the unconstrained model wanders), and a regex is
converted to a GBNF llama.cpp parses."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest

from retryctl.models import Grammar, SamplingParams
from tests.models.conftest import needs_llama

ASK = [{"role": "user", "content": "Write a short sum of two numbers, like 3 + 4."}]
HOT: dict[str, Any] = {"temperature": 1.5, "seed": 11, "logprobs": False}


@needs_llama
class TestRegexToGbnf:
    @pytest.mark.parametrize(
        ("regex", "gbnf"),
        [
            (r"(yes|no)", 'root ::= ("ye" "s" | "n" "o")'),
            (r"\d+", "root ::= [0-9]+"),
            (r"[\d,]+", "root ::= [0-9,]+"),
            (r"[A-Z]\.", r"root ::= [A-Z] [\x2E]"),
            ('say "hi"', r'root ::= "say \"hi\""'),
            (r"^(?:ab|c)$", 'root ::= ("a" "b" | "c")'),
        ],
    )
    def test_it_writes_gbnf_llama_cpp_parses(self, embedded, regex, gbnf):
        from retryctl.models._gbnf import regex_to_gbnf

        assert regex_to_gbnf(regex) == gbnf
        # The backend's own check: llama.cpp's parser accepts it (a rejected one raises ValueError).
        embedded._load()
        embedded._compiled(Grammar(name="r", regex=regex))

    @pytest.mark.parametrize("regex", [r"a(?=b)", r"\bword", r"(a)\1", "a^b", r"[\D]", "(unclosed"])
    def test_what_gbnf_cannot_say_is_a_value_error(self, regex):
        from retryctl.models._gbnf import regex_to_gbnf

        with pytest.raises(ValueError):
            regex_to_gbnf(regex)


@needs_llama
class TestEmbeddedGrammar:
    @pytest.mark.parametrize(
        "regex", [r"\d{1,2} [+*-] \d{1,2}", r"(red|green|blue)", r"[A-Z][a-z]{2,6}\.", r"-?\d+(\.\d\d)?"]
    )
    def test_every_sample_fullmatches_the_regex(self, embedded, regex):
        grammar = Grammar(name="r", regex=regex)
        cands = embedded.sample_sync(ASK, SamplingParams(grammar=grammar, max_tokens=24, **HOT), k=4)
        assert [c.text for c in cands if not re.fullmatch(regex, c.text)] == []
        assert all(c.grammar == "r" and c.finish_reason == "stop" for c in cands)

    def test_the_unconstrained_model_does_not(self, embedded):
        # The control for the test above: without the grammar the samples are not bare sums.
        cands = embedded.sample_sync(ASK, SamplingParams(max_tokens=24, **HOT), k=4)
        assert any(not re.fullmatch(r"\d{1,2} [+*-] \d{1,2}", c.text) for c in cands)
        assert all(c.grammar is None for c in cands)

    def test_json_schema_grammar_with_a_pattern(self, embedded):
        schema = {
            "type": "object",
            "properties": {"sum": {"type": "string", "pattern": "^[0-9]+ \\+ [0-9]+$"}},
            "required": ["sum"],
        }
        grammar = Grammar(name="sum-json", json_schema=schema)
        cands = embedded.sample_sync(ASK, SamplingParams(grammar=grammar, max_tokens=40, **HOT), k=3)
        for cand in cands:
            value = json.loads(cand.text)
            assert set(value) == {"sum"} and re.fullmatch(r"[0-9]+ \+ [0-9]+", value["sum"]), cand.text
            assert cand.grammar == "sum-json"

    def test_gbnf_grammar(self, embedded):
        grammar = Grammar(name="yes-no", gbnf='root ::= "yes" | "no"')
        cands = embedded.sample_sync(ASK, SamplingParams(grammar=grammar, max_tokens=4, **HOT), k=4)
        assert {c.text for c in cands} <= {"yes", "no"} and all(c.grammar == "yes-no" for c in cands)

    def test_a_regex_gbnf_cannot_say_falls_back_with_a_note(self, embedded):
        grammar = Grammar(name="look", regex=r"a(?=b)b")
        [cand] = embedded.sample_sync(ASK, SamplingParams(grammar=grammar, max_tokens=6, **HOT))
        assert cand.grammar is None
        assert cand.notes[-1].startswith("grammar 'look' unusable (ValueError: lookarounds")


@needs_llama
class TestLogprobsUnderAGrammar:
    """Under a grammar a token's logprob stays the model's own, over the whole vocabulary: a token the
    grammar forces reads as unlikely when the model would not have written it (``_logprobs.TokenScorer``
    says why that is kept)."""

    def test_a_forced_token_the_model_would_not_write_reads_as_unlikely(self, embedded):
        grammar = Grammar(name="forced", gbnf='root ::= "zebra 42"')
        params = SamplingParams(grammar=grammar, max_tokens=8, temperature=0.7, seed=3, logprobs=True)
        (cand,) = embedded.sample_sync(ASK, params, k=1)
        assert cand.text == "zebra 42"
        assert cand.logprobs
        assert min(lp.logprob for lp in cand.logprobs) < math.log(0.05)

    def test_alternatives_are_the_models_not_the_grammars(self, embedded):
        words = ("red", "green", "blue")
        grammar = Grammar(name="colour", gbnf='root ::= "red" | "green" | "blue"')
        params = SamplingParams(
            grammar=grammar, max_tokens=4, temperature=1.0, seed=5, logprobs=True, top_logprobs=20
        )
        for cand in embedded.sample_sync(ASK, params, k=3):
            assert cand.text in words
            assert cand.logprobs
            first = cand.logprobs[0]
            # The model's own top 20 include tokens the grammar refuses here, and sum to at most one.
            assert any(not any(w.startswith(tok) for w in words) for tok, _ in first.top)
            assert sum(math.exp(lp) for _, lp in first.top) <= 1.0 + 1e-6
