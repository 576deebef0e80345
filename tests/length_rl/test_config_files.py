"""GRPO configs share one base (``base: grpo_base.yaml``): loading, overriding, and the errors a user can meet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from livethink.length_rl.cli import main, parse_config
from livethink.length_rl.config_files import load_config_file

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_variant_file_overrides_its_base_and_the_command_line_overrides_both():
    base = load_config_file(CONFIGS / "prod" / "grpo_base.yaml")
    dot = load_config_file(CONFIGS / "prod" / "grpo_dot.yaml")
    assert base["num_generations"] == 8 and dot["num_generations"] == 16  # the variant file wins
    assert dot["learning_rate"] == base["learning_rate"] and "base" not in dot  # the rest comes from the base
    assert load_config_file(CONFIGS / "tiny" / "grpo_baseline.yaml") == load_config_file(CONFIGS / "tiny" / "grpo_band.yaml")
    cfg = parse_config(["--max_steps", "5", "--use_vllm", "false"], load_config_file(CONFIGS / "tiny" / "grpo_siri.yaml"))
    assert cfg.max_steps == 5 and cfg.siri_l_min == 96 and cfg.num_generations == 4 and cfg.variant == "siri"


def test_every_variant_file_holds_only_what_differs():
    for tier in ("tiny", "prod"):
        base = load_config_file(CONFIGS / tier / "grpo_base.yaml")
        for path in sorted((CONFIGS / tier).glob("grpo_*.yaml")):
            if path.name == "grpo_base.yaml":
                continue
            own = yaml.safe_load(path.read_text())
            assert own.get("base"), f"{path} does not start from a base"
            repeated = {k for k, v in own.items() if k in base and base[k] == v}
            assert not repeated, f"{path} repeats its base: {sorted(repeated)}"


def test_base_chain_env_merge_and_errors(tmp_path):
    (tmp_path / "a.yaml").write_text("max_steps: 3\nenv: {A: '1'}\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\nlearning_rate: 0.1\nenv: {B: '2'}\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.yaml").write_text("base: ../b.yaml\nmax_steps: 4\n")
    assert load_config_file(tmp_path / "sub" / "c.yaml") == {"max_steps": 4, "learning_rate": 0.1,
                                                             "env": {"A": "1", "B": "2"}}
    (tmp_path / "loop.yaml").write_text("base: loop.yaml\n")
    with pytest.raises(ValueError, match="includes itself"):
        load_config_file(tmp_path / "loop.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(ValueError, match="must contain a YAML mapping"):
        load_config_file(tmp_path / "list.yaml")


def test_missing_base_and_unknown_keys_are_clear_cli_errors(tmp_path, capsys):
    (tmp_path / "v.yaml").write_text("base: nowhere.yaml\nvariant: dot\n")
    assert main(["--config", str(tmp_path / "v.yaml"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "invalid config" in err and "nowhere.yaml not found (the base of" in err and "Traceback" not in err
    (tmp_path / "w.yaml").write_text(f"base: {CONFIGS / 'tiny' / 'grpo_base.yaml'}\nvariant: dot\ndot_alhpa: 2\n")
    assert main(["--config", str(tmp_path / "w.yaml"), "--dry-run"]) == 2
    assert "unknown key(s) in the config file: dot_alhpa" in capsys.readouterr().err
    assert main(["--config", str(tmp_path / "none.yaml"), "--dry-run"]) == 2
    assert "none.yaml not found" in capsys.readouterr().err


def test_dry_run_of_an_alias_file(capsys):
    assert main(["--config", str(CONFIGS / "tiny" / "grpo_baseline.yaml"), "--dry-run"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["variant"] == "band" and report["rewards"] == {"correctness": 1.0, "helpfulness": 1.0, "brevity": 1.0}
