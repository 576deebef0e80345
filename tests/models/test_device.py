"""Device handling that can be checked without a GPU: pure stage-2 math keeps its input's device (the meta device
stands in for CUDA: mixing it with a CPU tensor fails the way CUDA does), and the eval engine's device/dtype
options. The GPU itself is exercised by tests/models/test_cuda.py."""

from __future__ import annotations

import pytest
import torch

from livethink.length_rl import advantages, dot, length_rewards


def test_group_of_one_std_is_on_the_input_device():
    lengths = torch.tensor([3.0, 5.0, 7.0], device="meta")
    assert dot.truncation_thresholds(lengths, 1).device.type == "meta"
    mean, std = advantages.group_stats(lengths, 1)
    assert mean.device.type == std.device.type == "meta"
    assert advantages.grpo_advantages(lengths, 1).device.type == "meta"


def test_group_of_one_values_unchanged():
    lengths = torch.tensor([3, 5, 7])
    assert dot.truncation_thresholds(lengths, 1).tolist() == [3, 5, 7]
    assert advantages.group_stats(lengths.float(), 1)[1].tolist() == [0.0, 0.0, 0.0]


def test_band_returns_float32_like_its_input():
    r = length_rewards.band(torch.tensor([10, 40]), 40.0)
    assert r.dtype == torch.float32 and r.device == torch.device("cpu")


def test_resolve_device(monkeypatch):
    from livethink.models.loading import resolve_device

    assert resolve_device("cpu") == "cpu"
    assert resolve_device("cuda:1") == "cuda:1"
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device("cuda"))
    assert resolve_device("auto") == "cuda"


@pytest.fixture(scope="module")
def student_dir(small_student_dir):
    return small_student_dir


def test_transformers_generator_device_and_dtype(student_dir, liveshop_small):
    from livethink.eval.generation import TransformersGenerator

    generator = TransformersGenerator(student_dir, batch_size=2, device="cpu", dtype="bfloat16")
    assert generator.device == torch.device("cpu")
    assert generator.model.dtype == torch.bfloat16 and generator.model.device.type == "cpu"
    generations = generator.generate(liveshop_small.tasks["test"][:2], max_tokens=3)
    assert len(generations) == 2
    with pytest.raises(ValueError, match="dtype must be one of"):
        TransformersGenerator(student_dir, dtype="int8")
