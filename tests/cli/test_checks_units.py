"""The pieces behind the one-line refusals, pinned by hand: range declarations and their messages
(``option_ranges``), YAML errors (``yaml_files``) and the dry-run's path verdict (``run_check``)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Annotated

import pytest
from annotated_types import Ge, Gt, Interval, Le

from livethink.config_sections import ConfigError
from livethink.option_ranges import (
    Also,
    NonNegativeInt,
    PositiveInt,
    Share,
    check_ranges,
    declared_range,
    describe,
    numeric_fields,
    option_type,
    value_problem,
)
from livethink.run_check import Findings, check_path, is_hub_id, looks_local, print_dry_run
from livethink.yaml_files import YAMLFileError, read_yaml


@dataclass
class Options:
    k: PositiveInt = 4
    limit: NonNegativeInt = 0
    share: Share | None = None
    momentum: Annotated[float, Interval(ge=0, lt=1)] = 0.9
    max_steps: Annotated[int, Ge(1), Also((-1,), "unlimited")] = -1
    weights: list[float] | None = field(default=None)
    name: str = "x"
    flag: bool = False


@pytest.mark.parametrize(("constraints", "text"), [
    ([Ge(1)], ">= 1"),
    ([Gt(0)], "> 0"),
    ([Ge(0), Le(1)], "in [0, 1]"),
    (list(Interval(gt=0, le=1)), "in (0, 1]"),
    ([Ge(1), Also((-1,), "unlimited")], ">= 1, or -1 (unlimited)"),
    ([], "a finite number"),
])
def test_describe(constraints, text):
    assert describe(constraints) == text


def test_numeric_fields_and_their_declared_ranges():
    assert numeric_fields(Options) == {"k": int, "limit": int, "share": float, "momentum": float, "max_steps": int,
                                       "weights": float}
    assert describe(declared_range(Options, "momentum")) == "in [0, 1)"
    assert declared_range(Options, "weights") is None


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"k": 0}, "k: must be >= 1, got 0"),
    ({"limit": -5}, "limit: must be >= 0, got -5"),
    ({"share": 1.5}, "share: must be in [0, 1], got 1.5"),
    ({"momentum": 1.0}, "momentum: must be in [0, 1), got 1.0"),
    ({"max_steps": 0}, "max_steps: must be >= 1, or -1 (unlimited), got 0"),
    ({"k": 2.5}, "k: must be an integer >= 1, got 2.5"),
    ({"k": True}, "k: must be an integer >= 1, got True"),
    ({"momentum": float("nan")}, "momentum: must be a finite number in [0, 1), got nan"),
    ({"weights": [1.0, float("inf")]}, "weights: must be a finite number, got inf"),
])
def test_a_value_out_of_range_is_named(kwargs, message):
    with pytest.raises(ConfigError) as err:
        check_ranges(Options(**kwargs))
    assert str(err.value) == message


def test_in_range_values_and_the_special_ones_pass():
    check_ranges(Options(k=1, limit=0, share=None, momentum=0.0, max_steps=-1, weights=[-1.0, 2.0]))
    assert value_problem("x", int, [Ge(1)], None) is None


def test_every_problem_is_on_one_line():
    with pytest.raises(ConfigError) as err:
        check_ranges(Options(k=0, limit=-1))
    assert str(err.value) == "k: must be >= 1, got 0; limit: must be >= 0, got -1"


def test_option_type_is_the_same_check_for_argparse():
    parse = option_type(int, Ge(1))
    assert parse("3") == 3
    with pytest.raises(argparse.ArgumentTypeError, match=r"^must be >= 1, got 0$"):
        parse("0")
    with pytest.raises(argparse.ArgumentTypeError, match="must be an integer >= 1, got 'many'"):
        parse("many")


def test_yaml_errors_are_one_line_with_file_line_and_column(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: 1\nteacher:\n  type: x\n   temperature: 1\n")
    with pytest.raises(YAMLFileError) as err:
        read_yaml(bad, shown="configs/bad.yaml")
    assert str(err.value).startswith("configs/bad.yaml:4:")
    assert "not valid YAML: mapping values are not allowed" in str(err.value) and "\n" not in str(err.value)
    quote = tmp_path / "quote.yaml"
    quote.write_text('a: 1\nb: "open\n')
    with pytest.raises(YAMLFileError, match=r"quote.yaml:3:1: not valid YAML: .*quoted scalar at line 2, column 4"):
        read_yaml(quote)
    with pytest.raises(YAMLFileError, match="missing.yaml: file not found"):
        read_yaml(tmp_path / "missing.yaml")
    with pytest.raises(YAMLFileError, match="a directory, not a YAML file"):
        read_yaml(tmp_path)
    (tmp_path / "empty.yaml").write_text("# nothing\n")
    assert read_yaml(tmp_path / "empty.yaml") is None


def test_paths_local_or_production():
    assert looks_local("runs/tiny/rft/final") and looks_local("my_data") and looks_local("./Qwen/Qwen3")
    assert not looks_local("/data/livethink/runs/prod/rft/final") and not looks_local("Qwen/Qwen3-30B-A3B")
    assert is_hub_id("Qwen/Qwen3-30B-A3B") and not is_hub_id("runs/final") and not is_hub_id("a/b/c")


def test_a_missing_path_is_a_problem_a_note_or_missing_here(monkeypatch, tmp_path):
    found = Findings()
    check_path(found, "model_name_or_path", "runs/tiny/rtf/final", what="the RFT student")
    check_path(found, "model_name_or_path", "runs/tiny/rft/final", what="the RFT student")
    check_path(found, "model_name_or_path", "/nonexistent/prod/final", what="the RFT student")
    check_path(found, "model_name_or_path", "Qwen/Qwen3-0.6B", what="the RFT student")
    check_path(found, "data_dir", "artifacts/never/data", what="the data", generated="the run generates it")
    check_path(found, "data_dir", str(tmp_path), what="the data")  # exists: nothing to say
    assert found.problems == ["model_name_or_path: runs/tiny/rtf/final does not exist (the RFT student; a local path "
                              "that no earlier step writes; did you mean runs/tiny/rft/final?)"]
    assert found.missing_here == [
        "model_name_or_path: runs/tiny/rft/final (the RFT student) is not here yet; `livethink rft --config "
        "configs/tiny/rft.yaml` writes it",
        "model_name_or_path: /nonexistent/prod/final (the RFT student) is not on this machine (needed at run time)"]
    assert found.notes == ["model_name_or_path: Qwen/Qwen3-0.6B reads as a Hugging Face Hub id (not checked here)",
                           "data_dir: artifacts/never/data is not here yet; the run generates it"]


def test_the_verdict_and_its_one_summary_line(capsys):
    report = Findings(missing_here=["model: /x is not on this machine"]).into({"variant": "dot"})
    assert report["ok"] and not report["starts_here"]
    assert print_dry_run("livethink grpo", report) == 0
    err = capsys.readouterr().err
    assert err == "livethink grpo: config ok, but the run would not start here: model: /x is not on this machine\n"
    report = Findings(problems=["data_dir: nope does not exist"]).into({})
    assert print_dry_run("livethink grpo", report) == 2 and not report["starts_here"]
    assert capsys.readouterr().err == "livethink grpo: invalid config: data_dir: nope does not exist\n"
    assert print_dry_run("livethink rft", Findings().into({})) == 0
    assert capsys.readouterr().err == "livethink rft: config ok; the run would start here\n"


@pytest.mark.parametrize("module", ["livethink.eval.cli", "livethink.data.cli"])
def test_every_numeric_flag_of_the_argparse_commands_declares_its_range(module):
    import importlib

    parser = importlib.import_module(module).build_parser()
    parsers = [parser] + [p for a in parser._actions if isinstance(a, argparse._SubParsersAction)
                          for p in a.choices.values()]
    undeclared = [f"{p.prog} {a.option_strings[0]}" for p in parsers for a in p._actions
                  if a.type in (int, float)]
    assert not undeclared, f"numeric flags without a range (use option_ranges.option_type): {undeclared}"
