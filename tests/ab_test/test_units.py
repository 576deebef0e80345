"""The randomisation unit: an experiment randomised by stream (room) or session hashes that id, logs it with the
exposure, counts units in SRM and tests viewer-level metrics with cluster-robust variance."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import statsmodels.api as sm

from livethink.ab_test.analysis import analyze
from livethink.ab_test.errors import ExperimentConfigError
from livethink.ab_test.experiment import parse_experiment
from livethink.ab_test.hooks import open_hooks
from livethink.ab_test.stats import cluster_ztest
from livethink.serve.telemetry.ab_hooks import ABTestHooks

EXP = parse_experiment({"name": "rooms", "unit": "stream", "min_viewers_per_arm": 1,
                        "arms": [{"name": "A", "weight": 0.5}, {"name": "B", "weight": 0.5}]})  # fmt: skip


def test_cluster_ztest_equals_statsmodels_cluster_robust_ols() -> None:
    rng = np.random.default_rng(7)
    g = rng.integers(0, 80, 4000)
    treated = (g % 2).astype(float)
    y = (rng.random(4000) < 0.1 + 0.05 * rng.random(80)[g] + 0.02 * treated).astype(float)
    res = cluster_ztest(y[treated == 0], g[treated == 0], y[treated == 1], g[treated == 1])
    fit = sm.OLS(y, sm.add_constant(treated)).fit(cov_type="cluster", cov_kwds={"groups": g})
    assert res.diff == pytest.approx(fit.params[1], abs=1e-12)
    assert res.p_value == pytest.approx(fit.pvalues[1], abs=1e-9)
    assert res.ci[0] == pytest.approx(fit.conf_int()[1][0], abs=1e-9)
    assert (res.ci[1] - res.diff) / 1.959963984540054 == pytest.approx(fit.bse[1], abs=1e-9)


def test_units_hash_log_count_and_cluster(tmp_path: Path) -> None:
    hooks = ABTestHooks(open_hooks([EXP], tmp_path / "rooms.db"))
    try:
        assert hooks.assign("v1").experiment is None  # no stream id: not randomised by the wrong unit
        rooms = {f"room-{r}": hooks.assign(f"v-{r}-0", stream_id=f"room-{r}").arm for r in range(40)}
        assert set(rooms.values()) == {"A", "B"}
        for r in range(40):
            for k in range(5):  # everyone in a room gets the room's arm
                vid = f"v-{r}-{k}"
                c = hooks.assign(vid, stream_id=f"room-{r}")
                assert c.arm == rooms[f"room-{r}"] and c.unit_id == f"room-{r}"
                hooks.on_exposure(vid, c, f"q-{r}-{k}")
                if r % 3 == 0:  # a room-level effect: every viewer of one room in three orders
                    body = {"event_id": f"o-{vid}", "viewer_id": vid, "experiment": "rooms", "type": "click"}
                    hooks.experiments["rooms"].on_outcome(body).result(10)
        hooks.experiments.writer.flush()
        store = hooks.experiments.store
        assert {u for (u,) in store.fetch("rooms", "exposure", ["unit_id"])} == set(rooms)
        s = analyze(store, "rooms").summary
        assert s["unit"] == "stream"
        n_a = sum(a == "A" for a in rooms.values())
        assert s["arms"]["A"]["units"] == n_a and s["arms"]["A"]["viewers"] == 5 * n_a
        assert s["srm"]["observed"] == [n_a, 40 - n_a]  # SRM counts rooms, not viewers
        click = next(c for c in s["comparisons"] if c["metric"] == "click_rate")
        assert click["test"] == "cluster-z"
    finally:
        hooks.close()


def test_unit_is_validated() -> None:
    with pytest.raises(ExperimentConfigError, match="unit"):
        parse_experiment({**EXP.to_dict(), "unit": "household"})
    assert "unit" not in parse_experiment({**EXP.to_dict(), "unit": "viewer"}).to_dict()  # old digests kept
