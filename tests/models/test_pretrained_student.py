"""Pretrained students with LoRA and tied embeddings through stage 1 and 2.

Stage 1 runs the user's command on the real SmolLM2-135M-Instruct (``livethink rft --config
configs/smollm2/rft_liveshop.yaml``, two steps) and saves the adapter and the merged weights; both load, the way
``livethink serve`` loads them (``path``; ``path`` + ``lora``), and give the same logits. Stage 2 (GRPO) runs on a
tiny Llama with tied embeddings, the shape of SmolLM2 (a SmolLM2 GRPO step takes minutes on two shared cores).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from livethink.data.io import write_jsonl

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def smollm2_dir() -> Path:
    from livethink.models.smollm2 import SmolLM2NotAvailable, ensure_smollm2

    try:
        return Path(ensure_smollm2())
    except SmolLM2NotAvailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def stage1(tmp_path_factory, liveshop_small, smollm2_dir):
    """``livethink rft`` on SmolLM2 with LoRA: 2 steps of 2 traces, short sequences."""
    from livethink.rft_distill.cli import main

    root = tmp_path_factory.mktemp("smollm2_rft")
    for split, tasks in liveshop_small.tasks.items():
        write_jsonl(tasks, root / "data" / f"{split}.jsonl")
    student_yaml = root / "student.yaml"
    student_yaml.write_text((ROOT / "configs/smollm2/student_liveshop.yaml").read_text()
                            .replace("pretrained: ~/.cache/livethink/smollm2-135m-instruct",
                                     f"pretrained: {smollm2_dir}"))
    argv = ["--config", str(ROOT / "configs/smollm2/rft_liveshop.yaml"), "--output_dir", str(root / "rft"),
            "--data_dir", str(root / "data"), "--n_prompts", "4", "--k", "2", "--student_config", str(student_yaml),
            "--max_steps", "2", "--per_device_train_batch_size", "1", "--max_length", "1024",
            "--save_strategy", "no", "--logging_steps", "1", "--train_sampling_strategy", "random"]
    assert main(argv) == 0
    return {"root": root, "out": root / "rft", "base": smollm2_dir}


def logits(model, tokenizer) -> torch.Tensor:
    ids = tokenizer("Is the blender dishwasher-safe?", return_tensors="pt").input_ids
    with torch.no_grad():
        return model(ids).logits.float()


@pytest.mark.slow
def test_lora_sft_saves_the_adapter_and_merged_weights_that_agree(stage1):
    from peft import PeftModel

    from livethink.models.loading import inspect_checkpoint, load_model, load_tokenizer_for

    out, base = stage1["out"], stage1["base"]
    adapter, final = out / "adapter", out / "final"
    assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == str(base)
    assert (adapter / "adapter_model.safetensors").is_file()
    info = inspect_checkpoint(final)
    assert info.model_type == "llama" and info.has_tokenizer and info.config["tie_word_embeddings"]
    summary = json.loads((out / "rft_summary.json").read_text())
    assert summary["adapter_dir"] == str(adapter) and summary["adapter_base"] == str(base)

    tokenizer = load_tokenizer_for(final)
    merged = load_model(final, dtype="float32").eval()
    # the serve engines' LoRA form: the base checkpoint + the adapter (transformers engine: merged on load)
    over_base = PeftModel.from_pretrained(load_model(base, dtype="float32"), str(adapter)).eval()
    plain = load_model(base, dtype="float32").eval()
    m, a, b = logits(merged, tokenizer), logits(over_base, tokenizer), logits(plain, tokenizer)
    assert torch.isfinite(m).all()
    assert (m - b).abs().max() > 1e-3  # training moved the adapter away from its zero start
    torch.testing.assert_close(m, a, atol=2e-3, rtol=1e-3)  # merged (float32, the student's dtype) = base + adapter
    assert "lora" not in " ".join(n for n, _ in merged.named_parameters())


@pytest.mark.slow
def test_serve_config_takes_both_forms(stage1):
    from livethink.serve.config import parse_config
    from livethink.serve.dry_run import dry_run

    out, base = stage1["out"], stage1["base"]
    config = parse_config({"models": {"merged": {"path": str(out / "final")},
                                      "adapter": {"path": str(base), "lora": str(out / "adapter")}},
                           "default_model": "merged"}, "test")
    report = dry_run(config)
    assert not report["problems"], report["problems"]
    assert report["models"]["merged"]["model_type"] == report["models"]["adapter"]["model_type"] == "llama"
    groups = config.engine_groups()
    assert groups["adapter"] == {"adapter": str(out / "adapter")} and groups["merged"] == {"merged": None}


@pytest.fixture(scope="module")
def tied_llama(tmp_path_factory, liveshop_small) -> dict:
    """A tiny dense Llama with tied embeddings (the shape of SmolLM2, small enough for a GRPO step in seconds)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from livethink.models.student import save_student
    from livethink.models.tokenizer import corpus_from_tasks, train_tokenizer

    root = tmp_path_factory.mktemp("tied")
    for split, tasks in liveshop_small.tasks.items():
        write_jsonl(tasks, root / "data" / f"{split}.jsonl")
    tokenizer = train_tokenizer(corpus_from_tasks(liveshop_small.tasks["train"][:100]), vocab_size=600)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                         tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
                                         pad_token_id=tokenizer.pad_token_id))
    model.generation_config.eos_token_id = [tokenizer.eos_token_id] + list(range(100, 160))  # lengths vary
    return {"data": root / "data", "model": save_student(model, tokenizer, root / "model")}


