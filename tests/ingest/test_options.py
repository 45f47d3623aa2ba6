"""IngestOptions: every option of an ingest in one validated dataclass."""

from __future__ import annotations

import pytest

from qkdb.ingest import FIT_ROWS, IngestOptions
from qkdb.ingest.metrics import complement


def test_the_default_subsample_is_the_metrics_own():
    # The CLI's and the API's default and the metric functions' default must not drift apart.
    assert IngestOptions().fit_rows == FIT_ROWS == complement.MAX_FIT


@pytest.mark.parametrize("field, value, match", [
    ("n_components", 0, "n_components must be >= 1, got 0"),
    ("fit_rows", 1, "fit_rows must be >= 2"),
    ("points", -3, "points must be >= 0, got -3"),
    ("rope_pairing", "sideways", "rope_pairing must be 'half' or 'interleaved', got 'sideways'"),
    ("b_method", "svd", "b_method must be 'eig' or 'mean_diff', got 'svd'"),
    ("workers", 0, "workers must be >= 1, got 0"),
])
def test_bad_values_are_named(field, value, match):
    with pytest.raises(ValueError, match=match):
        IngestOptions(**{field: value})
    with pytest.raises(ValueError, match=match):
        IngestOptions().updated(**{field: value})


def test_unknown_names_are_named():
    with pytest.raises(TypeError, match="unknown ingest option.*fit_row"):
        IngestOptions.from_kwargs(fit_row=3)
    with pytest.raises(TypeError):
        IngestOptions().updated(fit_row=3)


def test_options_are_frozen_and_normalised():
    opts = IngestOptions(rope_scaling={"rope_type": "linear", "factor": 2}, collage=[[3, 1]])
    assert opts.rope_scaling == '{"factor": 2, "rope_type": "linear"}' and opts.collage == ((3, 1),)
    with pytest.raises(AttributeError):
        opts.points = 3  # type: ignore[misc]


def test_parameters_record_what_changes_the_numbers():
    p = IngestOptions(fit_rows=512, workers=2, repo="x/y", collage=((1, 2),)).parameters(1e4, "half", None)
    assert p["fit_rows"] == 512 and p["collage_heads"] == [[1, 2]] and p["rope_theta"] == 1e4
    # How the ingest runs and where it reads from change no number: not recorded.
    assert not {"workers", "repo", "force", "wait", "cache_dir", "token"} & set(p)


def test_facts_are_the_model_facts_given():
    facts = IngestOptions(family="F", gqa_ratio=2).facts()
    assert facts["family"] == "F" and facts["gqa_ratio"] == 2 and facts["n_layers"] is None
    assert set(facts) == {"family", "gqa_ratio", "n_layers", "n_q_heads", "n_kv_heads", "rope_theta",
                          "rope_pairing", "rope_scaling", "trained_context"}


def test_the_frequency_pairs_default_is_the_metrics():
    from qkdb.ingest.metrics.frequency_usage import PAIRS
    from qkdb.ingest.options import FREQUENCY_PAIRS

    assert IngestOptions().frequency_pairs == FREQUENCY_PAIRS == PAIRS
