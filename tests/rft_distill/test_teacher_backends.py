"""Teacher factory, output → Sample rules, the transformers backend on a tiny model, the `livethink teacher` CLI,
and (slow) SmolLM2 converted from its GGUF and sampled through the local vLLM backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from livethink.data.io import write_jsonl
from livethink.rft_distill import teacher_cli
from livethink.rft_distill.teachers.base import SamplingConfig, Teacher
from livethink.rft_distill.teachers.factory import make_teacher
from livethink.rft_distill.teachers.outputs import sample_from_output
from livethink.rft_distill.teachers.scripted import ScriptedTeacher


def test_factory_builds_each_type_and_names_bad_fields(tmp_path):
    assert isinstance(make_teacher({"type": "scripted", "error_rate": 0.1, "seed": 3}), ScriptedTeacher)
    teacher = make_teacher({"type": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"})
    assert isinstance(teacher, Teacher) and teacher.name == "openai"
    with pytest.raises(ValueError, match="type: unknown teacher 'r1'"):
        make_teacher({"type": "r1"})
    with pytest.raises(ValueError, match="temprature"):
        make_teacher({"type": "scripted", "temprature": 1})
    with pytest.raises(ValueError, match=r"model: .*\(no config.json\)"):
        make_teacher({"type": "vllm", "model": str(tmp_path)})
    with pytest.raises(ValueError, match=r"model: .*\(no config.json\)"):
        make_teacher({"type": "transformers", "model": str(tmp_path / "missing")})


@pytest.mark.parametrize(
    ("content", "reasoning", "finish", "error"),
    [
        ("<think>\nadd 2 and 2\n</think>\n\n4.", None, "stop", None),
        ("4.", "add 2 and 2", "stop", None),  # vLLM reasoning parser: reasoning in its own field
        ("Four, and shipping is free.", None, "length", None),  # cut, but a reply exists: kept
        ("<think>\nadd 2 and", None, "length", "truncated"),
        ("", "", "stop", "empty"),
        ("<think>\nonly thinking", None, "stop", "empty"),
        ("4.", None, "content_filter", "content_filter"),
    ],
)
def test_output_rules(content, reasoning, finish, error):
    s = sample_from_output(task_id="t", sample_index=0, teacher="x", content=content, reasoning=reasoning,
                           finish_reason=finish, meta={"completion_tokens": 5})
    assert (s.error.split(":")[0] if s.error else None) == error
    if error is None:
        assert s.reply and s.finish_reason == finish
        if reasoning or "<think>" in content:
            assert s.completion.startswith("<think>\n") and s.reasoning.startswith("add 2 and 2")
    else:
        assert s.finish_reason == "error" and s.meta["completion_tokens"] == 5


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory, liveshop_small) -> Path:
    """A 2-layer random Llama with a BPE tokenizer trained on LiveShop (chat template included)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from livethink.models.tokenizer import corpus_from_tasks, save_tokenizer, train_tokenizer

    out = tmp_path_factory.mktemp("tiny-teacher")
    tok = train_tokenizer(corpus_from_tasks(liveshop_small.tasks["train"][:30]), vocab_size=600)
    save_tokenizer(tok, out)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(out)
    return out


def test_transformers_teacher_batches_k_samples(tiny_checkpoint, liveshop_small):
    tasks = liveshop_small.tasks["train"][:3]
    teacher = make_teacher({"type": "transformers", "model": str(tiny_checkpoint), "batch_size": 2,
                            "max_prompt_tokens": 100_000})
    results = list(teacher.generate(tasks, 3, SamplingConfig(temperature=1.0, max_tokens=6, seed=1)))
    assert [[s.sample_index for s in r] for r in results] == [[0, 1, 2]] * 3
    assert [r[0].task_id for r in results] == [t.id for t in tasks]
    for s in (s for r in results for s in r):
        assert s.teacher == "transformers" and 1 <= s.meta["completion_tokens"] <= 6
        assert s.meta["prompt_tokens"] > 50
        assert s.finish_reason in ("stop", "length", "error")
        # rendered as served: the prompt opened the reasoning, and the completion starts with that opening
        assert not s.ok or s.completion.startswith("<think>\n")
    short = make_teacher({"type": "transformers", "model": str(tiny_checkpoint), "max_prompt_tokens": 10})
    (failed,) = short.generate(tasks[:1], 2, SamplingConfig(max_tokens=4))
    assert all(s.error.startswith("context_length:") for s in failed)


