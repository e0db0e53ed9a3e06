from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from retryctl.exceptions import ConfigError
from retryctl.models import normalise_messages


class TestNormaliseMessages:
    def test_dicts_pass_and_text_parts_are_joined(self):
        out = normalise_messages(
            [
                {"role": "system", "content": "s"},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            ]
        )
        assert out == [{"role": "system", "content": "s"}, {"role": "user", "content": "ab"}]

    def test_langchain_messages_become_dicts(self):
        out = normalise_messages([SystemMessage("s"), HumanMessage("q"), AIMessage("a")])
        assert [(m["role"], m["content"]) for m in out] == [
            ("system", "s"),
            ("user", "q"),
            ("assistant", "a"),
        ]

    @pytest.mark.parametrize(
        ("messages", "field"),
        [
            ([], "messages"),
            ("hello", "messages"),
            ([{"role": "robot", "content": "x"}], "messages[0].role"),
            ([{"role": "user", "content": "x"}, {"role": "user"}], "messages[1].content"),
            ([{"role": "user", "content": [{"type": "image_url"}]}], "messages[0].content"),
            ([42], "messages"),
        ],
    )
    def test_bad_messages_name_the_place(self, messages, field):
        with pytest.raises(ConfigError) as info:
            normalise_messages(messages)
        assert info.value.field == field
