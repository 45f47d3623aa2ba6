"""The warehouse's tables: names, columns, types and descriptions (SPEC §4, §5).

This module is the one source of truth for the data dictionary. Ingest builds its Arrow
tables from it, the catalog attaches its descriptions with ``COMMENT ON``, and the metric
invariance tests iterate over the columns it marks as metrics.

Every table is partitioned by ``model`` (hive style, ``<table>/model=<name>/``); the ``model``
column comes from the folder name and is not stored inside the parquet files.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    doc: str
    # For metric columns: how the value scales when positions are multiplied by s > 0
    # (0: invariant, -1: per-token slopes). None marks a key or descriptive column.
    t_power: int | None = None


@dataclass(frozen=True)
class Table:
    name: str
    doc: str
    columns: tuple[Column, ...]
    # Versioned tables are replaced as a whole per model on re-ingest; append tables keep history.
    versioned: bool = True

    @cached_property  # (built once: the ingest asks for it with every head's rows)
    def arrow_schema(self) -> pa.Schema:
        """Schema of the parquet files (without the hive partition column ``model``)."""
        return pa.schema([pa.field(c.name, c.type) for c in self.columns if c.name != "model"])

    @cached_property
    def accepted_columns(self) -> frozenset[str]:
        """Names a row of this table may give: its file columns and the partition column ``model``."""
        return frozenset(self.arrow_schema.names) | {"model"}

    @cached_property
    def dictionary_columns(self) -> tuple[str, ...]:
        """Columns worth parquet's dictionary encoding: the top-level ones that are not floats.

        Keys, kinds and labels repeat; metrics and coordinates hardly ever do, and for them the
        writer's hash table costs more than it saves (the points table: ~40 % of its write time,
        and a larger file than plain encoding under zstd). Booleans are bit-packed in any case.
        """
        return tuple(
            f.name for f in self.arrow_schema if not (pa.types.is_floating(f.type) or pa.types.is_boolean(f.type))
        )

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"table {self.name} has no column {name!r}")

    @property
    def metric_columns(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.t_power is not None)


f64, i32, i64, s, b = pa.float64(), pa.int32(), pa.int64(), pa.string(), pa.bool_()
MODEL = Column("model", s, "Model name (registry name or the name given at ingest); hive partition key.")
LAYER = Column("layer", i32, "Layer index, 0-based.")
HEAD = Column("head", i32, "Query-head index within the layer, 0-based.")


def _m(name: str, doc: str, t_power: int = 0, type_: pa.DataType = f64) -> Column:
    return Column(name, type_, doc, t_power)


MODELS = Table(
    "models",
    "One row per ingested model: architecture facts (from the registry or ingest options) and provenance.",
    (
        MODEL,
        Column("family", s, "Model family, e.g. 'Llama 3.2'."),
        Column("in_paper", b, "Whether the seeds' studies analysed this model."),
        Column("hf_model", s, "Hugging Face model id the vectors were captured from."),
        Column("model_revision", s, "Revision of the captured model."),
        Column("n_layers", i32, "Number of transformer layers."),
        Column("n_q_heads", i32, "Query heads per layer."),
        Column("n_kv_heads", i32, "Key/value heads per layer."),
        Column("gqa_ratio", i32, "Query heads per KV head; key head of query head h is h // gqa_ratio."),
        Column("head_dim", i32, "Dimension of a query/key vector."),
        Column("rope_theta", f64, "RoPE base frequency; NULL when unknown."),
        Column("rope_pairing", s, "RoPE coordinate pairing: 'half' (rotate-half) or 'interleaved'."),
        Column("rope_scaling", s, "RoPE scaling as JSON (e.g. YaRN), NULL for plain RoPE."),
        Column("rope", s, "'rotary' (RoPE in every layer not in nope_layers) or 'none' (no rotary position embedding, e.g. GPT-2: every layer is in nope_layers and rope_planes has no rows)."),
        Column("rotary_dims", i32, "Head dims RoPE turns (= head_dim for full rotary; fewer for partial rotary: GPT-NeoX/Pythia, Phi, StableLM); rope_planes has rotary_dims/2 rows per head. NULL without RoPE planes."),
        Column("rotary_offset", i32, "First rotated dim: RoPE turns dims [rotary_offset, rotary_offset + rotary_dims) (0, except MLA-style models whose RoPE covers the last dims). The other dims are not RoPE planes."),
        Column("rope_source", s, "Where rope_planes' frequencies came from: 'recorded' (the model's own inv_freq, recorded by its capture), 'derived' (rope_theta and rope_scaling) or 'fitted' (fitted per plane: no theta, or a scaling whose frequencies depend on the text's length). NULL without RoPE planes."),
        Column("rope_inv_freq", pa.list_(f64), "The frequencies (rad/token) of rope_planes' planes j = 0 .. rotary_dims/2 - 1, as used (first layer with RoPE); NULL when fitted."),
        Column("layer_rope_inv_freq", pa.list_(pa.list_(f64)), "Each layer's frequencies where the layers differ (e.g. Gemma3's local and global layers; NULL entries: fitted), NULL when every layer uses rope_inv_freq."),
        Column("trained_context", i64, "L_train, the model's trained context in tokens (frequency_usage.turns_trained): the original length for scaled RoPE; NULL when unknown (then frequency_usage has no critical plane)."),
        Column("trained_context_source", s, "Where trained_context came from: 'option' (--trained-context), 'rope_scaling' (its original_max_position_embeddings), 'config' (max_position_embeddings, recorded by qkdb sniff), 'simulate' (the simulation's max_position) or 'registry: <why>'; NULL when unknown."),
        Column("attention_scale", f64, "The scale attention multiplied q.k by, as recorded by the capture (1/sqrt(head_dim) unless the model says otherwise, e.g. Gemma's query_pre_attn_scalar); NULL when not recorded."),
        Column("layer_rope_theta", pa.list_(f64), "Each layer's RoPE base where the layers differ (e.g. Gemma3's local and global layers), NULL when every layer uses rope_theta."),
        Column("layer_rope_scaling", pa.list_(s), "Each layer's RoPE scaling as JSON where the layers differ, NULL when every layer uses rope_scaling."),
        Column("position_scaling", s, "Position-dependent factors in the vectors that are not RoPE (e.g. Ministral3's llama-4 query scale), as a JSON list of {kind, type, formula, parameters, layers, removed}; removed = divided out of the stored vectors. NULL when none is known."),
        Column("pre_rope", b, "The capture stored vectors before RoPE (qkdb sniff --pre-rope): the ingest rotated each one by the RoPE the capture recorded (pairing, rotated dims, each layer's frequencies and amplitude; NoPE layers as they are), so every table describes the vectors attention received, as for any other capture (docs/rotation-planes.md). False for post-RoPE captures; NULL for models ingested before qkdb recorded it."),
        Column("weights_sha256", s, "sha256 of the weights the vectors were captured from: one hash over the sha256 of each weight file (capture.weight_files: the Hub's LFS ids, or hashed locally), or for a simulation of its planted parameters. Checkpoints of one series never share it (refused at ingest). NULL when the capture did not record it (qk-sniffer's captures, older ones)."),
        Column("input_kind", s, "What the captured texts were (capture.texts.kind; Gu et al. 2025 §3.3): 'natural' (the texts given), 'random' (tokens drawn uniformly from the vocabulary less its special tokens) or 'repeated' (one such token repeated). Only natural captures count in pooled and family aggregates (model_pool.pooled). NULL for models ingested before it was recorded: natural."),
        Column("nope_layers", pa.list_(i32), "Layers whose attention applies no rotary position embedding (NoPE layers; every layer when rope = 'none')."),
        Column("series", s, "Training-checkpoint series the model belongs to, NULL otherwise."),
        Column("series_order", i32, "Order of the checkpoint within its series."),
        Column("phase", s, "Training phase of the checkpoint (e.g. 'stage1', 'lc-4k-to-32k')."),
        Column("step", i64, "Training step of the checkpoint."),
        Column("source", s, "Where the vectors came from: 'hub', 'path', 'sniff' (a `qkdb sniff` folder), 'sample' (the bundled sample) or 'simulate'."),
        Column("location", s, "Dataset repo or local path ingested."),
        Column("revision", s, "Dataset branch/revision ingested, when from the Hub."),
        Column("n_heads", i32, "Query heads ingested."),
        Column("b_method", s, "How axis b was built: 'eig' (top eigenvector of the projected C_delta) or 'mean_diff'."),
        Column("capture", s, "How the vectors were captured, as the dataset records it (JSON): qk-sniffer's _saver_state.json (its model_name, source dataset and split, sampling strategy, bucket size and counts, head-sampling seed and counts) or the capture section of a qkdb sniff/simulate qkdb_dataset.json; NULL when the dataset records none."),
        Column("ingested_at", pa.timestamp("us", tz="UTC"), "When this version of the model was published."),
    ),
)

HEADS = Table(
    "heads",
    "One row per query head: sample sizes, depth and head-level metrics of the combined Q/K PCA (seed 003).",
    (
        MODEL,
        LAYER,
        HEAD,
        Column("kv_head", i32, "Key head this query head reads (head // gqa_ratio)."),
        Column("head_dim", i32, "Vector dimension d."),
        Column("n_q", i64, "Query vectors used."),
        Column("n_k", i64, "Key vectors used."),
        Column("n_dropped", i64, "Query plus key rows dropped: null vectors or positions, and with --drop-bad-vectors rows holding NaN, +-inf or values beyond +-65504."),
        Column("position_min", i64, "Smallest token position among the vectors used."),
        Column("position_max", i64, "Largest token position among the vectors used."),
        Column("n_texts", i64, "Texts (distinct example_id) the query and key vectors come from, NULL when the files have no example_id: vectors of one text are alike, so few texts are fewer independent draws than n_q and n_k suggest (docs/findings.md, finite-vector bias)."),
        Column("sliding_window", i32, "Local-attention window of the head, NULL for global attention."),
        Column("depth", f64, "Relative depth layer / (n_layers - 1)."),
        Column("depth_bin", i32, "min(9, floor(10 * depth))."),
        Column("is_nope", b, "Layer applies no rotary position embedding (registry nope_layers; every layer of a model with rope = 'none')."),
        _m("pos_var_q", "Share of Q variance linear in position: sum_j explained_variance_j * r_q_j^2 over the stored PCs."),
        _m("pos_var_k", "Share of K variance linear in position: sum_j explained_variance_j * r_k_j^2."),
        _m("pc0_pos_share_q", "PC0's part of pos_var_q: explained_variance_0 * r_q_0^2 / pos_var_q."),
        _m("pc0_pos_share_k", "PC0's part of pos_var_k."),
        _m("qk_separation_pc0", "|mu_q - mu_k| on PC0 (Q/K cluster separation)."),
        _m("fisher_pc0", "Fisher ratio (mu_q - mu_k)^2 / (sd_q^2 + sd_k^2) on PC0."),
        _m("qk_accuracy_pc01", "Balanced training accuracy of a linear discriminant (Q vs K) on (PC0, PC1)."),
    ),
)

PCA = Table(
    "pca",
    "Combined Q/K PCA (seed 003): one row per head and principal component, sign-canonicalised.",
    (
        MODEL,
        LAYER,
        HEAD,
        Column("pc", i32, "Principal component index, 0-based, eigenvalues descending."),
        _m("eigenvalue", "Eigenvalue of the pooled Q/K covariance (population).", t_power=0),
        _m("explained_variance", "eigenvalue / trace of the pooled covariance (sklearn's explained_variance_ratio_)."),
        _m("r_q", "Pearson r of the Q projections with Q positions (>= 0 after canonicalisation unless |r_q| < 0.05)."),
        _m("r_k", "Pearson r of the K projections with K positions; its sign says whether K's gradient agrees with Q's."),
        _m("mu_q", "Mean of the canonical Q projections (pooled mean removed)."),
        _m("mu_k", "Mean of the canonical K projections."),
        _m("sd_q", "Population standard deviation of the Q projections."),
        _m("sd_k", "Population standard deviation of the K projections."),
        _m("fisher", "(mu_q - mu_k)^2 / (sd_q^2 + sd_k^2)."),
        Column("sign_anchor", s, "Which correlation fixed the sign: 'q' (r_q >= 0) or 'k' (|r_q| < 0.05, so r_k >= 0)."),
    ),
)

ROTATION = Table(
    "rotation",
    "Planar rotation model (seed 002): drift axis a, separation axis b and the parametric recency bias.",
    (
        MODEL,
        LAYER,
        HEAD,
        _m("position_r", "|corr(X a, t)| over pooled Q and K."),
        _m("omega", "Angular frequency (rad/token) of the head's strongest rotation plane (RoPE plane or complement pair).", t_power=-1),
        _m("omega_r_squared", "Phase coherence squared of that plane at omega (Q/K weighted)."),
        _m("r_q_a", "corr(Q a, t_q): Q position signal on the drift axis."),
        _m("r_k_a", "corr(K a, t_k): K position signal on the drift axis."),
        _m("alpha_q", "OLS slope of Q a on t_q (units per token).", t_power=-1),
        _m("alpha_k", "OLS slope of K a on t_k (units per token).", t_power=-1),
        _m("mu_q_a", "Mean of Q a (raw, uncentred)."),
        _m("mu_k_a", "Mean of K a."),
        _m("mu_q_b", "Mean of Q b."),
        _m("mu_k_b", "Mean of K b."),
        _m("bias_strength", "mu_q_a * alpha_k: the key-position (recency) bias per token.", t_power=-1),
        _m("separation_strength", "b' C_delta b / tr(C_delta): share of E||q - k||^2 along b."),
        _m("var_frac_a", "a' C a / tr(C): share of pooled variance along a."),
        _m("var_frac_b", "b' C b / tr(C): share of pooled variance along b."),
        _m("plane_var_fraction", "var_frac_a + var_frac_b."),
        _m("residual_pos_r", "Largest |corr| of position with any direction orthogonal to {a, b} (~1e-14: the drift lemma)."),
        _m("content_var_b", "(var(Q b) + var(K b)) / 2: within-class variance on b."),
        _m("drift_norm", "||cov(X, t)||, the length of the position covariance vector.", t_power=None),
        Column("b_method", s, "'eig' (top eigenvector of (I - aa')C_delta(I - aa')) or 'mean_diff' (projected mu_Q - mu_K)."),
    ),
)

COMPLEMENT = Table(
    "complement",
    "SVD pairs of the complement of {a, b} (seed 002 Finding 4): rings whose angle turns with position.",
    (
        MODEL,
        LAYER,
        HEAD,
        Column("pair", i32, "SVD pair index i: scores (s_2i, s_2i+1) of the centred complement."),
        _m("var_frac", "The pair's share of complement variance."),
        _m("angle_r", "Circular-linear correlation of theta = atan2(s_2i+1, s_2i) with position, in [0, 1]."),
        _m("ring", "1 - var(r) / mean(r^2) for the radius r: 1 for a perfect ring, 0 for mass at the centre."),
        _m("omega", "Frequency (rad/token) maximising the Q/K-weighted phase coherence.", t_power=-1),
        _m("omega_r_squared", "Phase coherence squared at omega."),
        _m("qk_accuracy", "Balanced linear Q-vs-K accuracy on the pair (~0.5 on a shared ring)."),
        _m("statistic", "T_q + T_k: the permutation-standardised covariance of phase and exp(-i omega t) at omega, centred on both sides (~chi2 with 4 df when the phase is independent of position)."),
        _m("p_value", "chi2 p-value of statistic times the price of the frequency search (Bonferroni over the grid's signed frequencies, or Davies' bound over the periodogram's band)."),
        _m("p_adjusted", "p_value adjusted by Holm's step-down procedure over the head's pairs."),
        Column("active", b, "The pair's phase depends on position: p_adjusted < params.plane_alpha (0.01)."),
    ),
)

ROPE_PLANES = Table(
    "rope_planes",
    "RoPE planes of the raw coordinates: phase locking after undoing RoPE's rotation.",
    (
        MODEL,
        LAYER,
        HEAD,
        Column("j", i32, "RoPE plane index j < d/2."),
        Column("omega", f64, "Frequency of the plane in rad/token (rope_theta^(-2j/d), or fitted)."),
        Column("omega_source", s, "'given' (from rope_theta) or 'fitted' (rope_theta unknown)."),
        Column("turns", f64, "omega * (position range) / 2pi: how many turns the plane makes over the data."),
        Column("coherence_q", f64, "|mean over Q of z/|z| * exp(-i omega t)|: Q phase locking after undoing RoPE."),
        Column("coherence_k", f64, "The same over K."),
        Column("raw_coherence_q", f64, "|mean over Q of z/|z||, without undoing RoPE."),
        Column("raw_coherence_k", f64, "The same over K."),
        Column("radius_q", f64, "Mean |z| over Q."),
        Column("radius_k", f64, "Mean |z| over K."),
        Column("var_frac", f64, "The plane's share of total pooled variance."),
        Column("statistic", f64, "T_q + T_k: the permutation-standardised covariance of the drift-free phase and exp(-i omega t), centred on both sides (~chi2 with 4 df when the phase is independent of position); NaN for planes under one turn (not tested)."),
        Column("p_value", f64, "chi2 p-value of statistic (times Davies' bound for the search when omega is fitted)."),
        Column("p_adjusted", f64, "p_value adjusted by Holm's step-down procedure over the head's planes that turn at least once."),
        Column("rotating", b, "The plane carries a RoPE ring: turns >= 1 and p_adjusted < params.plane_alpha (0.01)."),
    ),
)

FREQUENCY_USAGE = Table(
    "frequency_usage",
    "Which RoPE planes a head's logits are built from (SPEC §4.8; Barbero et al. 2025, Liu et al. 2023): one row per query head and RoPE plane, over a seeded sample of causal (t, s) pairs of one text.",
    (
        MODEL,
        LAYER,
        HEAD,
        Column("j", i32, "RoPE plane index j < rotary_dims/2, as in rope_planes (j = 0 turns fastest)."),
        Column("omega", f64, "The plane's frequency in rad/token as applied (rope_planes.omega)."),
        Column("omega_trained", f64, "The frequency the plane had over the trained context: omega, except for scaled RoPE (llama3, YaRN, linear), where it is the base frequency rope_theta^(-2j/r) that the original length was trained with (Liu et al.'s formula)."),
        Column("logit_mean", f64, "Mean over the pairs of c_j = q^(j) . k^(j), the plane's part of the logit before the scale (signed: a plane that pushes every logit the same way)."),
        Column("logit_abs", f64, "Mean |c_j| over the pairs."),
        Column("logit_share", f64, "logit_abs / (the sum of logit_abs over every plane and the non-rotating dims taken as one more part): the plane's share of the logit's magnitude."),
        Column("bound_share", f64, "radius_q * radius_k / the sum over the head's planes (rope_planes' radii): the plane's share of the Cauchy-Schwarz bound on |c_j| (Barbero et al.)."),
        Column("turns_trained", f64, "omega_trained * trained_context / 2pi: the turns the plane makes over the trained context; NULL when no trained context is known or the frequencies were fitted."),
        Column("critical_plane", i32, "The layer's critical plane: the first plane, in order of falling frequency, with turns_trained < 1 (Liu et al.'s critical dimension / 2); the same on every row of the layer; NULL when unknown or when every plane turns."),
        Column("low_band", b, "The plane is at or past critical_plane (turns_trained < 1)."),
        Column("nonrotating_dims", i32, "Head dims RoPE leaves alone (head_dim - rotary_dims; 0 for full rotary). The same on every row of the head."),
        Column("nonrotating_share", f64, "The non-rotating dims' share of the logit's magnitude (the part logit_share counts beside the planes; 0 for full rotary). The same on every row of the head."),
        Column("low_band_share", f64, "The head's sum of logit_share over its low-band planes. The same on every row of the head; NULL without a critical plane."),
        Column("low_band_excess", f64, "low_band_share / the share those planes would have if every 2-D plane of the head weighed alike (the low-band planes / (head_dim / 2), the non-rotating dims counting as their planes): above 1, the logits lean on the frequencies that never finish a turn. The same on every row of the head."),
        Column("n_pairs", i64, "Causal pairs (t, s), s <= t, of one text behind the row (4,096 sampled, or every pair when fewer)."),
        Column("trained_context", i64, "L_train, the trained context in tokens turns_trained uses (models.trained_context_source says where it came from); NULL when unknown."),
    ),
)

POINTS = Table(
    "points",
    "A seeded sample of query and key vectors per head, projected for scatter figures.",
    (
        MODEL,
        LAYER,
        HEAD,
        Column("idx", i32, "Point index within the head's sample."),
        Column("kind", s, "'q' or 'k'."),
        Column("position", i64, "Token position."),
        Column("example_id", i32, "Input text the vector came from."),
        Column("pc0", f64, "Canonical PC0 projection (pooled mean removed)."),
        Column("pc1", f64, "Canonical PC1 projection."),
        Column("a", f64, "Raw coordinate on the drift axis a."),
        Column("b", f64, "Raw coordinate on the separation axis b."),
        *(Column(f"c{i}", f64, f"Complement SVD score {i} (collage heads only, else NULL).") for i in range(60)),
    ),
)

ESTIMATOR = Column("estimator", s, "How p = Pr_q[q.k_a > q.k_c] is estimated per key pair: 'empirical' (the share of the bin's queries, model-free; the primary one), 'gaussian' (the queries as a Gaussian with a Ledoit-Wolf-shrunk covariance) or 'thesis' (the seed author's closed form along the query drift direction; diagonal, not rotation-invariant). docs/plasticity.md.")

PLASTICITY = Table(
    "plasticity",
    "Attention plasticity (seed 003's testable hypothesis, SPEC 4.5): per head and estimator, how much the query decides which of two earlier keys wins (AP: 1 the query decides, 0 position does), over the context and at its start and end.",
    (
        MODEL,
        LAYER,
        HEAD,
        ESTIMATOR,
        Column("context_length", i64, "L, the context length the bins divide (tokens): the capture's recorded max length, else the registry's for its captures, else the model's largest position + 1."),
        Column("ap_overall", f64, "Mean AP over the decile bins with a value, each weighted by its queries."),
        Column("ap_first20", f64, "AP over the decile bins whose upper edge is at most 0.2 L (the first bin has no earlier keys: in practice the second decile)."),
        Column("ap_last20", f64, "AP over the decile bins whose lower edge is at least 0.8 L."),
        Column("ap_drop", f64, "ap_first20 - ap_last20: how much plasticity falls from the start of the context to its end."),
        Column("ap_retention", f64, "ap_last20 / ap_first20."),
        Column("n_pairs", i64, "Key pairs behind the decile bins (up to plasticity_pairs per bin)."),
        Column("gauss_gap", f64, "Mean over decile bins of |AP_gaussian - AP_empirical|: how far the Gaussian model of the queries is from the queries."),
        Column("notes", s, "Bins without a value and why (fewer than 32 queries, no key pair before them), NULL when every bin has one."),
    ),
)

PLASTICITY_PROFILE = Table(
    "plasticity_profile",
    "Attention plasticity by query position: one row per head, estimator and bin (deciles of the context; length bins (L/2, L] tokens for L = 1024, 2048, ...).",
    (
        MODEL,
        LAYER,
        HEAD,
        ESTIMATOR,
        Column("bin_kind", s, "'decile' (positions [k L/10, (k+1) L/10)) or 'length' (queries with t + 1 tokens of context in (L_k/2, L_k], L_k = 1024 * 2^k; the first [1, 1024])."),
        Column("bin", i32, "The bin's index (decile 0-9; length bin k)."),
        Column("lo", i64, "First query position of the bin."),
        Column("hi", i64, "One past its last query position (for a length bin: L_k, the context length it stands for)."),
        Column("tau", f64, "Mean position of the bin's queries (NULL without queries)."),
        Column("n_q", i64, "Queries in the bin."),
        Column("n_pairs", i64, "Admissible key pairs drawn: same text, both keys before the bin's first query (and within a sliding window of tau)."),
        Column("ap", f64, "Mean pair plasticity 4p(1-p) over the pairs (NULL: fewer than 32 queries or no pair)."),
    ),
)

PLASTICITY_2D = Table(
    "plasticity_2d",
    "Attention plasticity (empirical) by the distance between the two keys and from the query to them (log2 bins): the thesis's heatmaps, per head.",
    (
        MODEL,
        LAYER,
        HEAD,
        Column("key_distance_bin", i32, "floor(log2 |s_a - s_c|): the two keys are [2^bin, 2^(bin+1)) tokens apart."),
        Column("query_distance_bin", i32, "floor(log2 (tau - (s_a + s_c)/2)): the bin's mean query is that far (tokens) after the keys' midpoint."),
        Column("n_pairs", i64, "Key pairs in the cell (over the decile bins)."),
        Column("ap", f64, "Mean pair plasticity of those pairs (empirical estimator)."),
    ),
)

RECENCY = Table(
    "recency",
    "The recency term against the logits (seed 002): per head, the measured slope of q.k_s in the key position s against bias_strength = mu_q_a * alpha_k, which claims to predict it.",
    (
        MODEL,
        LAYER,
        HEAD,
        Column("logit_slope", f64, "Mean over queries of the OLS slope of q_i.k_s on s over the keys of its own text before it, weighted by keys per query (logit per token, before the attention scale)."),
        Column("logit_slope_se", f64, "Its standard error over texts (texts as clusters); NULL with one text."),
        Column("predicted_slope", f64, "bias_strength = mu_q_a * alpha_k: seed 002's recency term per token, in the same units."),
        Column("slope_ratio", f64, "logit_slope / predicted_slope."),
        Column("n_queries", i64, "Queries with at least two earlier keys of their text."),
        Column("n_texts", i64, "Texts they come from."),
        Column("mean_keys", f64, "Mean number of earlier keys per query."),
    ),
)

ATTENTION_MASS = Table(
    "attention_mass",
    "Attention as the model computed it (docs/attention.md): per query head and query-position bin, the mean attention weight on token 0, tokens 0-3 and the captured keys within 64 / 256 / 1,024 tokens, from each query's captured softmax normaliser (qkdb sniff's lse). Only captures that recorded it have rows.",
    (
        MODEL,
        LAYER,
        HEAD,
        Column("input_kind", s, "What the captured texts were: 'natural', 'random' or 'repeated' (models.input_kind)."),
        Column("bin", i32, "Query-position bin: [4^(bin-1), 4^bin) tokens, bin 0 = positions 0-3 (q_lo, q_hi)."),
        Column("q_lo", i64, "First query position of the bin."),
        Column("q_hi", i64, "Query positions are below this: the bin's upper edge, or one past the last position of the head's texts when they end inside the bin (q_hi - q_lo is the bin's width as sink_heads weighs it)."),
        Column("n_queries", i64, "Captured queries in the bin."),
        Column("n_token0", i64, "Of them, queries whose text's key at position 0 was captured (mass_token0 and sink_margin are over these)."),
        Column("mass_token0", f64, "Mean weight on token 0: exp(logit(t, 0) - lse_t)."),
        Column("mass_tokens0_3", f64, "Mean weight on tokens 0-3, over queries whose text has every key 0..min(3, t) captured."),
        Column("mass_recent_64", f64, "Mean weight on the captured keys within 64 tokens (0 <= t - s < 64): exact when every key there was captured, else a lower bound."),
        Column("mass_recent_256", f64, "The same within 256 tokens."),
        Column("mass_recent_1024", f64, "The same within 1,024 tokens."),
        Column("captured_share", f64, "Mean total weight on all captured keys of the query's text: the share of its attention the captured keys explain (1 for a capture of every position)."),
        Column("sink_margin", f64, "Mean of logit(t, 0) minus the largest other captured logit of the query (after the scale and any softcap)."),
        Column("token0_advantage", f64, "Mean of token 0's logit advantage over the head's typical key, A_t = scaling * q_t . (k_0 - mean of the captured keys at other positions), before any softcap: the bias part every query shares."),
        Column("token0_advantage_sq", f64, "Mean of A_t squared: with token0_advantage, the share mean(A)^2 / mean(A^2) of the advantage that is the same for every query (sink_heads.bias_share)."),
    ),
)

ATTENTION_MASS_TEXT = Table(
    "attention_mass_text",
    "Attention on token 0 per text (Gu et al. 2025's per-sequence estimator, docs/attention.md): per query head, text and query-position bin below 1,024, the captured queries that saw token 0 and their mean weight on it. A text's alpha0 below params.sink_context is its bins' width-weighted mean (view sink_texts). Only captures that recorded each query's softmax normaliser have rows.",
    (
        MODEL,
        LAYER,
        HEAD,
        Column("input_kind", s, "What the captured texts were: 'natural', 'random' or 'repeated' (models.input_kind)."),
        Column("example_id", i64, "The text."),
        Column("bin", i32, "Query-position bin (as attention_mass.bin)."),
        Column("q_lo", i64, "First query position of the bin."),
        Column("q_hi", i64, "Query positions are below this: the bin's upper edge, or one past the text's last captured position when the text ends inside the bin (q_hi - q_lo weighs the bin in sink_texts)."),
        Column("n_queries", i64, "The text's captured queries in the bin whose text's key 0 was captured."),
        Column("alpha0", f64, "Their mean weight on token 0: exp(logit(t, 0) - lse_t)."),
    ),
)

INGEST_RUNS = Table(
    "ingest_runs",
    "One row per successful ingest: source, revision, parameters, versions, timing, heads done and skipped.",
    (
        MODEL,
        Column("run_id", s, "Unique id of the run."),
        Column("source", s, "'hub', 'path', 'sniff', 'sample' or 'simulate'; 'pull' for a model added by `qkdb pull` (its publisher's run is logged too)."),
        Column("location", s, "Dataset repo or local path."),
        Column("revision", s, "Branch or revision asked for (Hub)."),
        Column("commit", s, "Resolved commit sha (Hub)."),
        Column("parameters", s, "Ingest parameters as JSON."),
        Column("qkdb_version", s, "qkdb version that ran the ingest."),
        Column("started_at", pa.timestamp("us", tz="UTC"), "Start time."),
        Column("finished_at", pa.timestamp("us", tz="UTC"), "Publish time."),
        Column("heads_done", i32, "Query heads ingested."),
        Column("heads_skipped", i32, "Query heads skipped."),
        Column("skipped", s, "JSON list of {head, reason} for skipped heads."),
        Column("cluster", s, "Ray cluster address the heads were computed on ('local', 'auto', HOST:PORT, ray://HOST:PORT); NULL for an ingest on this machine."),
        Column("ray_version", s, "Ray version of the driver for a cluster ingest (the cluster runs the same); NULL otherwise."),
    ),
    versioned=False,
)

TABLES: dict[str, Table] = {
    t.name: t for t in (MODELS, HEADS, PCA, ROTATION, COMPLEMENT, ROPE_PLANES, FREQUENCY_USAGE, POINTS, PLASTICITY, PLASTICITY_PROFILE,
                        PLASTICITY_2D, RECENCY, ATTENTION_MASS, ATTENTION_MASS_TEXT, INGEST_RUNS)
}

# Tables derived from the published models as a whole, rewritten after every publish or removal
# (not partitioned by model): see qkdb/warehouse/intervals.py.
FINDING_INTERVALS = Table(
    "finding_intervals",
    "The 95% interval of every finding's measured value, computed from finding_inputs when models are published (the findings view joins it).",
    (
        Column("id", s, "The finding (findings.id); '002.F5.family' rows are the within-family correlations of every family."),
        Column("scope", s, "The finding's scope (findings.scope)."),
        Column("stat", s, "The statistic (finding_inputs.stat)."),
        Column("estimate", f64, "The value the interval belongs to, computed from the same rows (findings uses the interval only while it equals measured_value)."),
        Column("ci_low", f64, "Lower end of the 95% interval; for a range across models the lowest end of every model's interval."),
        Column("ci_high", f64, "Upper end of the 95% interval; for a range across models the highest end of every model's interval."),
        Column("low_max", f64, "Ranges across models: the highest lower end of a model's interval (NULL otherwise)."),
        Column("high_min", f64, "Ranges across models: the lowest upper end of a model's interval (NULL otherwise)."),
        Column("ci_method", s, "How the interval was computed, or why there is none."),
        Column("n_units", i64, "Units resampled: models for a claim about models like these, else key-head groups (query heads sharing a key head)."),
        Column("n_boot", i32, "Bootstrap resamples (NULL for closed-form intervals)."),
        Column("fingerprint", s, "finding_state.fingerprint when the interval was computed."),
        Column("computed_at", pa.timestamp("us", tz="UTC"), "When the interval was computed."),
    ),
    versioned=False,
)

DERIVED: dict[str, Table] = {FINDING_INTERVALS.name: FINDING_INTERVALS}

# Tables of facts from outside the captures (SPEC §4.6): what qkdb ships (package data, written
# into the home with the catalog) and what the user imports (`qkdb benchmarks import`), one file
# each; the catalog's view is the shipped rows, less those an import replaced (same key), plus
# the imported ones. See qkdb/warehouse/benchmarks.py.
BENCHMARK_SCORES = Table(
    "benchmark_scores",
    "Published long-context benchmark scores (LongBench-Pro summaries, RULER's Table 3, your imports): one row per benchmarked model, mode, context budget, best-of-k and slice.",
    (
        Column("benchmark", s, "The benchmark: 'longbench-pro', 'ruler', or the name an imported CSV gives."),
        Column("bench_model", s, "The benchmarked model as the benchmark names it (e.g. 'Qwen3-4B', 'Llama-3.2-3B-Instruct')."),
        Column("mode", s, "'nonthinking' or 'thinking' (LongBench-Pro runs both; RULER's models answer without thinking: 'nonthinking'). Different modes are different rows, never averaged."),
        Column("context_budget", i64, "The context budget of the run in tokens (LongBench-Pro's context-<N>); NULL when the benchmark has none."),
        Column("best_of", i32, "k of the best-of-k runs (LongBench-Pro's bon-<k>); NULL when not given."),
        Column("slice_kind", s, "'overall', 'token_length', 'difficulty', 'contextual_requirement', 'primary_task' or 'language'."),
        Column("slice", s, "The slice: 'overall', a length such as '8k', a difficulty, a task..."),
        Column("length_tokens", i64, "For token_length slices: the slice's length in tokens ('8k' = 8192); NULL otherwise."),
        Column("score", f64, "The score as published, 0-100 (LongBench-Pro's average_* metrics x 100: the mean over its inference iterations)."),
        Column("n_runs", i32, "Inference iterations behind an overall score; NULL for slices."),
        Column("run_scores", s, "The overall score of each iteration, ';'-separated, x 100; NULL for slices."),
        Column("source", s, "Where the row comes from: the summary file (<model>/<file>), the CSV, or the paper and table."),
        Column("origin", s, "'bundled' (shipped with qkdb: warehouse/reference/SOURCES.md) or 'imported' (qkdb benchmarks import)."),
        Column("truncated", pa.bool_(), "TRUE for a length slice longer than its run's context budget (LongBench-Pro ran Qwen3 and Llama with 120,000 tokens: their 128k and 256k inputs were cut), FALSE otherwise. Retention, per-length joins and fits leave these out unless params.benchmark_truncated (SPEC §4.6)."),
    ),
    versioned=False,
)

BENCHMARK_MODELS = Table(
    "benchmark_models",
    "Which benchmarked model a captured model stands for, and how well (match_kind): the registry's mapping and your own (qkdb benchmarks map / import).",
    (
        Column("model", s, "The captured model (models.model)."),
        Column("benchmark", s, "The benchmark (benchmark_scores.benchmark)."),
        Column("bench_model", s, "The benchmarked model it stands for (benchmark_scores.bench_model)."),
        Column("match_kind", s, "'exact' (the captured checkpoint is the one scored), 'base_vs_instruct' (a base capture against its instruct model's scores) or 'other' (a related checkpoint). Only exact matches make a join more than descriptive."),
        Column("note", s, "What was captured and what was scored."),
        Column("origin", s, "'bundled' (the registry's) or 'imported' (qkdb benchmarks map / import)."),
    ),
    versioned=False,
)

REFERENCE_METRICS = Table(
    "reference_metrics",
    "Model-level values reported elsewhere, for comparison with qkdb's own: the seeds' author's attention plasticity per model (overall, first and last fifth, drop, bias_strength) and by query-position range.",
    (
        Column("model", s, "The model (registry name)."),
        Column("family", s, "The model's family (the registry's; NULL for a model it does not list)."),
        Column("source", s, "Who reported it: 'thesis' (the seeds' author, msc_thesis at 76c5ebc, notes/experiments/05_benchmark_connection.md)."),
        Column("metric", s, "'ap_overall', 'ap_first20', 'ap_last20', 'ap_drop', 'bias_strength', or 'ap_length' (AP of a range of query positions)."),
        Column("lo_tokens", i64, "For 'ap_length': the range's first position in tokens (0 for 0-8k); NULL otherwise."),
        Column("hi_tokens", i64, "For 'ap_length': the range's end in tokens (8192 for 0-8k); NULL otherwise."),
        Column("value", f64, "The value as reported."),
        Column("note", s, "The source's caveat, if any."),
        Column("origin", s, "'bundled' (shipped with qkdb: warehouse/reference/SOURCES.md) or 'imported'."),
    ),
    versioned=False,
)

SINK_ANCHORS = Table(
    "sink_anchors",
    "Published attention-sink rates to set beside qkdb's (sink_card): Gu et al. 2025 (ICLR 2025, arXiv 2410.10781) Table 1, Sink_1^epsilon per model and input kind.",
    (
        Column("bench_model", s, "The model as the paper names it (e.g. 'LLaMA3-8B')."),
        Column("hf_model", s, "Its Hugging Face id (the usual one for that name: the paper names models, not ids)."),
        Column("variant", s, "'base' or 'chat'."),
        Column("input_kind", s, "'natural' (the Pile), 'random' or 'repeated' tokens."),
        Column("epsilon", f64, "The threshold on alpha_1 (0.3)."),
        Column("tokens", i64, "Tokens per sequence, T (64)."),
        Column("texts", i64, "Sequences averaged over (100)."),
        Column("sink_rate", f64, "The published rate as a fraction (the paper's % / 100): the mean over sequences, layers and heads of [alpha_1 > epsilon], Gu et al.'s per-text estimator."),
        Column("source", s, "The paper and table."),
        Column("origin", s, "'bundled' (shipped with qkdb: warehouse/reference/SOURCES.md) or 'imported'."),
    ),
    versioned=False,
)

IMPORTED: dict[str, Table] = {t.name: t for t in (BENCHMARK_SCORES, BENCHMARK_MODELS, REFERENCE_METRICS, SINK_ANCHORS)}

# Every table the catalog has a view of.
STORED: dict[str, Table] = {**TABLES, **DERIVED, **IMPORTED}
