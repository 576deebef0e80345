"""Every use of TRL's private API in ``livethink.length_rl`` goes through ``trl_compat``, which names the TRL version
it was written against."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import transformers
import trl

from livethink.length_rl import trl_compat

PACKAGE = Path(__file__).resolve().parents[2] / "livethink" / "length_rl"


def trl_private_names() -> set[str]:
    """Private names TRL (and the transformers ``Trainer`` it extends) defines or reads: ``self._x``, ``def _x``,
    ``class _X`` and module-level ``_x =`` in their sources."""
    sources = [*Path(trl.__file__).parent.rglob("*.py"), Path(transformers.__file__).parent / "trainer.py"]
    names: set[str] = set()
    for path in sources:
        text = path.read_text(encoding="utf-8")
        names |= set(re.findall(r"\bself\.(_[A-Za-z]\w*)", text))
        names |= set(re.findall(r"^\s*(?:def|class)\s+(_[A-Za-z]\w*)", text, re.M))
        names |= set(re.findall(r"^(_[A-Za-z]\w*)\s*=", text, re.M))
    return names


def test_trl_private_names_are_used_in_trl_compat_only():
    private = trl_private_names()
    assert {"_generate_and_score_completions", "_calculate_rewards", "_compute_loss", "_prepare_inputs", "_metrics",
            "_iter_named_params", "_SoftOverlongPunishment"} <= private  # the scan sees TRL's privates
    compat_uses = set(re.findall(r"\.(_[A-Za-z]\w*)", (PACKAGE / "trl_compat.py").read_text())) & private
    assert {"_generate_and_score_completions", "_calculate_rewards", "_compute_loss", "_metrics",
            "_get_per_token_logps_and_entropies", "_iter_named_params"} <= compat_uses
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "trl_compat.py":
            continue
        text = path.read_text(encoding="utf-8")
        used = set(re.findall(r"\.(_[A-Za-z]\w*)\b", text)) | set(re.findall(r"^\s*def\s+(_[A-Za-z]\w*)", text, re.M))
        used |= set(re.findall(r"import[^\n]*\b(_[A-Za-z]\w*)", text))
        offenders += [f"{path.relative_to(PACKAGE)}: {name}" for name in sorted(used & private)]
    assert offenders == [], "TRL private names outside trl_compat.py (move them there):\n" + "\n".join(offenders)


def test_trl_version_check():
    assert trl.__version__ == trl_compat.TRL_VERSION  # the venv is pinned to the version trl_compat was written for
    assert trl_compat.check_trl_version(trl_compat.TRL_VERSION) is True
    with pytest.warns(UserWarning, match=r"written against trl 1\.16\.0, found trl 9\.9\.9[\s\S]*_prepare_inputs"):
        assert trl_compat.check_trl_version("9.9.9", strict=False) is False
    with pytest.raises(RuntimeError, match="re-check in TRL's source"):
        trl_compat.check_trl_version("9.9.9", strict=True)
