"""``qkdb sniff`` on a CUDA GPU: what only a GPU can show (marker ``gpu``; .ci/run selects it where torch sees one).

The CPU tests (test_sniff_devices.py) run every compute dtype and the deferred host side; these run
the CUDA branches of ingest/capture/devices.py — rows kept on the GPU during a text, copied into
pinned host memory behind its kernels, the host side on another thread while the next text runs —
and check that what is stored is, bit for bit, what attention received on the GPU, that the device's
own peak memory stays the forward pass's, and flash attention and accelerate's device map where
they are there.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = [pytest.mark.sniff, pytest.mark.gpu]

from helpers import tiny_models as tm  # noqa: E402


N_TEXTS, MAX_LENGTH, PER_FILE = 3, 64, 48
LAYOUT = ("rope", "rope_pairing", "rotary_dims", "rotary_offset", "nope_layers", "rope_inv_freq", "attention_scale")


# `pytest -m ""` selects every marker: on a machine without CUDA these are skipped (before any fixture
# runs), as the browser tests are without chromium; .ci/run selects them only where torch sees a GPU
# and sets QKDB_REQUIRE_GPU=1 there, so that a GPU it cannot use fails.
if not torch.cuda.is_available():
    if os.environ.get("QKDB_REQUIRE_GPU") == "1":
        pytest.fail("QKDB_REQUIRE_GPU=1 but torch sees no CUDA device", pytrace=False)
    pytest.skip("no CUDA device: the gpu tests run where torch sees one (.ci/run selects them there)",
                allow_module_level=True)


def _sniff(folder, corpus, out, **kw):
    return tm.sniff_family(folder, corpus, out, **{"n_texts": N_TEXTS, "max_length": MAX_LENGTH, "vectors_per_head": PER_FILE,
                                                   "device": "cuda", **kw})


def _vectors(out) -> dict:
    return tm.stored_vectors(out)


@pytest.mark.parametrize("family, dtype", [("llama", "bfloat16"), ("llama", "float32"), ("gpt_neox", "bfloat16"),
                                           ("deepseek_v3", "bfloat16"), ("gemma2", "float16")])
def test_what_is_stored_is_what_attention_received_on_the_gpu(family, dtype, model_of, family_corpus, tmp_path):
    folder = model_of(family)
    result = _sniff(folder, family_corpus, tmp_path / "gpu", model_dtype=dtype)
    meta = result.metadata
    assert meta["capture"]["device"]["device"] == "cuda:0" and meta["capture"]["device"]["model_dtype"] == dtype
    assert meta["capture"]["device"]["gpu"] and meta["capture"]["device"]["cuda_version"]
    seen = tm.attention_inputs(folder, tm.windows(folder, family_corpus, N_TEXTS, MAX_LENGTH), dtype,
                               eager=family == "gemma2", device="cuda")
    for (layer, head, kind), data in _vectors(result.out).items():
        for ex in range(N_TEXTS):
            rows = data.example_id == ex
            assert np.array_equal(data.vectors[rows], seen[ex][layer][kind][head][data.positions[rows].astype(int)])
    # the same RoPE as on the CPU
    cpu = _sniff(folder, family_corpus, tmp_path / "cpu", model_dtype=dtype, device="cpu").metadata
    assert {k: meta[k] for k in LAYOUT} == {k: cpu[k] for k in LAYOUT}


def test_the_device_holds_no_more_than_the_forward_pass_does(model_of, family_corpus, tmp_path):
    import transformers

    folder = model_of("llama")
    windows = tm.windows(folder, family_corpus, 2, 1024)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16,
                                                              attn_implementation="sdpa").to("cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with torch.inference_mode():
        for ids in windows:
            model(input_ids=torch.as_tensor(ids)[None].to("cuda"), use_cache=False)
    plain_peak = torch.cuda.max_memory_allocated() - base
    del model
    torch.cuda.empty_cache()
    from qkdb.ingest.capture.sniff import SniffOptions, prepare, run

    prep = prepare(SniffOptions(out=tmp_path / "out", model_path=folder, text=str(family_corpus), n_texts=2,
                                max_length=1024, q_heads=None, vectors_per_head=2048, device="cuda",
                                model_dtype="bfloat16"))
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    run(prep)
    sniff_peak = torch.cuda.max_memory_allocated() - before
    weights = sum(p.numel() * p.element_size() for p in
                  transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).parameters())
    kept = 2048 * tm.HEAD_DIM * 4 * 12  # a text's rows of every file, float32, with room
    assert sniff_peak <= weights + plain_peak + kept, (sniff_peak, weights, plain_peak)


def test_flash_attention_2_is_handed_on_to_where_it_is_installed(model_of, family_corpus, tmp_path):
    pytest.importorskip("flash_attn")
    folder = model_of("llama")
    flash = _sniff(folder, family_corpus, tmp_path / "flash", attn="flash_attention_2", model_dtype="bfloat16")
    sdpa = _sniff(folder, family_corpus, tmp_path / "sdpa", attn="sdpa", model_dtype="bfloat16")
    assert flash.metadata["capture"]["attention"]["implementation"] == "flash_attention_2"
    assert flash.metadata["capture"]["flash_attn_version"]
    a, b = _vectors(flash.out), _vectors(sdpa.out)
    for f in a:
        if f[0] == 0:  # layer 0's queries and keys come before any attention
            assert np.array_equal(a[f].vectors, b[f].vectors)
        else:
            scale = np.max(np.abs(b[f].vectors))
            assert np.max(np.abs(a[f].vectors - b[f].vectors)) / scale < 0.05


def test_a_device_map_spreads_the_model_and_is_recorded(model_of, family_corpus, tmp_path):
    pytest.importorskip("accelerate")
    folder = model_of("llama")
    result = _sniff(folder, family_corpus, tmp_path / "out", device_map="auto", model_dtype="bfloat16")
    device = result.metadata["capture"]["device"]
    assert device["device_map"] == "auto" and sum(device["placement"].values()) > 0
    plain = _sniff(folder, family_corpus, tmp_path / "plain", model_dtype="bfloat16")
    a, b = _vectors(result.out), _vectors(plain.out)
    assert all(np.array_equal(a[f].vectors, b[f].vectors) for f in a) or torch.cuda.device_count() > 1
