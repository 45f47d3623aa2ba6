"""rope.low_band's verdict against planted truth (SPEC §4.8): the simulator's rings put the logits' energy in
named planes, so which side of 1 each model's low-band excess lies on is known before the ingest."""

from __future__ import annotations

import pytest

import qkdb
from qkdb.ingest.capture.simulate import HeadParams, simulate

LAYERS, Q_HEADS, KV_HEADS, D = 3, 4, 2, 32
# θ = 10⁴ over 4,096 positions: planes 12-15 never finish a turn (the critical plane is 12)
LOW, HIGH = (13, 15), (2, 5)


def _finding(tmp_path, planes) -> dict:
    params = HeadParams(mu_q_a=0.0, mu_k_a=0.0, alpha_q=0.0, alpha_k=0.0, sep=0.0, noise=0.3, ring_planes=planes,
                        ring_radius=4.0, phase_q=0.0, phase_k=0.0, phase_jitter=0.1)
    overrides = {(layer, head): params for layer in range(LAYERS) for head in range(Q_HEADS)}
    name = f"planted-{planes[0]}"
    ds = simulate(tmp_path / name, layers=LAYERS, q_heads=Q_HEADS, kv_heads=KV_HEADS, head_dim=D, vectors=600,
                  max_position=4096, model=name, seed=3, workers=1, overrides=overrides)
    home = tmp_path / "home"
    qkdb.api.ingest(ds, name, workers=1, home=home, plasticity=False)
    with qkdb.connect(home) as con:
        (row,) = [dict(zip([c[0] for c in cur.description], r)) for cur in [con.execute(
            "select * from findings where id = 'rope.low_band'")] for r in cur.fetchall()]
        crit = con.execute("select distinct critical_plane from frequency_usage").fetchall()
    assert crit == [(12,)]
    return row


@pytest.mark.parametrize("planes,status", [(LOW, "holds"), (HIGH, "does not hold")], ids=["low band", "high band"])
def test_the_verdict_follows_where_the_energy_was_planted(tmp_path, planes, status):
    row = _finding(tmp_path, planes)
    assert row["status"] == status, row
    if status == "holds":  # nearly all of |q·k| in 4 planes of 16: an excess near 16/4
        assert 3.0 < row["ci_low"] <= row["measured_value"] <= row["ci_high"] < 4.0
    else:  # the low band carries only the noise's share
        assert row["ci_high"] < 0.5
    assert row["n_models"] == 1 and row["n_heads"] == LAYERS * Q_HEADS
