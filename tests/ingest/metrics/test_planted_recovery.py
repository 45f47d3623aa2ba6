"""Metrics recover what the simulator planted: drift axis, bias sign, slope ratio, Q/K separation."""

from __future__ import annotations

import json

import numpy as np
import pytest

import qkdb
from qkdb.ingest.sources.layout import read_head
from qkdb.ingest.metrics.moments import moments
from qkdb.ingest.metrics.rotation import planar_rotation
from qkdb.ingest.capture.simulate import HeadParams, simulate

OVERRIDES = {
    (0, 0): HeadParams(mu_q_a=5.0, alpha_q=2e-3, alpha_k=4e-3, sep=30.0),  # recency bias, ratio 2
    (0, 1): HeadParams(mu_q_a=-3.0, alpha_q=2e-3, alpha_k=4e-3, sep=25.0),  # negative (primacy) bias
    (1, 2): HeadParams(mu_q_a=4.0, alpha_q=1e-3, alpha_k=5e-3, sep=40.0),  # keys drift 5x faster
}


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("sim") / "ds"
    simulate(root, layers=2, q_heads=4, kv_heads=2, head_dim=32, vectors=6000, rope_theta=10000.0,
             max_position=4096, seed=11, overrides=OVERRIDES, workers=1)
    return root, json.loads((root / "planted.json").read_text())


def _head(planted_json, layer, head):
    heads = planted_json["heads"] if "heads" in planted_json else planted_json
    return heads[f"l{layer:02d}h{head:02d}"]


@pytest.mark.parametrize("layer,head", sorted(OVERRIDES))
def test_drift_axis_aligns_with_planted_direction(planted, layer, head):
    root, truth = planted
    p = _head(truth, layer, head)
    q = read_head(root / f"l{layer:02d}h{head:02d}q" / "data.parquet")
    k = read_head(root / f"l{layer:02d}h{head // 2:02d}k" / "data.parquet")
    rot = planar_rotation(moments(q.vectors, q.positions), moments(k.vectors, k.positions))
    assert abs(rot.a @ np.asarray(p["u"])) >= 0.99
    assert abs(rot.b @ np.asarray(p["w"])) >= 0.95  # b finds the offset direction when it dominates


def test_ingested_metrics_follow_the_planted_values(planted, home):
    root, truth = planted
    qkdb.ingest(root, "sim", workers=1)  # facts from qkdb_dataset.json: no flags
    con = qkdb.connect()
    try:
        rows = {
            (r[0], r[1]): r[2:]
            for r in con.execute(
                "select layer, head, bias_strength, alpha_q, alpha_k, mu_q_a, qk_accuracy_pc01, fisher_pc0, "
                "residual_pos_r from head_metrics where model = 'sim'"
            ).fetchall()
        }
    finally:
        con.close()
    assert len(rows) == 8
    for (layer, head), params in OVERRIDES.items():
        bias, alpha_q, alpha_k, mu_q_a, acc, fisher, resid = rows[(layer, head)]
        assert np.sign(bias) == np.sign(params.mu_q_a * params.alpha_k)
        assert abs(alpha_k) / abs(alpha_q) == pytest.approx(params.alpha_k / params.alpha_q, rel=0.05)
        assert mu_q_a == pytest.approx(params.mu_q_a, abs=0.3)
        assert bias == pytest.approx(params.mu_q_a * params.alpha_k, rel=0.1)
        # a 25–40 unit offset against unit noise: PC0 separates Q from K
        assert acc >= 0.99 and fisher > 10
        assert resid <= 1e-10
    for (layer, head), r in rows.items():
        p = _head(truth, layer, head)
        assert np.sign(r[0]) == np.sign(p["mu_q_a"] * p["alpha_k"])
