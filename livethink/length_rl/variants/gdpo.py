"""``gdpo``: our multi-objective reward (C, H, the band reward r_len) with GDPO's per-reward normalisation
(arXiv 2601.05242): TRL's ``multi_objective_aggregation="normalize_then_sum"`` normalises each column within its
group before the weighted sum, so no column drowns the others (``advantages.normalize_then_sum``). Uses the band
variant's options (``w_length``, ``band_*``, ``length_gate``)."""

from __future__ import annotations

from livethink.length_rl.registry import register_variant
from livethink.length_rl.variants.band import Band


@register_variant("gdpo")
class Gdpo(Band):
    summary = "GDPO: C, H and the band reward normalised per column within the group, then summed (TRL normalize_then_sum)"
    trl_settings = {"multi_objective_aggregation": "normalize_then_sum"}
