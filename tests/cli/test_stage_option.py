"""``--stage NAME:key=value,...``: what it reads, and the one ``error:`` line it exits 2 with otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from retryctl.cli import app
from retryctl.cli._stage_option import parse_stage, parse_stages
from retryctl.exceptions import ConfigError
from retryctl.models import Stage

runner = CliRunner()


class TestParseStage:
    def test_every_key_is_read(self) -> None:
        spec = "think:temperature=0.3,top_p=0.9,top_k=40,min_p=0.05,max_tokens=160,start=<think>,end=</think>"
        assert parse_stage(spec, max_tokens=256) == Stage(
            name="think",
            temperature=0.3,
            top_p=0.9,
            top_k=40,
            min_p=0.05,
            max_tokens=160,
            start="<think>",
            end=("</think>",),
        )

    def test_a_bare_name_takes_the_commands_cap_and_the_draws_knobs(self) -> None:
        assert parse_stage("answer", max_tokens=48) == Stage(name="answer", max_tokens=48)

    def test_escapes_and_several_end_strings(self) -> None:
        stage = parse_stage(
            r"think:start=<think>\n,end=</think>,end=The answer is\, then,end=a\\b", max_tokens=9
        )
        assert stage.start == "<think>\n" and stage.end == ("</think>", "The answer is, then", "a\\b")

    def test_stages_keep_their_order(self) -> None:
        stages = parse_stages(["think:max_tokens=100", "answer:max_tokens=10"], max_tokens=5)
        assert [(s.name, s.max_tokens) for s in stages] == [("think", 100), ("answer", 10)]
        assert parse_stages(None, max_tokens=5) == ()

    @pytest.mark.parametrize(
        ("specs", "named"),
        [
            (["think:temprature=0.3"], "unknown key 'temprature'"),
            (["think:temperature=hot"], "temperature='hot' is not a number"),
            (["think:top_k=4.5"], "top_k='4.5' is not a whole number"),
            (["think:top_p=1.5"], "top_p=1.5 must be in (0, 1]"),
            (["think:min_p=-0.1"], "min_p=-0.1 must be in [0, 1]"),
            (["think:max_tokens=0"], "max_tokens=0"),
            (["think:end="], "end= needs a string"),
            (["think:temperature"], "'temperature' is not key=value"),
            (["think:temperature=0.3,temperature=0.4"], "key 'temperature' given twice"),
            ([":temperature=0.3"], "give the stage's name first"),
            ([r"think:start=\q"], "unknown escape '\\q'"),
            (["think", "think:max_tokens=9"], "a second stage named 'think'"),
        ],
    )
    def test_a_bad_spec_names_the_key(self, specs: list[str], named: str) -> None:
        with pytest.raises(ConfigError) as caught:
            parse_stages(specs, max_tokens=5)
        assert caught.value.field == "--stage" and named in caught.value.problem


def _tasks(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"id": "a", "question": "What is 2 + 3?", "gold": 5}) + "\n", encoding="utf-8")
    return path


class TestOnTheCommandLine:
    @pytest.mark.parametrize("command", ["record", "sweep"])
    def test_a_bad_key_exits_2_with_one_line_naming_the_option_and_the_key(
        self, tmp_path: Path, command: str
    ) -> None:
        out = tmp_path / ("bank.jsonl" if command == "record" else "sweep")
        args = [command, str(_tasks(tmp_path)), "--out", str(out), "--stage", "think:top_q=0.9"]
        done = runner.invoke(app, args)
        assert done.exit_code == 2
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: --stage 'think:top_q=0.9'")
        assert "unknown key 'top_q'" in lines[0] and not out.exists()

    def test_sweep_stage_must_name_a_stage(self, tmp_path: Path) -> None:
        out = tmp_path / "sweep"
        args = [
            "sweep",
            str(_tasks(tmp_path)),
            "--out",
            str(out),
            "--stage",
            "think",
            "--sweep-stage",
            "answer",
        ]
        done = runner.invoke(app, args)
        assert done.exit_code == 2 and not out.exists()
        assert done.stderr.strip() == "error: --sweep-stage 'answer': no --stage of that name (stages: think)"


SERVER = ["--base-url", "http://127.0.0.1:9/v1", "--model-name", "m"]  # port 9: nothing answers


class TestStageModeOnTheCommandLine:
    @pytest.mark.parametrize("command", ["record", "sweep"])
    @pytest.mark.parametrize(
        ("extra", "named"),
        [
            ([], "--stage with --base-url needs --stage-mode: 'continue'"),
            (["--stage-mode", "prefill"], "--stage-mode 'prefill': must be one of continue, completions"),
            (["--stage-mode", "completions"], "--stage-mode completions needs --chat-template-gguf"),
            (["--stage-mode", "continue", "--chat-template-gguf", "x.gguf"], "--chat-template-gguf: only"),
            (["--stage-mode", "completions", "--chat-template-gguf", "no.gguf"], "no.gguf: no such file"),
        ],
    )
    def test_a_server_stage_without_its_mode_is_one_line_and_no_file(
        self, tmp_path: Path, command: str, extra: list[str], named: str
    ) -> None:
        out = tmp_path / ("bank.jsonl" if command == "record" else "sweep")
        stages = ["--stage", "think:max_tokens=8", "--stage", "answer:max_tokens=4"]
        args = [command, str(_tasks(tmp_path)), "--out", str(out), *stages, *SERVER, *extra]
        done = runner.invoke(app, args)
        assert done.exit_code == 2, done.output
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: --") and named in lines[0]
        assert not out.exists()

    def test_a_stage_mode_without_a_server_is_refused(self, tmp_path: Path) -> None:
        out = tmp_path / "bank.jsonl"
        args = [
            "record",
            str(_tasks(tmp_path)),
            "--out",
            str(out),
            "--stage",
            "a",
            "--stage-mode",
            "continue",
        ]
        done = runner.invoke(app, args)
        assert done.exit_code == 2 and "--stage-mode: only with --base-url" in done.stderr
        assert not out.exists()


class TestSweepKnobsEveryStageOverrides:
    def test_two_temperatures_no_stage_takes_are_refused_naming_the_stages(self, tmp_path: Path) -> None:
        out = tmp_path / "sweep"
        stages = ["--stage", "think:temperature=0.2", "--stage", "answer:temperature=0.9"]
        args = ["sweep", str(_tasks(tmp_path)), "--out", str(out), *stages, "--temperature", "0.2,0.8"]
        done = runner.invoke(app, args)
        assert done.exit_code == 2 and not out.exists()
        line = done.stderr.strip()
        assert line.startswith("error: --temperature: every stage sets its own temperature")
        assert "think temperature=0.2, answer temperature=0.9" in line and "--sweep-stage" in line

    def test_a_knob_one_stage_leaves_unset_is_swept(self) -> None:
        from retryctl.record._sweep import sweep_conflict

        stages = (Stage(name="think", temperature=0.2, max_tokens=8), Stage(name="answer", max_tokens=4))
        assert sweep_conflict(stages, None, {"temperature": [0.2, 0.8]}) is None
        # top_p: '-' alone is not a value; two values no stage takes are refused like temperatures
        both = tuple(Stage(name=s.name, top_p=0.9, max_tokens=4) for s in stages)
        assert sweep_conflict(both, None, {"top_p": [None]}) is None
        assert (sweep_conflict(both, None, {"top_p": [0.5, 0.9]}) or "").startswith("--top-p: every stage")

    @pytest.mark.parametrize(("flag", "value"), [("--temperature", "0.2,0.8"), ("--top-p", "0.5")])
    def test_a_swept_stage_s_own_knob_is_not_silently_replaced(
        self, tmp_path: Path, flag: str, value: str
    ) -> None:
        out = tmp_path / "sweep"
        stages = ["--stage", "think:temperature=0.9,top_p=0.95", "--stage", "answer"]
        args = ["sweep", str(_tasks(tmp_path)), "--out", str(out), *stages, "--sweep-stage", "think"]
        done = runner.invoke(app, [*args, flag, value])
        assert done.exit_code == 2 and not out.exists()
        line = done.stderr.strip()
        knob = flag[2:].replace("-", "_")
        assert line.startswith(f"error: --sweep-stage think: the stage sets {knob}=")
        assert f"leave {knob} out of --stage think" in line and f"leave {flag} out" in line


class TestSweepGridMistakes:
    """What a new user typed: each is one ``error:`` line, exit 2, and nothing written."""

    @pytest.mark.parametrize(
        ("flag", "value", "twice"),
        [("--temperature", "0.2,0.20", "0.2"), ("--top-p", "-,-", "-"), ("--min-p", "0.05,0.1,0.05", "0.05")],
    )
    def test_a_value_given_twice(self, tmp_path: Path, flag: str, value: str, twice: str) -> None:
        out = tmp_path / "sweep"
        done = runner.invoke(app, ["sweep", str(_tasks(tmp_path)), "--out", str(out), flag, value])
        assert done.exit_code == 2 and not out.exists()
        assert done.stderr.strip() == f"error: {flag} {value!r}: {twice} is given twice"

    @pytest.mark.parametrize(("flag", "value"), [("--temperature", "0.5"), ("--top-p", "0.5,-")])
    def test_one_value_no_stage_takes(self, tmp_path: Path, flag: str, value: str) -> None:
        out = tmp_path / "sweep"
        stages = ["--stage", "think:temperature=0.2,top_p=0.9", "--stage", "answer:temperature=0.9,top_p=0.8"]
        done = runner.invoke(app, ["sweep", str(_tasks(tmp_path)), "--out", str(out), *stages, flag, value])
        assert done.exit_code == 2 and not out.exists()
        assert done.stderr.strip().startswith(f"error: {flag}: every stage sets its own")

    def test_a_chat_template_file_that_is_not_a_model(self, tmp_path: Path) -> None:
        out = tmp_path / "bank.jsonl"
        not_gguf = tmp_path / "template.gguf"
        not_gguf.write_text("not a model\n", encoding="utf-8")
        args = ["record", str(_tasks(tmp_path)), "--out", str(out), "--stage", "a", "--stage", "b"]
        args += ["--base-url", "http://127.0.0.1:9/v1", "--model-name", "m", "--stage-mode", "completions"]
        done = runner.invoke(app, [*args, "--chat-template-gguf", str(not_gguf)])
        assert done.exit_code == 2 and not out.exists()
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            f"error: --chat-template-gguf {not_gguf}: not a model file"
        )
