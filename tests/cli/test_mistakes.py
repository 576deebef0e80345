"""Every mistake of ``tests/cli/mistakes.yaml``, and an out-of-range value of every numeric option of ``rft``,
``grpo`` and ``teacher``, is refused with one line before anything expensive runs (issue #60).

The cases run through ``livethink.cli.main`` in one subprocess (the heavy imports are paid once), with the
expensive steps replaced by sentinels that record a call: a teacher built, samples drawn, a judge made, a model
loaded, a run started. The list's ``console: true`` cases also run as ``livethink ...`` processes (the console
entry point), in parallel with the sweep.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MISTAKES = yaml.safe_load((Path(__file__).parent / "mistakes.yaml").read_text())
DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
# what each command's generated cases start from (a config that passes its dry run)
SWEEP = {
    "rft": ("livethink.rft_distill.config:RFTConfig", ["--config", "configs/tiny/rft.yaml"]),
    "grpo": ("livethink.length_rl.config:GRPOVariantConfig", ["--config", "configs/tiny/grpo_drpo.yaml"]),
    "teacher": ("livethink.rft_distill.teacher_cli:TeacherRunConfig", ["--teacher-type", "scripted"]),
}
DRIVER = r"""
import contextlib, importlib, io, json, sys, traceback, types

CALLED = []

def sentinel(name):
    def called(*args, **kwargs):
        CALLED.append(name)
        raise RuntimeError(f"sentinel: {name} called")
    return called

# the expensive steps: none may run before a refusal
for module, attrs in {"livethink.rft_distill.pipeline": ["run_rft"], "livethink.length_rl.script": ["run_grpo"]}.items():
    stub = types.ModuleType(module)  # stubs: importing the trainers would take seconds
    for attr in attrs:
        setattr(stub, attr, sentinel(attr))
    sys.modules[module] = stub
for module, attr in [("livethink.rft_distill.teachers.factory", "make_teacher"),
                     ("livethink.rft_distill.sampling", "sample_to_shards"),
                     ("livethink.rewards.judge", "make_judge"),
                     ("livethink.eval.harness", "evaluate_model"),
                     ("livethink.rft_distill.teacher_cli", "run")]:
    setattr(importlib.import_module(module), attr, sentinel(attr))
import transformers
transformers.PreTrainedModel.from_pretrained = classmethod(lambda cls, *a, **k: sentinel("from_pretrained")())

from livethink.cli import main
from livethink.config_help import declaring_class
from livethink.option_ranges import RANGES, declared_range, numeric_fields
import typing

def fields_of(classes):
    out = {}
    for command, target in classes.items():
        module, name = target.split(":")
        cls = getattr(importlib.import_module(module), name)
        hints = typing.get_type_hints(cls, include_extras=True)
        out[command] = {f: [kind.__name__, [repr(c) for c in declared_range(cls, f) or []],
                            "annotation" if typing.get_origin(hints[f]) is typing.Annotated
                            or any(typing.get_origin(a) is typing.Annotated for a in typing.get_args(hints[f]))
                            else "table" if f in RANGES else "none",
                            declaring_class(cls, f).__module__]
                        for f, kind in numeric_fields(cls).items()}
    return out

def run(argv):
    del CALLED[:]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
        except BaseException:
            traceback.print_exc()
            rc = "raised"
    return {"argv": argv, "rc": rc, "out": out.getvalue(), "err": err.getvalue(), "called": list(CALLED)}

for line in sys.stdin:  # one JSON request a line: {"fields": {command: "module:Class"}} or {"cases": [argv, ...]}
    request = json.loads(line)
    answer = fields_of(request["fields"]) if "fields" in request else [run(argv) for argv in request["cases"]]
    sys.__stdout__.write("@@RESULTS@@" + json.dumps(answer) + "\n")
    sys.__stdout__.flush()
"""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in DIST_VARS} | {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


class Driver:
    """One process running ``livethink.cli.main`` per case (see ``DRIVER``), asked one JSON line at a time."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", DRIVER], cwd=ROOT, env=_env(), text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def ask(self, request: dict) -> list | dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        while line and not line.startswith("@@RESULTS@@"):  # anything a library printed on the real stdout
            line = self.proc.stdout.readline()
        assert line, self.close()[-3000:]
        return json.loads(line.removeprefix("@@RESULTS@@"))

    def close(self) -> str:
        self.proc.stdin.close()
        err = self.proc.stderr.read()
        self.proc.wait(timeout=60)
        return err


def _out_of_range(kind: str, constraints: list[str]) -> str:
    """A value outside the declared range (``["Ge(ge=1)"]``: below the lower bound, else above the upper one, else
    not a finite number)."""
    bounds = {}
    for text in constraints:
        match = re.fullmatch(r"(?:Ge|Gt|Le|Lt)\((ge|gt|le|lt)=(.+)\)", text)
        if match:
            bounds[match.group(1)] = float(match.group(2))
    step = 1 if kind == "int" else 0.5
    if "ge" in bounds or "gt" in bounds:
        value = bounds["ge"] - step if "ge" in bounds else bounds["gt"]
    elif "le" in bounds or "lt" in bounds:
        value = bounds["le"] + step if "le" in bounds else bounds["lt"]
    else:
        return "nan"
    return str(int(value)) if kind == "int" else repr(float(value))


