"""livethink.models: tokenizer, student factory, parameter counts, loading, LoRA, CLI (real objects throughout)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from livethink.models.cli import main as models_main  # noqa: E402
from livethink.models.loading import (  # noqa: E402
    CheckpointError,
    inspect_checkpoint,
    load_student,
    params_of_checkpoint,
)
from livethink.models.lora import LoraSettings, apply_lora, to_peft_config  # noqa: E402
from livethink.models.params import count_params, count_params_from_config  # noqa: E402
from livethink.models.student import (  # noqa: E402
    StudentConfig,
    build_student,
    create_student,
    load_student_config,
    save_student,
    validate_student_config,
)
from livethink.models.tokenizer import (  # noqa: E402
    CHAT_TEMPLATE,
    check_tokenizer,
    load_tokenizer,
    save_tokenizer,
    train_tokenizer,
)

ROOT = Path(__file__).resolve().parents[2]
TINY_YAML = ROOT / "configs/tiny/student.yaml"
PROD_YAML = ROOT / "configs/prod/student.yaml"


def _made_up_texts(n: int = 400) -> list[str]:
    rng = random.Random(0)
    text = ("the blue hoodie jacket costs price discount coupon size stock shipping ships days return policy "
            "warranty cotton wait let me double-check viewer asks which one is cheaper total after")
    words = text.split()
    texts = []
    for _ in range(n):
        body = " ".join(rng.choice(words) for _ in range(25))
        price = f"${rng.randint(1, 3000):,}.{rng.randint(0, 99):02d}"
        texts.append(f"user\n{body} {price}, {rng.randint(1, 40)}% off.\nassistant\n")
    return texts


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(_made_up_texts(), vocab_size=600)


@pytest.fixture(scope="module")
def student_dir(tmp_path_factory, tokenizer):
    config = load_student_config(TINY_YAML)
    model = create_student(config, tokenizer)
    return save_student(model, tokenizer, tmp_path_factory.mktemp("student"), config)


# --- tokenizer ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "0123456789",
        "$1,299.00",
        "Total: 3 x $19.99 - $10 coupon = $49.97 (15% off).",
        "<think>\nwait, let me double-check 2+2=4\n</think>\n\nIt's $1,299.00.",
        "ünïcode — 中文 🙂 tabs\tand\n\nnewlines  ",
        "",
    ],
)
def test_tokenizer_round_trips(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_digits_are_single_tokens(tokenizer):
    pieces = [tokenizer.decode([i]) for i in tokenizer.encode("It's $1,299.00")]
    assert pieces[-8:] == ["1", ",", "2", "9", "9", ".", "0", "0"]
    assert "".join(pieces) == "It's $1,299.00"


def test_special_and_think_tokens(tokenizer):
    vocab = tokenizer.get_vocab()
    assert [vocab["<|endoftext|>"], vocab["<|im_start|>"], vocab["<|im_end|>"]] == [0, 1, 2]
    assert vocab["<think>"] == len(tokenizer) - 2 and vocab["</think>"] == len(tokenizer) - 1
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.bos_token is None
    ids = tokenizer.encode("<think>\nx\n</think>\n\nok", add_special_tokens=False)
    assert ids[0] == vocab["<think>"] and vocab["</think>"] in ids
    # think tags are not special: they survive skip_special_tokens (reasoning parsers need them)
    assert tokenizer.decode([1, *ids, 2], skip_special_tokens=True) == "<think>\nx\n</think>\n\nok"
    check_tokenizer(tokenizer)


def test_vocab_size_too_small_is_refused():
    with pytest.raises(ValueError, match="vocab_size"):
        train_tokenizer(["abc"], vocab_size=100)


def test_chat_template_renders_chatml(tokenizer):
    messages = [{"role": "system", "content": "docs"}, {"role": "user", "content": "price?"}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt == "<|im_start|>system\ndocs<|im_end|>\n<|im_start|>user\nprice?<|im_end|>\n<|im_start|>assistant\n"
    no_think = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                             enable_thinking=False)
    assert no_think == prompt + "<think>\n\n</think>\n\n"
    completion = "<think>\nit is $5\n</think>\n\nIt costs $5.00."
    full = tokenizer.apply_chat_template(messages + [{"role": "assistant", "content": completion}], tokenize=False)
    assert full == prompt + completion + "<|im_end|>\n"


def test_assistant_mask_covers_reply_and_end_of_turn(tokenizer):
    completion = "<think>\nok\n</think>\n\nYes."
    out = tokenizer.apply_chat_template(
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": completion}],
        tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
    )
    masked = [t for t, m in zip(out["input_ids"], out["assistant_masks"], strict=True) if m]
    assert tokenizer.decode(masked) == completion + "<|im_end|>\n"


def test_trl_accepts_chat_template(tokenizer):
    from trl.chat_template_utils import get_training_chat_template, is_chat_template_stop_token_trained

    assert get_training_chat_template(tokenizer) is None  # prefix-preserving, has generation markers
    assert is_chat_template_stop_token_trained(tokenizer)


def test_save_load_round_trip(tmp_path, tokenizer):
    save_tokenizer(tokenizer, tmp_path)
    loaded = load_tokenizer(tmp_path)
    text = "<think>\n$1,299.00\n</think>\n\nyes"
    assert loaded.encode(text) == tokenizer.encode(text)
    assert loaded.chat_template == CHAT_TEMPLATE
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert len(loaded) == len(tokenizer)
    with pytest.raises(FileNotFoundError, match="no tokenizer"):
        load_tokenizer(tmp_path / "missing")


# --- parameter counts (hand-checked) ------------------------------------------------------------------------

SMALL = dict(num_hidden_layers=2, hidden_size=16, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
             num_experts=4, num_experts_per_tok=2, moe_intermediate_size=8, vocab_size=64)


@pytest.mark.parametrize(("tied", "total", "active"), [(False, 6896, 5360), (True, 5872, 4336)])
def test_param_counts_by_hand(tied, total, active):
    # embeddings 64*16 = 1024 (+1024 untied LM head); per layer: q 16*16 + k 16*8 + v 16*8 + o 16*16 = 768,
    # q/k norms 8+8, two layer norms 2*16, router 4*16 = 64, experts 4*(2*8*16) + 4*(16*8) = 1536 -> 2416;
    # 2 layers = 4832; final norm 16. Experts 2*1536 = 3072, of which top-2/4 active: active = total - 1536.
    config = StudentConfig(tie_word_embeddings=tied, **SMALL)
    torch.manual_seed(0)
    from transformers import Qwen3MoeForCausalLM

    counts = count_params(Qwen3MoeForCausalLM(config.to_hf_config()))
    assert (counts.total, counts.active, counts.expert) == (total, active, 3072)
    assert counts.embedding == (1024 if tied else 2048)
    assert count_params_from_config(config.to_hf_config()) == counts


def test_dense_model_is_all_active():
    from transformers import Qwen3Config

    counts = count_params_from_config(Qwen3Config(vocab_size=64, hidden_size=16, intermediate_size=32,
                                                  num_hidden_layers=1, num_attention_heads=2,
                                                  num_key_value_heads=1, head_dim=8))
    assert counts.total == counts.active and counts.num_experts == 0


def test_routers_found_and_frozen_only_in_moe_models():
    from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3MoeConfig

    from livethink.models.freezing import freeze_routers, router_modules

    sizes = dict(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                 head_dim=8)
    dense = AutoModelForCausalLM.from_config(Qwen3Config(intermediate_size=32, **sizes))
    assert router_modules(dense) == {} and freeze_routers(dense) == 0
    moe = AutoModelForCausalLM.from_config(Qwen3MoeConfig(num_experts=4, num_experts_per_tok=2,
                                                           moe_intermediate_size=8, **sizes))
    assert list(router_modules(moe)) == ["model.layers.0.mlp.gate", "model.layers.1.mlp.gate"]
    assert freeze_routers(moe) == 2 * 4 * 16  # num_experts × hidden per layer
    assert [n for n, p in moe.named_parameters() if not p.requires_grad] == [
        "model.layers.0.mlp.gate.weight", "model.layers.1.mlp.gate.weight"]


def test_train_only_named_parameters():
    from transformers import AutoModelForCausalLM, Qwen3Config

    from livethink.models.freezing import train_only

    model = AutoModelForCausalLM.from_config(Qwen3Config(vocab_size=64, hidden_size=16, intermediate_size=32,
                                                         num_hidden_layers=2, num_attention_heads=2,
                                                         num_key_value_heads=1, head_dim=8))
    assert train_only(model, ["lm_head", r"layers\.1\.self_attn\.q_proj"]) == [
        "model.layers.1.self_attn.q_proj.weight", "lm_head.weight"]
    assert [n for n, p in model.named_parameters() if p.requires_grad] == [
        "model.layers.1.self_attn.q_proj.weight", "lm_head.weight"]
    with pytest.raises(ValueError, match="match no parameter"):
        train_only(model, ["lm_haed"])


def test_prod_config_counts_match_qwen3_30b_a3b():
    config = load_student_config(PROD_YAML)
    summary = validate_student_config(config, check_path=False)
    # by hand: embeddings 2 * 151936*2048 = 622,329,856; per layer attention 2*(2048*4096) + 2*(2048*512)
    # = 18,874,368, norms 2*128 + 2*2048 = 4,352, router 128*2048 = 262,144, experts 128*3*2048*768 =
    # 603,979,776 (8/128 active = 37,748,736); 48 layers; final norm 2048.
    per_layer_dense = 18_874_368 + 4_352 + 262_144
    assert summary["params"]["total"] == 622_329_856 + 2048 + 48 * (per_layer_dense + 603_979_776)
    assert summary["params"]["active"] == 622_329_856 + 2048 + 48 * (per_layer_dense + 37_748_736)
    assert summary["params"]["total"] == 30_532_122_624  # "30B"
    assert summary["params"]["active"] == 3_353_032_704  # "A3B"


# --- student factory -------------------------------------------------------------------------------------------


def test_tiny_student_forward_backward(tokenizer):
    config = load_student_config(TINY_YAML)
    model = create_student(config, tokenizer)
    counts = count_params(model)
    assert counts.total <= 5_000_000
    assert counts.active < counts.total
    assert model.config.vocab_size % 64 == 0 and model.config.vocab_size >= len(tokenizer)
    assert model.config.eos_token_id == tokenizer.eos_token_id
    ids = torch.tensor([tokenizer.encode("<think>\nthe price is $1,299.00\n</think>\n\nyes")])
    out = model(input_ids=ids, labels=ids)
    assert torch.isfinite(out.loss) and out.aux_loss is not None and out.aux_loss > 0
    out.loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert grads["model.layers.0.mlp.gate.weight"].abs().sum() > 0  # router learns (aux loss)
    assert grads["model.layers.0.mlp.experts.gate_up_proj"].abs().sum() > 0


def test_save_and_load_student(student_dir, tokenizer):
    model, loaded_tok = load_student(student_dir)
    assert loaded_tok.encode("$1,299.00") == tokenizer.encode("$1,299.00")
    reference = create_student(load_student_config(TINY_YAML), tokenizer)
    ids = torch.tensor([[1, 5, 6, 7, 2]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, reference(ids).logits)
    assert (student_dir / "student.yaml").is_file()
    assert model.generation_config.eos_token_id == [tokenizer.eos_token_id, tokenizer.pad_token_id]
    assert params_of_checkpoint(student_dir) == count_params(model)


def test_build_student_from_pretrained_with_lora(student_dir):
    config = load_student_config(TINY_YAML, pretrained=str(student_dir), router_aux_loss_coef=0.5,
                                 lora={"r": 4, "lora_alpha": 8})
    model, tok = build_student(config)
    assert model.config.router_aux_loss_coef == 0.5 and model.config.output_router_logits
    assert any("lora_A" in n for n, _ in model.named_parameters())
    assert tok.eos_token == "<|im_end|>"


@pytest.fixture(scope="module")
def dense_dir(tmp_path_factory, tokenizer):
    """A saved tiny dense Llama checkpoint (the shape of SmolLM2, a pretrained dense student)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    dense = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
    return save_student(dense, tokenizer, tmp_path_factory.mktemp("dense"))