def test_cli_config_overrides_and_errors(tmp_path, liveshop_small, capsys):
    write_jsonl(liveshop_small.tasks["train"][:6], tmp_path / "train.jsonl")
    config = tmp_path / "teacher.yaml"
    config.write_text(f"data: {tmp_path}\nk: 2\nout: {tmp_path / 'a'}\nteacher:\n  type: scripted\n"
                      "  temperature: 0.5\n")
    assert teacher_cli.main(["--config", str(config), "--limit", "4", "--k", "3", "--teacher-error-rate", "0.0",
                             "--teacher_max_tokens", "4000", "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["tasks_complete"] == 4 and summary["samples"] == 12 and summary["failed_samples"] == 0
    assert json.loads((tmp_path / "a" / "manifest.json").read_text())["sampling"]["temperature"] == 0.5
    assert teacher_cli.main(["--config", str(config), "--bogus", "1"]) == 2
    assert "unknown option(s): --bogus 1" in capsys.readouterr().err
    assert teacher_cli.main(["--data", str(tmp_path / "nope"), "--out", str(tmp_path / "b")]) == 1
    assert teacher_cli.main(["--config", str(config), "--k", "0"]) == 2


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.timeout(300)
def test_smollm2_gguf_through_local_vllm(liveshop_small):
    """Real pretrained LLM end to end: GGUF -> cached HF dir -> vllm.LLM teacher on 2 LiveShop prompts.

    About 30 s to convert on first use, 30-90 s to start the engine on 2 shared cores."""
    pytest.importorskip("vllm")
    from livethink.models.smollm2 import SmolLM2NotAvailable, ensure_smollm2

    try:
        model_dir = ensure_smollm2()
    except SmolLM2NotAvailable as exc:
        pytest.skip(str(exc))
    teacher = make_teacher({"type": "vllm", "model": str(model_dir), "max_model_len": 2048})
    try:
        tasks = liveshop_small.tasks["train"][:2]
        results = list(teacher.generate(tasks, 2, SamplingConfig(temperature=0.7, max_tokens=48, seed=0)))
    finally:
        teacher.close()
    samples = [s for r in results for s in r]
    assert [(s.task_id, s.sample_index) for s in samples] == [(t.id, i) for t in tasks for i in range(2)]
    assert all(s.meta["prompt_tokens"] > 100 and 1 <= s.meta["completion_tokens"] <= 48 for s in samples)
    assert any(s.ok and len(s.reply.split()) >= 3 for s in samples)  # real English text came back


def test_teacher_settings_owners_are_the_backends_options():
    """TeacherSettings' per-backend fields are exactly the options each backend's config takes."""
    from dataclasses import fields

    from livethink.rft_distill.teachers.openai_compat import OpenAITeacherConfig
    from livethink.rft_distill.teachers.settings import OWNERS, TeacherSettings
    from livethink.rft_distill.teachers.transformers_local import TransformersTeacherConfig
    from livethink.rft_distill.teachers.vllm_local import VLLMTeacherConfig

    for kind, cls in (("openai", OpenAITeacherConfig), ("vllm", VLLMTeacherConfig),
                      ("transformers", TransformersTeacherConfig)):
        assert set(OWNERS[kind]) == {f.name for f in fields(cls)} - {"name"}, kind
    assert set(TeacherSettings.backend_fields()) == {n for names in OWNERS.values() for n in names}
