"""Every figure by name (SPEC §7): its builder, a one-line description and the seed group it belongs to.

A builder is ``build(con, models=None, series=None, head=None, **opts) -> alt.Chart`` (or a
layered/faceted/concatenated chart) built only from warehouse tables and finding views; it raises
:class:`qkdb.errors.ChartError` when the ingested data cannot support the figure.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from typing import TYPE_CHECKING

from qkdb.errors import ChartError

if TYPE_CHECKING:
    import altair as alt

# The seeds' grouping of their figures (seed 003 and seed 002 figure tables).
GROUPS = {
    "pca": "Cross-model: combined Q/K PCA (seed 003)",
    "rotation": "Cross-model: planar rotation (seed 002)",
    "series-pca": "Training series: combined Q/K PCA (seed 003, figures 07–12)",
    "series-rotation": "Training series: planar rotation (seed 002, figures 09–10)",
    "plasticity": "Plasticity and effective context (seed 003's hypotheses, seed 002's recency term)",
    "attention": "Attention as the model computes it: sinks, from the captured softmax normaliser",
}


@dataclass(frozen=True)
class Figure:
    name: str
    seed_figure: str
    description: str
    group: str
    builder: str  # "module.function" in qkdb.charts.figures, imported when the figure is built
    scope: str  # 'models' (cross-model), 'model' (one model's heads) or 'series'
    interactive: bool = False  # takes interactive=True: linked head explorer and filters (the report uses it)

    def build(self, con, **options) -> alt.TopLevelMixin:
        """The figure from ``con`` (see :func:`qkdb.charts.api.chart` for the options)."""
        from qkdb.charts.altair_copy import cheap_copies
        from qkdb.charts.data import Rows, named_datasets, one_read_of_models

        with named_datasets() as rows, one_read_of_models(), cheap_copies():
            built = self.function()(con, **options)
        if rows:  # the rows join the spec once, at the top, after the composition copied only names
            had = built._get("datasets")
            built["datasets"] = {**(had if isinstance(had, dict) else {}), **{k: Rows(v) for k, v in rows.items()}}
        return built

    def function(self) -> Callable[..., alt.TopLevelMixin]:
        # One figure's module per `qkdb chart`, not all twenty.
        module, name = self.builder.rsplit(".", 1)
        return getattr(importlib.import_module(f"qkdb.charts.figures.{module}"), name)


FIGURES: dict[str, Figure] = {
    f.name: f
    for f in (
        Figure("pc-roles", "PCA 01", "mean r_q and r_k per principal component (bars ±1 sd)", "pca", "pc_roles.build", "models"),
        Figure("rq-vs-rk", "PCA 02", "PC0 r_q vs r_k per head, coloured by family, taxonomy thresholds", "pca", "rq_vs_rk.build", "models", interactive=True),
        Figure("depth-heatmap-rq", "PCA 03", "mean PC0 r_q per model × depth bin (Blues, annotated)", "pca", "depth_heatmap.build_rq", "models"),
        Figure("depth-heatmap-rk", "PCA 04", "mean PC0 r_k per model × depth bin (Reds, annotated)", "pca", "depth_heatmap.build_rk", "models"),
        Figure("explained-variance", "PCA 05", "mean explained variance per PC with the cumulative share", "pca", "explained_variance.build", "models"),
        Figure("pca-collage", "PCA 06", "2×2 heads on PC0/PC1, Q blues / K reds by position, per-PC stats", "pca", "pca_collage.build", "model"),
        Figure("ab-plane-collage", "rotation 01", "2×2 heads on their {a, b} plane, Q blues / K reds by position", "rotation", "ab_plane_collage.build", "model"),
        Figure("drift-bars", "rotation 02", "mean |r_q| and |r_k| on the drift axis a per model (PC0 as ticks)", "rotation", "drift_bars.build", "models"),
        Figure("variance-decomposition", "rotation 03", "variance share of axis a, axis b and the complement per model", "rotation", "variance_decomposition.build", "models"),
        Figure("bias-strength", "rotation 04", "histogram of bias strength ×10³ per family, zero line", "rotation", "bias_strength.build", "models"),
        Figure("slope-ratio", "rotation 05", "median |alpha_k|/|alpha_q| per model with IQR, log scale", "rotation", "slope_ratio.build", "models"),
        Figure("depth-heatmaps", "rotation 06", "|r_k| on axis a and bias ×10³ per model × depth bin", "rotation", "rotation_depth_heatmaps.build", "models"),
        Figure("bias-vs-separation", "rotation 07", "bias vs separation per head: pooled panel, then one per family with its r", "rotation", "bias_vs_separation.build", "models", interactive=True),
        Figure("complement-collage", "rotation 08", "grid of the complement SVD pairs of one head (RoPE rings), strength ρ² and p per pair", "rotation", "complement_collage.build", "model"),
        Figure("frequency-usage", "rope 01", "mean share of |q·k| per layer × RoPE plane, a panel per model, the critical plane outlined (Barbero et al. 2025, Liu et al. 2023)", "rotation", "frequency_usage.build", "models"),
        Figure("series-position-signal", "PCA 07", "mean PC0 r_q and r_k per checkpoint (±1 sd), phase shading", "series-pca", "series_position_signal.build", "series"),
        Figure("series-taxonomy", "PCA 08", "taxonomy category shares per checkpoint (stacked)", "series-pca", "series_taxonomy.build", "series"),
        Figure("series-explained-variance", "PCA 09", "mean explained variance of PC0–PC2 per checkpoint", "series-pca", "series_explained_variance.build", "series"),
        Figure("series-depth-heatmap-rq", "PCA 10", "mean PC0 r_q per checkpoint × depth bin (Blues)", "series-pca", "series_depth_heatmap.build_rq", "series"),
        Figure("series-depth-heatmap-rk", "PCA 11", "mean PC0 r_k per checkpoint × depth bin (Reds)", "series-pca", "series_depth_heatmap.build_rk", "series"),
        Figure("series-phase-portraits", "PCA 12", "PC0 r_q vs r_k per head, a panel per checkpoint", "series-pca", "series_phase_portraits.build", "series"),
        Figure("series-trajectory", "rotation 09", "median and IQR of |r_k_a|, separation, bias, plane variance per checkpoint", "series-rotation", "series_trajectory.build", "series"),
        Figure("series-bias-decomposition", "rotation 10", "Q mean on a, K drift slope and bias per checkpoint, change in long-context training", "series-rotation", "series_bias_decomposition.build", "series"),
        Figure("plasticity-profile", "plasticity 01", "per model: every head's AP by decile of query position (grey) and the mean (bold), estimator selectable", "plasticity", "plasticity.build_profile", "models"),
        Figure("plasticity-heatmap", "plasticity 02", "AP over the distance between the two keys × from the query to them (log2 bins), a panel per model", "plasticity", "plasticity.build_heatmap", "models"),
        Figure("plasticity-by-taxonomy", "plasticity 03", "AP per head by taxonomy category, a panel per family (seed 003's prediction)", "plasticity", "plasticity.build_by_taxonomy", "models"),
        Figure("recency-check", "plasticity 04", "measured logit slope against bias strength per head, a panel per family, y = x", "plasticity", "recency_check.build", "models"),
        Figure("series-plasticity", "plasticity 05", "AP first / last fifth, their drop and bias strength along a checkpoint series", "plasticity", "plasticity.build_series", "series"),
        Figure("plasticity-vs-benchmark", "plasticity 06", "a model-level metric (AP drop) against the benchmark's overall score, by family, r / ρ / interval in the title, match kind marked", "plasticity", "benchmark_join.build_vs_benchmark", "models"),
        Figure("plasticity-retention", "plasticity 07", "AP retention against benchmark score retention over the same lengths, per model", "plasticity", "benchmark_join.build_retention", "models"),
        Figure("sink-map", "attention 01", "mean attention weight on token 0 per layer × head, a panel per model, sink heads outlined", "attention", "sinks.build_map", "models"),
        Figure("sink-series", "attention 02", "sink rate and mean weight on token 0 per checkpoint of a series", "attention", "sinks.build_series", "series"),
        Figure("sink-card", "attention 03", "the sink card: per checkpoint, sink rates by input kind (per text and pooled) beside Gu et al.'s Table 1, and the per-layer per-text rate", "attention", "sinks.build_card", "models"),
    )
}


def get(name: str) -> Figure:
    """The figure called ``name``; a :class:`ChartError` naming close matches otherwise."""
    try:
        return FIGURES[name]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, FIGURES, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ChartError(f"unknown figure {name!r}.{hint} `qkdb chart --list` names them all.", kind="not_found") from None


def listing() -> list[tuple[str, str]]:
    """(name, one line) for every figure, in the seeds' order."""
    return [(f.name, f"{f.seed_figure}: {f.description}") for f in FIGURES.values()]
