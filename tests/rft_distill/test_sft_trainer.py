"""StudentSFTTrainer (real TRL SFTTrainer subclass): the grounded-token loss agrees with TRL's at weight 1 and
up-weights copied facts above it; Muon is the optimizer when asked."""

from __future__ import annotations

import pytest
import torch
from trl import SFTTrainer

from livethink.models.student import StudentConfig, create_student
from livethink.models.tokenizer import corpus_from_tasks, train_tokenizer
from livethink.rft_distill.acceptance import JudgedSample
from livethink.rft_distill.config import RFTConfig
from livethink.rft_distill.muon import MuonAdamW
from livethink.rft_distill.sft import StudentSFTTrainer, sft_dataset
from livethink.rft_distill.teachers.base import SamplingConfig
from livethink.rft_distill.teachers.scripted import ScriptedTeacher
from livethink.rft_distill.token_weights import grounded_token_weights, instruction_token_ids


def tokenizer_and_dataset(liveshop, n_tasks: int):
    """A small BPE tokenizer and an SFT dataset of the scripted teacher's greedy traces for the first train tasks."""
    tasks = liveshop.tasks["train"][:n_tasks]
    tokenizer = train_tokenizer(corpus_from_tasks(liveshop.tasks["train"]), vocab_size=600)
    teacher = ScriptedTeacher(error_rate=0.0)
    selected = [JudgedSample(t.id, 0, teacher.sample(t, 0, SamplingConfig(temperature=0.0)).completion, True, True)
                for t in tasks]
    return tokenizer, sft_dataset(selected, {t.id: t for t in tasks})


@pytest.fixture(scope="module")
def trainer_and_batch(liveshop_small, tmp_path_factory):
    tokenizer, dataset = tokenizer_and_dataset(liveshop_small, 8)
    config = StudentConfig(num_hidden_layers=1, hidden_size=64, head_dim=16, moe_intermediate_size=64, num_experts=4)
    args = RFTConfig(output_dir=str(tmp_path_factory.mktemp("sft")), per_device_train_batch_size=4, use_cpu=True,
                     report_to="none", muon=True, grounded_token_weight=4.0, max_length=1024,
                     router_aux_loss_coef=0.01)
    trainer = StudentSFTTrainer(model=create_student(config, tokenizer), args=args, train_dataset=dataset,
                                processing_class=tokenizer)
    batch = next(iter(trainer.get_train_dataloader()))
    return trainer, batch


def test_grounded_loss_at_weight_one_equals_trl_loss(trainer_and_batch):
    trainer, batch = trainer_and_batch
    trainer.model.train()
    torch.manual_seed(0)
    trl_loss = SFTTrainer.compute_loss(trainer, trainer.model, dict(batch))
    ours, _ = trainer.grounded_loss(trainer.model, dict(batch), weight=1.0)
    assert ours.item() == pytest.approx(trl_loss.item(), rel=1e-4)
    assert trainer.aux_loss_enabled  # the MoE load-balancing term is part of both


def test_grounded_weight_changes_the_loss_and_is_used_in_training(trainer_and_batch):
    trainer, batch = trainer_and_batch
    trainer.model.train()
    weights = grounded_token_weights(batch["input_ids"], batch["labels"], batch["attention_mask"],
                                     instruction_token_ids(trainer.processing_class), 4.0)
    trained = batch["labels"] != -100
    assert 0 < (weights[trained] == 4.0).float().mean() < 1  # some completion tokens are copied facts, not all
    plain, _ = trainer.grounded_loss(trainer.model, dict(batch), weight=1.0)
    heavy, _ = trainer.grounded_loss(trainer.model, dict(batch), weight=4.0)
    used = trainer.compute_loss(trainer.model, dict(batch))
    assert heavy.item() != pytest.approx(plain.item(), rel=1e-6, abs=0)
    assert used.item() == pytest.approx(heavy.item(), rel=1e-6)


def test_muon_optimizer_is_created(trainer_and_batch):
    trainer, _ = trainer_and_batch
    assert isinstance(trainer.create_optimizer(), MuonAdamW)


def test_trainable_parameters_freeze_the_rest(liveshop_small, tmp_path):
    """``trainable_parameters``: one SFT step changes only the parameters the regexes name."""
    from livethink.rft_distill.sft import train_sft

    tokenizer, dataset = tokenizer_and_dataset(liveshop_small, 4)
    model = create_student(StudentConfig(num_hidden_layers=2, hidden_size=32, head_dim=16, moe_intermediate_size=32,
                                         num_experts=2, num_experts_per_tok=1), tokenizer)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    args = RFTConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=1, use_cpu=True,
                     report_to="none", save_strategy="no", max_length=1024, learning_rate=1e-2,
                     trainable_parameters=[r"layers\.1\.self_attn\."])
    trainer = train_sft(model, tokenizer, dataset, args)
    changed = {n for n, p in trainer.model.named_parameters() if not torch.equal(p.detach(), before[n])}
    assert changed and all(n.startswith("model.layers.1.self_attn.") for n in changed)
    assert "model.layers.1.self_attn.q_proj.weight" in changed


def test_resume_restores_the_moe_experts(liveshop_small, tmp_path):
    """transformers saves fused MoE experts per expert; a resumed run must get them back, not fresh ones
    (transformers#43701, worked around by ConvertedResume)."""
    tokenizer, dataset = tokenizer_and_dataset(liveshop_small, 8)
    config = StudentConfig(num_hidden_layers=1, hidden_size=64, head_dim=16, moe_intermediate_size=64, num_experts=4)

    def trainer(seed: int) -> StudentSFTTrainer:
        torch.manual_seed(seed)
        args = RFTConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, use_cpu=True, report_to="none",
                         max_steps=2, save_steps=2, max_length=1024, learning_rate=1e-2)
        return StudentSFTTrainer(model=create_student(config, tokenizer), args=args, train_dataset=dataset,
                                 processing_class=tokenizer)

    trained = trainer(0)
    trained.train()
    resumed = trainer(1)  # another initialisation: every tensor differs until the checkpoint is loaded
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))  # at max_steps already: loads, no step
    want, got = trained.model.state_dict(), resumed.model.state_dict()
    assert any("experts" in name for name in want)
    for name, tensor in want.items():
        assert torch.equal(got[name], tensor), name