def test_build_student_from_dense_pretrained_skips_router_options(dense_dir):
    """A dense checkpoint (e.g. SmolLM2, a Llama) as ``pretrained``: the MoE router options are not passed to it."""
    model, tok = build_student(load_student_config(TINY_YAML, pretrained=str(dense_dir)))
    assert type(model).__name__ == "LlamaForCausalLM"
    assert not hasattr(model.config, "output_router_logits")
    assert tok.eos_token == "<|im_end|>"


def test_dry_run_of_a_dense_checkpoint_skips_moe_fields_and_checks_the_rest(dense_dir):
    stated = {"pretrained": str(dense_dir), "num_hidden_layers": 1, "hidden_size": 32,
              "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "max_position_embeddings": 2048,
              "tie_word_embeddings": False}
    summary = validate_student_config(StudentConfig(**stated))
    assert summary["dense"] and summary["params"]["num_experts"] == 0
    with pytest.raises(ValueError, match="hidden_size: config says 64, checkpoint has 32"):
        validate_student_config(StudentConfig(**(stated | {"hidden_size": 64})))


def test_student_generates(tokenizer):
    model = create_student(load_student_config(TINY_YAML), tokenizer)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)
    out = model.generate(**prompt, max_new_tokens=5, do_sample=False)
    assert out.shape[1] <= prompt["input_ids"].shape[1] + 5


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"num_experts_per_tok": 9}, "num_experts_per_tok=9 exceeds num_experts=8"),
        ({"num_key_value_heads": 3}, "num_key_value_heads=3"),
        ({"hidden_size": 130, "head_dim": None}, "hidden_size=130"),
        ({"num_hidden_layers": 0}, "student.num_hidden_layers"),
        ({"router_aux_loss_coef": -1.0}, "router_aux_loss_coef"),
        ({"dtype": "int8"}, "student.dtype"),
        ({"lora": {"r": 0}}, "lora.r"),
        ({"lora": {"rank": 8}}, "unknown lora field"),
        ({"lora": {"target_parameters": ["mlp.experts.down_proj"]}}, "lora_dropout"),
    ],
)
def test_student_config_errors_name_the_field(overrides, match):
    data = {**load_student_config(TINY_YAML).to_dict(), **overrides}
    with pytest.raises(ValueError, match=match):
        StudentConfig.from_dict(data)