def generated_cases(fields: dict) -> list[tuple[list[str], str]]:
    cases = []
    for command, by_name in fields.items():
        base = SWEEP[command][1]
        for name, (kind, constraints, _, _) in sorted(by_name.items()):
            value = _out_of_range(kind, constraints)
            cases.append(([command, *base, f"--{name}", value, "--dry-run"], name))
    return cases


def _assert_one_line_refusal(result: dict, says: list[str], rc: int = 2) -> None:
    lines = result["err"].strip().splitlines()
    assert result["rc"] == rc, result
    assert len(lines) == 1, result
    assert "Traceback" not in result["err"], result
    for text in says:
        assert text in lines[0], (text, result)
    assert not result.get("called"), result


@pytest.fixture(scope="module")
def sweep() -> dict:
    """The list and the generated cases through one driver, and the console cases beside it."""
    exe = shutil.which("livethink", path=str(Path(sys.executable).parent)) or shutil.which("livethink")
    assert exe, "the livethink console script is not installed (pip install -e .)"
    console = [(m, subprocess.Popen([exe, *m["argv"]], cwd=ROOT, env=_env(), text=True, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)) for m in MISTAKES if m.get("console")]
    driver = Driver()
    fields = driver.ask({"fields": {command: target for command, (target, _) in SWEEP.items()}})
    generated = generated_cases(fields)
    results = driver.ask({"cases": [m["argv"] for m in MISTAKES] + [argv for argv, _ in generated]})
    helps = driver.ask({"cases": [["rft", "--help"], ["grpo", "--help"], ["grpo", "--help-all"]]})
    driver.close()
    console_results = []
    for mistake, proc in console:
        out, err = proc.communicate(timeout=300)
        console_results.append({"mistake": mistake, "rc": proc.returncode, "out": out, "err": err})
    return {"results": results, "console": console_results, "generated": generated, "fields": fields,
            "help": {" ".join(h["argv"][1:]) + " " + h["argv"][0]: h for h in helps}}


def test_the_list_holds_at_least_35_mistakes_with_a_few_through_the_console():
    assert len(MISTAKES) >= 35
    assert 3 <= sum(bool(m.get("console")) for m in MISTAKES) <= 6  # each costs a process start (~5 s)


def test_every_listed_mistake_is_one_line_before_anything_expensive(sweep):
    results = sweep["results"]
    for mistake, result in zip(MISTAKES, results, strict=False):
        assert result["argv"] == mistake["argv"]
        _assert_one_line_refusal(result, mistake["says"], mistake.get("rc", 2))


def test_every_numeric_option_refuses_an_out_of_range_value(sweep):
    results, generated = sweep["results"], sweep["generated"]
    assert len(generated) >= 150
    for result, (argv, name) in zip(results[len(MISTAKES):], generated, strict=True):
        assert result["argv"] == argv
        _assert_one_line_refusal(result, [name])


def test_the_console_entry_gives_the_same_one_line(sweep):
    console = sweep["console"]
    assert console
    for result in console:
        mistake = result["mistake"]
        assert result["rc"] == mistake.get("rc", 2), result
        assert result["err"].strip().count("\n") == 0, result["err"][-3000:]
        for text in mistake["says"]:
            assert text in result["err"], (text, result["err"])


def test_out_of_range_values_are_outside():
    assert _out_of_range("int", ["Ge(ge=1)"]) == "0"
    assert _out_of_range("float", ["Gt(gt=0)"]) == "0.0"
    assert _out_of_range("float", ["Gt(gt=0)", "Le(le=1)"]) == "0.0"
    assert _out_of_range("float", ["Ge(ge=0)", "Lt(lt=1)"]) == "-0.5"
    assert _out_of_range("float", []) == "nan" and math.isnan(float(_out_of_range("float", [])))


def test_every_numeric_option_declares_its_range(sweep):
    """livethink's own options in their annotation; inherited TRL / transformers ones (and those of modules other
    packages own) in ``option_ranges.RANGES``: a new option without a range fails here."""
    elsewhere = ("livethink.length_rl.variants.", "livethink.length_rl.decoupled", "livethink.length_rl.tail_batching",
                 "livethink.rewards.judge_settings")
    for command, by_name in sweep["fields"].items():
        for name, (_, constraints, source, module) in by_name.items():
            assert source != "none" and constraints, f"{command}: {name} declares no range"
            if module.startswith("livethink") and not module.startswith(elsewhere):
                assert source == "annotation", f"{command}: {name} ({module}) must declare its range on the field"


@pytest.mark.parametrize("command", ["rft", "grpo"])
def test_help_leads_with_livethinks_own_options(sweep, command):
    result = sweep["help"][f"--help {command}"]
    assert result["rc"] == 0, result
    lines = result["out"].splitlines()
    first = "\n".join(lines[:25])
    assert "--config PATH" in first and "--dry-run" in first and "--help-all" in first
    own = next(i for i, line in enumerate(lines) if line.startswith(f"livethink {command} options:"))
    inherited = next(i for i, line in enumerate(lines) if line.startswith("inherited options"))
    assert own < inherited and len(lines) < 400
    assert "--adam-beta2" not in result["out"] and "--adam_beta2" not in result["out"]  # behind --help-all
    assert "--teacher-type" in result["out"] if command == "rft" else "--variant" in result["out"]
    assert "--judge-type" in result["out"]


def test_help_all_lists_every_inherited_option(sweep):
    result = sweep["help"]["--help-all grpo"]
    assert result["rc"] == 0 and "--adam-beta2 FLOAT" in result["out"] and "--max-steps INT" in result["out"]
