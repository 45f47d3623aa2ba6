"""How ``qkdb sniff`` reads a layer's cos/sin and rotations, on hand-made position embeddings.

The families test (``test_sniff_families.py``) runs every layout through real models; here each
form of position embeddings transformers' models pass is built from its definition, and the
forms that are not a rotation by position × frequency must be refused rather than recorded.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.sniff

from helpers.rope import apply_rope  # noqa: E402

from qkdb.ingest.capture.rope_layout import NO_ROTATION, NotRoPE, Rotation, candidates, read_cos_sin  # noqa: E402

SEQ = 200
OMEGA = 1.0 / (10000.0 ** (np.arange(0, 8, 2) / 8))  # 4 planes
KEPT = np.array([0, 3, 17, 64, 150, 199])


def _angles(omega=OMEGA):
    return torch.arange(SEQ, dtype=torch.float32)[:, None] * torch.as_tensor(omega, dtype=torch.float32)


@pytest.mark.parametrize("form, layout, swapped", [
    ("cat", "cat", False), ("repeat", "repeat", False), ("planes_sin_first", "planes", True), ("complex", "complex", False)])
def test_every_form_gives_the_frequencies_and_the_per_plane_cos_sin(form, layout, swapped):
    f = _angles()
    amplitude = 1.25
    if form == "cat":
        e = torch.cat([f, f], dim=-1)[None]
        pe = (e.cos() * amplitude, e.sin() * amplitude)
    elif form == "repeat":
        e = torch.repeat_interleave(f, 2, dim=-1)[None]
        pe = (e.cos() * amplitude, e.sin() * amplitude)
    elif form == "planes_sin_first":  # GPT-J: (sin, cos), one column per plane
        pe = (f.sin()[None] * amplitude, f.cos()[None] * amplitude)
    else:  # DeepSeek-V2: one complex tensor
        pe = torch.polar(torch.ones_like(f), f)[None] * amplitude
    cs = read_cos_sin(pe, KEPT, SEQ)
    assert (cs.layout, cs.swapped, cs.dims) == (layout, swapped, 8)
    np.testing.assert_allclose(cs.omega, OMEGA.astype(np.float32), rtol=2e-7)
    assert cs.amplitude == pytest.approx(amplitude, rel=1e-7)
    np.testing.assert_allclose(cs.cos, np.cos(np.outer(KEPT, OMEGA)) * amplitude, atol=1e-5)
    np.testing.assert_allclose(cs.sin, np.sin(np.outer(KEPT, OMEGA)) * amplitude, atol=1e-5)


def test_position_embeddings_that_are_not_a_rotation_are_refused():
    f = _angles()
    e = torch.cat([f, f], dim=-1)[None]
    with pytest.raises(NotRoPE, match="amplitude varies with position"):
        grow = 1.0 + torch.arange(SEQ, dtype=torch.float32)[None, :, None] / SEQ
        read_cos_sin((e.cos() * grow, e.sin() * grow), KEPT, SEQ)
    with pytest.raises(NotRoPE, match="angle at position \\d+ is not position × frequency"):
        bent = torch.cat([f, f], dim=-1) + 1e-3 * torch.arange(SEQ, dtype=torch.float32)[:, None] ** 2 / SEQ
        read_cos_sin((bent.cos()[None], bent.sin()[None]), KEPT, SEQ)
    with pytest.raises(NotRoPE, match="not cos/sin of angle 0 at position 0"):
        read_cos_sin((e.sin(), e.sin()), KEPT, SEQ)
    with pytest.raises(NotRoPE, match="shape"):
        read_cos_sin((e.cos()[:, :10], e.sin()[:, :10]), KEPT, SEQ)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_a_rotation_is_rope_and_undoes_itself(pairing):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(len(KEPT), 8))
    cos, sin = np.cos(np.outer(KEPT, OMEGA)), np.sin(np.outer(KEPT, OMEGA))
    rot = Rotation(pairing, 8, 0)
    y = rot.apply(x, 1.3 * cos, 1.3 * sin)
    np.testing.assert_allclose(y / 1.3, apply_rope(x, KEPT, OMEGA, pairing), atol=1e-12)
    np.testing.assert_allclose(rot.undo(y, 1.3 * cos, 1.3 * sin), x, atol=1e-12)


def test_a_partial_slice_at_the_end_leaves_the_rest_alone_and_deinterleaving_reorders_it():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(len(KEPT), 12))
    cos, sin = np.cos(np.outer(KEPT, OMEGA)), np.sin(np.outer(KEPT, OMEGA))
    y = Rotation("interleaved", 8, 4).apply(x, cos, sin)
    np.testing.assert_array_equal(y[:, :4], x[:, :4])
    np.testing.assert_allclose(y[:, 4:], apply_rope(x[:, 4:], KEPT, OMEGA, "interleaved"), atol=1e-12)
    deint = Rotation("half", 8, 4, deinterleave=True)
    z = deint.apply(x, cos, sin)
    reordered = np.concatenate([x[:, 4:][:, 0::2], x[:, 4:][:, 1::2]], axis=1)
    np.testing.assert_allclose(z[:, 4:], apply_rope(reordered, KEPT, OMEGA, "half"), atol=1e-12)
    np.testing.assert_allclose(deint.undo(z, cos, sin)[:, 4:], reordered, atol=1e-12)


def test_candidates_and_plane_equivalence():
    layouts = candidates(16, 4)
    assert layouts[0] == NO_ROTATION and {(r.pairing, r.offset, r.deinterleave) for r in layouts[1:]} == {
        (p, o, d) for o in (0, 12) for p, d in (("half", False), ("interleaved", False), ("half", True))}
    assert len(candidates(8, 8)) == 4  # no second offset when the whole head turns
    # with one plane, half and interleaved pairs are the same coordinates
    assert Rotation("half", 2, 6).same_planes(Rotation("interleaved", 2, 6))
    assert not Rotation("half", 4, 0).same_planes(Rotation("interleaved", 4, 0))