def test_yaml_errors_name_file_and_field(tmp_path):
    bad = tmp_path / "student.yaml"
    bad.write_text("num_hidden_layer: 4\n")
    with pytest.raises(ValueError, match=r"student.yaml: unknown student field\(s\): num_hidden_layer"):
        load_student_config(bad)
    with pytest.raises(FileNotFoundError, match="student config not found"):
        load_student_config(tmp_path / "nope.yaml")


def test_create_from_pretrained_config_is_refused(tokenizer):
    with pytest.raises(ValueError, match="pretrained"):
        create_student(StudentConfig(pretrained="/x"), tokenizer)


# --- loading and dry-run validation ----------------------------------------------------------------------------


def test_bad_checkpoint_paths(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist: .*/missing"):
        inspect_checkpoint(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError, match="not a directory"):
        inspect_checkpoint(tmp_path / "file")
    with pytest.raises(CheckpointError, match="no config.json"):
        inspect_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_moe"}))
    with pytest.raises(CheckpointError, match="no weights"):
        inspect_checkpoint(tmp_path)
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError, match="1 weight shard.*model-00002-of-00002"):
        inspect_checkpoint(tmp_path)


def _fake_qwen3_30b_a3b(root: Path, tokenizer, **changes) -> Path:
    """A checkpoint dir with a real Qwen3-30B-A3B config.json, a tokenizer and (empty) weight shards."""
    config = load_student_config(PROD_YAML, pretrained=str(root)).to_hf_config()
    for key, value in changes.items():
        setattr(config, key, value)
    config.save_pretrained(root)
    shards = [f"model-{i:05d}-of-00016.safetensors" for i in range(1, 17)]
    (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {s: s for s in shards}}))
    for shard in shards:
        (root / shard).write_bytes(b"")
    save_tokenizer(tokenizer, root)
    return root