def grpo_config(out: Path, setup: dict, **overrides):
    from livethink.length_rl.config import GRPOVariantConfig

    # length_penalty: C − α·L/L_max varies with the length even while every reply is wrong, so there is a gradient
    options = dict(output_dir=str(out), variant="length_penalty", model_name_or_path=str(setup["model"]),
                   data_dir=str(setup["data"]), n_prompts=4, max_steps=1, per_device_train_batch_size=4,
                   num_generations=2, max_completion_length=8, learning_rate=1e-2, use_cpu=True, bf16=False,
                   report_to="none", save_strategy="no", logging_steps=1, beta=0.0, use_vllm=False,
                   dataloader_num_workers=0)
    return GRPOVariantConfig(**(options | overrides))


def test_grpo_with_lora_on_a_tied_student_saves_adapter_and_merged(tied_llama, tmp_path):
    """Stage 2 on a pretrained student: ``use_peft`` (a YAML's trainable_parameters cleared with @all), one GRPO
    step, then the adapter and the merged weights, which agree."""
    from peft import PeftModel

    from livethink.length_rl.script import run_grpo
    from livethink.models.loading import load_model, load_tokenizer_for

    out = tmp_path / "grpo"
    cfg = grpo_config(out, tied_llama, use_peft=True, lora_r=4, lora_alpha=8, trainable_parameters=["@all"])
    assert cfg.trainable_parameters is None
    final = run_grpo(cfg)
    adapter = out / "adapter"
    assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == str(tied_llama["model"])
    summary = json.loads((out / "grpo_summary.json").read_text())
    assert summary["adapter_dir"] == str(adapter) and summary["global_step"] == 1
    tokenizer = load_tokenizer_for(final)
    merged = load_model(final, dtype="float32")
    over_base = PeftModel.from_pretrained(load_model(tied_llama["model"], dtype="float32"), str(adapter))
    base = load_model(tied_llama["model"], dtype="float32")
    m, a, b = logits(merged, tokenizer), logits(over_base, tokenizer), logits(base, tokenizer)
    assert (m - b).abs().max() > 1e-4
    torch.testing.assert_close(m, a, atol=1e-4, rtol=1e-4)
    # the same merge by hand: `livethink models merge`
    from livethink.models.cli import main as models_main

    assert models_main(["merge", "--base", str(tied_llama["model"]), "--adapter", str(adapter),
                        "--out", str(tmp_path / "merged")]) == 0
    torch.testing.assert_close(logits(load_model(tmp_path / "merged", dtype="float32"), tokenizer), m)


def test_grpo_head_on_a_tied_student_trains_the_top_layer_only(tied_llama, tmp_path):
    """``trainable_parameters: [@head]`` on a tied model: the last layer and the final norm move, the shared
    embedding matrix does not."""
    from safetensors.torch import load_file

    from livethink.length_rl.script import run_grpo

    out = tmp_path / "grpo"
    final = run_grpo(grpo_config(out, tied_llama, trainable_parameters=["@head"]))
    before = load_file(tied_llama["model"] / "model.safetensors")
    after = load_file(final / "model.safetensors")
    moved = sorted(k for k in before if not torch.equal(before[k], after[k]))
    assert moved and all(k.startswith("model.layers.1.") or k == "model.norm.weight" for k in moved), moved
    assert torch.equal(before["model.embed_tokens.weight"], after["model.embed_tokens.weight"])


def test_grpo_rejects_lora_with_trainable_parameters():
    from livethink.length_rl.config import GRPOVariantConfig

    with pytest.raises(ValueError, match=r"trainable_parameters \['@head'\] and use_peft exclude each other"):
        GRPOVariantConfig(output_dir="x", use_peft=True, trainable_parameters=["@head"], use_cpu=True, bf16=False,
                          per_device_train_batch_size=4, num_generations=4)


def test_budget_forcing_refuses_a_student_that_does_not_think(smollm2_dir, tmp_path, capsys):
    """Off-the-shelf SmolLM2 has no reasoning delimiters: a budget-forcing run names the field and exits 2 before
    loading weights, without a traceback (stage 1's output thinks)."""
    from livethink.length_rl.cli import main

    argv = ["--config", str(ROOT / "configs/tiny/grpo_drpo_budget64.yaml"), "--model_name_or_path", str(smollm2_dir),
            "--output_dir", str(tmp_path / "grpo"), "--use_vllm", "false", "--calculator", "false"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("livethink grpo: invalid config: budget_forcing: ") and "does not think" in err
    assert "Traceback" not in err and not (tmp_path / "grpo").exists()
    assert main([*argv, "--dry-run"]) == 2
    assert "does not think" in json.loads(capsys.readouterr().out)["problems"][0]
