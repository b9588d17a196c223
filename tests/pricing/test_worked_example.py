"""The worked example of docs/pricing.md reproduces exactly, through the engine and the command."""

from __future__ import annotations

import json
from decimal import Decimal, localcontext
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from billing.pricing import CONTEXT, price, result_to_dict, scenario_from_dict


@pytest.fixture
def example(fixtures_dir: Path) -> Path:
    return fixtures_dir / "worked-example"


def test_it_reproduces_the_worked_example(example):
    scenario = json.loads((example / "scenario.json").read_text())

    output = result_to_dict(price(scenario_from_dict(scenario)))

    assert output == json.loads((example / "expected.json").read_text())


def test_it_prints_the_worked_example_from_the_command(example):
    stdout = StringIO()

    call_command("price_scenario", str(example / "scenario.json"), stdout=stdout)

    # Same keys, same order, same strings: the file itself, byte for byte.
    assert stdout.getvalue() == (example / "expected.json").read_text()


def test_it_reproduces_the_gpu_classes_worked_example(example):
    scenario = json.loads((example / "classes-scenario.json").read_text())

    output = result_to_dict(price(scenario_from_dict(scenario)))

    assert output == json.loads((example / "classes-expected.json").read_text())


def test_it_prints_the_gpu_classes_worked_example_from_the_command(example):
    stdout = StringIO()

    call_command("price_scenario", str(example / "classes-scenario.json"), stdout=stdout)

    # Same keys, same order, same strings. The file has no final newline; the command, like
    # every management command, ends its output with one.
    expected = (example / "classes-expected.json").read_text()
    assert stdout.getvalue() == expected.rstrip("\n") + "\n"


def test_it_rounds_a_team_line_once_over_its_classes(example):
    result = price(scenario_from_dict(json.loads((example / "classes-scenario.json").read_text())))

    nlp_standard = result.team("nlp").line("standard")
    assert [part.gpu_class for part in nlp_standard.by_class] == ["H100", "L40S", "default"]
    with localcontext(CONTEXT):  # exact sums: the context traps any rounding
        assert sum(part.amount for part in nlp_standard.by_class) == nlp_standard.amount
        assert sum(part.gpu_seconds for part in nlp_standard.by_class) == nlp_standard.gpu_seconds
    assert [str(part.rate_per_gpu_hour) for part in nlp_standard.by_class] == [
        "42.6740",
        "11.4370",
        "14.3740",
    ]
    chat_baseline = result.team("chat").line("baseline")
    assert str(chat_baseline.rounded) == "1409.03" == str(round(chat_baseline.amount, 2))
    # Rounding each class's part first would lose a cent: 1034.84 + 374.18.
    parts = [round(part.amount, 2) for part in chat_baseline.by_class]
    assert [str(part) for part in parts] == ["1034.84", "374.18"]
    assert sum(parts) == chat_baseline.rounded - Decimal("0.01")


def test_it_explains_the_worked_example_lines(example):
    result = price(scenario_from_dict(json.loads((example / "scenario.json").read_text())))

    chat_baseline = result.team("chat").line("baseline")
    assert str(chat_baseline.rounded) == "358.78"
    assert chat_baseline.rounded == round(chat_baseline.amount, 2)
    assert [item.id for item in chat_baseline.contributions] == ["chat-api"]
    assert "19.44 GPU-hours" in chat_baseline.description
    nlp_standard = result.team("nlp").line("standard")
    assert str(nlp_standard.rate_per_gpu_hour) == "14.3740"
    assert {item.id: str(item.gpu_seconds) for item in nlp_standard.contributions} == {
        "llm-sft": "39150.0",
        "nlp-notebook": "3900.0",
    }
    with localcontext(CONTEXT):  # exact sums: the context traps any rounding
        assert sum(item.amount for item in nlp_standard.contributions) == nlp_standard.amount
    assert result.rates.derivation.startswith("Standard rate R = depreciation 11.50")


def test_it_refuses_a_bad_file_from_the_command_naming_the_record(example, tmp_path):
    scenario = json.loads((example / "scenario.json").read_text())
    scenario["usage"][12]["task"] = "x"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(scenario))

    with pytest.raises(CommandError) as caught:
        call_command("price_scenario", str(path), stdout=StringIO())

    assert str(caught.value) == f"{path}: usage[12]: unknown task 'x'"


def test_it_refuses_a_file_that_is_not_json(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{not json")

    with pytest.raises(CommandError, match=r"bad\.json: not valid JSON"):
        call_command("price_scenario", str(path), stdout=StringIO())