def test_prod_config_dry_run(tmp_path, tokenizer):
    ckpt = _fake_qwen3_30b_a3b(tmp_path / "Qwen3-30B-A3B", tokenizer)
    config = load_student_config(PROD_YAML, pretrained=str(ckpt))
    summary = validate_student_config(config)
    assert summary["path_checked"] and summary["weight_files"] == 16
    assert summary["params"]["active"] == 3_353_032_704
    assert config.peft_config().target_modules == {"q_proj", "k_proj", "v_proj", "o_proj"}
    assert models_main(["validate", "--config", str(PROD_YAML), "--pretrained", str(ckpt)]) == 0


def test_prod_config_dry_run_reports_mismatch_and_missing_path(tmp_path, tokenizer, capsys):
    ckpt = _fake_qwen3_30b_a3b(tmp_path / "other", tokenizer, num_experts=64)
    with pytest.raises(ValueError, match="num_experts: config says 128, checkpoint has 64"):
        validate_student_config(load_student_config(PROD_YAML, pretrained=str(ckpt)))
    assert models_main(["validate", "--config", str(PROD_YAML), "--pretrained", str(tmp_path / "none")]) == 1
    assert "does not exist" in capsys.readouterr().err


# --- LoRA ------------------------------------------------------------------------------------------------------


