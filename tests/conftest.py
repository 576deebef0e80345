"""Shared fixtures. Tests run offline (no model hub) on CPU."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

import pytest  # noqa: E402

from livethink.data.liveshop.generate import generate  # noqa: E402


@pytest.fixture(scope="session")
def liveshop_small():
    """A small deterministic LiveShop draw shared by tests."""
    return generate(seed=7, n_train=300, n_validation=30, n_test=60)
