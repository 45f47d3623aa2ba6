"""``qkdb sniff`` on the CPU in every compute dtype and with every host-side path, and its device refusals.

The GPU paths differ from the CPU's in two places only (ingest/capture/devices.py): the rows stay on
the device during a text and the host does its work while the next text runs (``deferred``, which
these tests force on the CPU), and the copies are CUDA's. Both compute dtypes a GPU uses
(bfloat16, float16) run here on the CPU: the capture must establish the same RoPE, snap to the same
``inv_freq``, and store the rows the model computed in that dtype. Tests that need a GPU are in
test_sniff_gpu.py (marker ``gpu``).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.sniff

from helpers import tiny_models as tm  # noqa: E402

from qkdb.errors import EXIT_CODES, SniffError  # noqa: E402

N_TEXTS, MAX_LENGTH, PER_FILE = 2, 64, 40
LAYOUT = ("rope", "rope_pairing", "rotary_dims", "rotary_offset", "nope_layers", "attention_scale",
          "rope_attention_factor")


def _sniff(folder, corpus, out, **kw):
    return tm.sniff_family(folder, corpus, out, **{"n_texts": N_TEXTS, "max_length": MAX_LENGTH, "vectors_per_head": PER_FILE, **kw})


def _vectors(out) -> dict:
    return tm.stored_vectors(out)


@pytest.mark.parametrize("family, dtype", [
    ("llama", "bfloat16"), ("llama", "float16"), ("qwen2", "bfloat16"), ("gpt_neox", "bfloat16"),
    ("gptj", "bfloat16"), ("deepseek_v3", "bfloat16"), ("gemma2", "bfloat16"),
])
def test_half_precision_captures_record_the_same_rope_and_the_models_rows(family, dtype, model_of, family_corpus,
                                                                           tmp_path):
    folder = model_of(family)
    half = _sniff(folder, family_corpus, tmp_path / "half", model_dtype=dtype)
    full = _sniff(folder, family_corpus, tmp_path / "full", model_dtype="float32")
    a, b = half.metadata, full.metadata
    assert {k: a[k] for k in LAYOUT} == {k: b[k] for k in LAYOUT}
    assert a["capture"]["device"]["model_dtype"] == dtype and b["capture"]["device"]["model_dtype"] == "float32"
    assert a["capture"]["check"]["tolerance"] == {"bfloat16": 3e-2, "float16": 5e-3}[dtype]
    assert 0 < a["capture"]["check"]["max_relative_difference"] < a["capture"]["check"]["tolerance"]
    # snapped to the model's own buffer or, without one (GPT-J), to the config's base, which explains the
    # half-precision cos/sin: exactly the float32 capture's frequencies, in every dtype (issue 37)
    source = a["capture"]["rope"]["frequencies_from"]
    assert source == b["capture"]["rope"]["frequencies_from"]
    assert source.endswith("inv_freq") or (family == "gptj" and source.startswith("transformers' default rope_theta"))
    assert a["rope_inv_freq"] == b["rope_inv_freq"] and "frequencies_error" not in a["capture"]["rope"]
    if family == "gptj":
        np.testing.assert_allclose(a["rope_inv_freq"], tm.gptj_frequencies(8), rtol=1.2e-7)  # float32's rounding
    # the stored rows are exactly what attention received in that dtype: caught here by an attention
    # function of the test's own, on the model run by transformers alone
    seen = tm.attention_inputs(folder, tm.windows(folder, family_corpus, N_TEXTS, MAX_LENGTH), dtype,
                             eager=family == "gemma2")
    stored = _vectors(half.out)
    for (layer, head, kind), data in stored.items():
        for ex in range(N_TEXTS):
            rows = data.example_id == ex
            want = seen[ex][layer][kind][head][data.positions[rows].astype(int)]
            assert np.array_equal(data.vectors[rows], want), (layer, head, kind, ex)
    # and the float32 capture's rows agree with them to the half dtype's rounding, grown over 3 layers
    want32 = _vectors(full.out)
    for f, data in stored.items():
        scale = np.max(np.abs(want32[f].vectors))
        assert np.max(np.abs(data.vectors - want32[f].vectors)) / scale < (0.1 if dtype == "bfloat16" else 0.02), f


def test_frequencies_the_config_does_not_explain_come_from_float32_cos_sin_in_a_half_precision_capture(
        model_of, family_corpus, tmp_path, monkeypatch):
    # GPT-J's rotary code with a base its config does not say (1,234 instead of the default 10,000): no
    # buffer, no config explains it; bfloat16 cos/sin give the frequencies to ~1e-4, the rotary module run
    # again in float32 to float32's precision
    import transformers.models.gptj.modeling_gptj as gptj

    def sinusoids(num_pos, dim):
        import torch

        inv_freq = 1.0 / (1234.0 ** (torch.arange(0, dim, 2, dtype=torch.int64) / dim))
        angle = torch.arange(num_pos, dtype=torch.int64).float()[:, None] * inv_freq
        return torch.cat((torch.sin(angle), torch.cos(angle)), dim=1)

    monkeypatch.setattr(gptj, "create_sinusoidal_positions", sinusoids)
    truth = 1234.0 ** (-np.arange(0, 8, 2) / 8)
    for dtype in ("bfloat16", "float32"):
        meta = _sniff(model_of("gptj"), family_corpus, tmp_path / dtype, model_dtype=dtype).metadata
        rope = meta["capture"]["rope"]
        np.testing.assert_allclose(meta["rope_inv_freq"], truth, rtol=1e-6)
        assert "frequencies_error" not in rope
        if dtype == "bfloat16":
            assert rope["frequencies_from"].startswith("transformer.rotary_emb recomputed in float32")
        else:  # float32 cos/sin are the float32 computation itself
            assert rope["frequencies_from"].startswith("the cos/sin given to attention")


def test_a_half_precision_capture_still_refuses_what_is_not_rope(model_of, family_corpus, tmp_path, monkeypatch):
    # a constant added to the queries after RoPE: far beyond bfloat16's rounding
    tm.unknown_transform(monkeypatch)
    with pytest.raises(SniffError, match=r"attention receives vectors that differ from every rotation"):
        _sniff(model_of("llama"), family_corpus, tmp_path / "out", model_dtype="bfloat16")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".*"))  # nothing half-written


@pytest.mark.parametrize("family, kw", [("ministral3", {}), ("gemma3", {"pre_rope": True}),
                                        ("deepseek_v2", {"pre_rope": True, "dtype": "float16"})])
def test_the_deferred_host_side_stores_the_same_dataset(family, kw, model_of, family_corpus, tmp_path):
    # what an accelerator does (rows kept until the text ends, the host side in a thread of its own)
    # gives, on the CPU, the very dataset of the layer-by-layer path
    now = _sniff(model_of(family), family_corpus, tmp_path / "now", **kw)
    later = _sniff(model_of(family), family_corpus, tmp_path / "later", deferred=True, **kw)
    a, b = _vectors(now.out), _vectors(later.out)
    assert a.keys() == b.keys()
    for f in a:
        assert np.array_equal(a[f].vectors, b[f].vectors) and np.array_equal(a[f].positions, b[f].positions)
    # and the queries' normalisers, which the deferred side copies to the host after the text
    import pyarrow.parquet as pq

    from qkdb.ingest.sources.layout import discover

    lse = [{k: pq.read_table(hf.path, columns=["lse"]).column("lse").to_numpy() for k, hf in discover(o).queries.items()}
           for o in (now.out, later.out)]
    assert lse[0].keys() == lse[1].keys() and all(np.array_equal(lse[0][k], lse[1][k]) for k in lse[0])
    assert all(np.isfinite(v).all() for v in lse[0].values())
    assert now.metadata == later.metadata


def test_the_check_sample_is_seeded_recorded_and_covers_the_first_text(model_of, family_corpus, tmp_path):
    sample = _sniff(model_of("llama"), family_corpus, tmp_path / "sample", check_rows=5, n_texts=3)
    every = _sniff(model_of("llama"), family_corpus, tmp_path / "every", check_rows=None, n_texts=3)
    files = len(_vectors(sample.out))
    per_text = [14, 13, 13]  # 40 rows split over 3 texts
    cs, ce = sample.metadata["capture"]["check"], every.metadata["capture"]["check"]
    assert cs["rows_per_head_and_text"] == 5 and ce["rows_per_head_and_text"] is None
    assert cs["rows_checked"] == files * (per_text[0] + 5 + 5)  # the first text in full, then 5 per file
    assert ce["rows_checked"] == files * sum(per_text)
    assert "default_rng([seed, text, layer, head, kind" in cs["rows"]
    # both at float32 rounding; a chunk's difference is relative to its own largest value, so the sample's
    # (5 rows of a text) can read a little above the every-row check's (all of them): no order between them
    assert 0 < cs["max_relative_difference"] < 1e-6 and 0 < ce["max_relative_difference"] < 1e-6
    # the rows stored do not depend on how many are checked
    a, b = _vectors(sample.out), _vectors(every.out)
    assert all(np.array_equal(a[f].vectors, b[f].vectors) for f in a)


def test_eager_attention_gives_the_sdpa_rows_and_is_recorded(model_of, family_corpus, tmp_path):
    eager = _sniff(model_of("llama"), family_corpus, tmp_path / "eager", attn="eager")
    sdpa = _sniff(model_of("llama"), family_corpus, tmp_path / "sdpa", attn="sdpa")
    assert eager.metadata["capture"]["attention"] == {"implementation": "eager (modeling_llama)", "why": "--attn eager",
                                                      "asked": "eager"}
    assert sdpa.metadata["capture"]["attention"] == {"implementation": "sdpa", "asked": "sdpa"}
    a, b = _vectors(eager.out), _vectors(sdpa.out)
    for f in a:  # layer 0 identical; later layers through a differently rounded attention
        np.testing.assert_allclose(a[f].vectors, b[f].vectors, rtol=1e-4, atol=1e-5)


def test_the_device_is_recorded(model_of, family_corpus, tmp_path):
    meta = _sniff(model_of("llama"), family_corpus, tmp_path / "out", device="cpu").metadata
    assert meta["capture"]["device"] == {"asked": "cpu", "device": "cpu", "model_dtype": "float32", "device_map": None}
    assert meta["capture"]["accelerate_version"]


def test_devices_and_dtypes_that_cannot_run_are_refused_in_one_line(model_of, family_corpus, tmp_path, runner):
    import torch

    from qkdb.cli.app import app
    import qkdb.cli.sniff  # noqa: F401

    folder = model_of("llama")
    cases = [
        (["--device", "tpu"], "usage", "--device 'tpu': unknown device; expected auto, cpu, cuda, cuda:N or mps"),
        (["--device", "cpu:1"], "usage", "unknown device"),
        (["--device", "cpu", "--device-map", "auto"], "usage", "--device-map auto spreads a model over GPUs"),
        (["--device", "cpu", "--attn", "flash_attention_2"], "usage", "flash_attention_2 runs on CUDA GPUs, not on cpu"),
        (["--check-rows", "0"], "usage", "--check-rows must be positive"),
    ]
    if not torch.cuda.is_available():
        cases += [(["--device", "cuda"], "system", "--device cuda: "),
                  (["--device", "cuda:3"], "system", "--device cuda:3: ")]
    if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        cases.append((["--device", "mps"], "system", "--device mps: MPS (Apple GPU) is not available here"))
    for extra, kind, message in cases:
        out = tmp_path / "out"
        r = runner.invoke(app, ["sniff", "--model-path", str(folder), "--out", str(out), "--text", str(family_corpus),
                                "--texts", "1", "--max-length", "64", "-q", *extra])
        assert r.exit_code == EXIT_CODES[kind], (extra, r.output)
        assert message in r.output and len(r.output.strip().splitlines()) == 1, (extra, r.output)
        assert not out.exists() and not list(tmp_path.glob(".out*"))
    # sdpa cannot softcap: asked for it on Gemma-2, the capture refuses rather than drop the softcap
    with pytest.raises(SniffError, match=r"--attn sdpa: the model softcaps its attention logits"):
        _sniff(model_of("gemma2"), family_corpus, tmp_path / "g", attn="sdpa")


def test_the_dtype_probe_refuses_a_dtype_the_device_cannot_compute_in():
    import torch

    from qkdb.ingest.capture import devices

    # a dtype torch cannot run attention in on this CPU: the probe's one line, not a failing forward pass
    dev = devices.Device(torch, "cpu", "cpu", "int8")  # (no device computes attention in int8)
    with pytest.raises(SniffError, match=r"--model-dtype int8: cpu cannot compute in it"):
        devices.probe(dev)
    for name in ("bfloat16", "float16", "float32"):
        devices.probe(devices.Device(torch, "cpu", "cpu", name))  # all three run on a CPU