def test_lora_on_attention(tokenizer):
    model = apply_lora(create_student(load_student_config(TINY_YAML), tokenizer), LoraSettings(r=4, lora_alpha=8))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        assert any(f"layers.3.self_attn.{proj}.lora_A" in n for n in trainable)
    ids = torch.tensor([[1, 5, 6, 7, 2]])
    model(input_ids=ids, labels=ids).loss.backward()
    assert all(p.grad is not None for n, p in model.named_parameters() if p.requires_grad)


def test_lora_on_fused_experts(tokenizer):
    settings = LoraSettings(r=2, lora_dropout=0.0, target_modules=[],
                            target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"])
    assert to_peft_config(settings).target_parameters == ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
    model = apply_lora(create_student(load_student_config(TINY_YAML), tokenizer), settings)
    ids = torch.tensor([[1, 5, 6, 7, 2]])
    model(input_ids=ids, labels=ids).loss.backward()
    assert any("experts" in n and p.requires_grad for n, p in model.named_parameters())


# --- TRL SFTTrainer on prompt-completion conversational data ---------------------------------------------------


def test_trl_sft_prompt_completion(tmp_path, tokenizer, student_dir):
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    model, tok = load_student(student_dir)
    completion = "<think>\nthe hoodie is $19.99, 2 x $19.99 = $39.98\n</think>\n\nTwo hoodies cost $39.98."
    rows = [{"prompt": [{"role": "system", "content": "docs"}, {"role": "user", "content": f"price of {i}?"}],
             "completion": [{"role": "assistant", "content": completion}]} for i in range(4)]
    args = SFTConfig(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=2, use_cpu=True,
                     bf16=False, report_to=[], save_strategy="no", logging_steps=1, dataset_num_proc=None)
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok)
    row = trainer.train_dataset[0]
    masked = [t for t in row["labels"] if t != -100]
    assert tok.decode(masked) == completion + "<|im_end|>\n"  # loss on reasoning + reply + end of turn
    result = trainer.train()
    assert result.training_loss > 0


# --- CLI ---------------------------------------------------------------------------------------------------------


def test_cli_tokenizer_create_params(tmp_path, capsys):
    from livethink.data.cli import main as data_main

    assert data_main(["generate", "--out", str(tmp_path / "data"), "--n-train", "60", "--n-validation", "10",
                      "--n-test", "10"]) == 0
    assert models_main(["tokenizer", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "tok"),
                        "--vocab-size", "1024"]) == 0
    tok = load_tokenizer(tmp_path / "tok")
    assert tok.convert_ids_to_tokens(tok.encode("assistant")) == ["assistant"]  # role names are single tokens
    capsys.readouterr()
    assert models_main(["create", "--config", str(TINY_YAML), "--tokenizer", str(tmp_path / "tok"),
                        "--out", str(tmp_path / "student"), "--json"]) == 0
    printed = capsys.readouterr().out
    counts = json.loads(printed.strip().splitlines()[-1])
    assert "total" in printed and "active" in printed and counts["total"] <= 5_000_000
    assert models_main(["params", "--model", str(tmp_path / "student"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == counts
    assert models_main(["tokenizer", "--data", str(tmp_path / "nodata"), "--out", str(tmp_path / "t2")]) == 2
    assert "train.jsonl not found" in capsys.readouterr().err
