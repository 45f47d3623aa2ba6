"""The seeds' claim groups and the figures that show them: the one place that maps findings to figures.

A claim group is one numbered finding (or figure, or the lemma) of seed 003 or seed 002: the
``findings`` rows whose ``id`` starts with its prefix (sql/findings.sql), the sentence the seed
claims, the row that headlines it on the report's scorecard, and the figures that show it. Every
figure of the registry has exactly one *home* group, where the report draws it; other groups may
point at it (``see``). The report's sections, its scorecard, the figure links of the findings
table and the front page's headline figures all read this table.
"""

from __future__ import annotations

from dataclasses import dataclass

from qkdb.charts import registry


@dataclass(frozen=True)
class ClaimGroup:
    key: str  # the finding-id prefix, e.g. "003.F4" (its first part is the seed)
    seed: str  # the report's part: "003", "002", "ecl" (plasticity and effective context) or "attn" (sinks)
    label: str  # where the seed states it: "Finding 4", "figure 08", "Lemma"
    claim: str  # the seed's claim, one sentence (plain text, Unicode notation)
    headline: str  # the findings row the scorecard shows for the group
    figures: tuple[str, ...] = ()  # drawn in this group's section
    see: tuple[str, ...] = ()  # drawn elsewhere, linked from here

    @property
    def anchor(self) -> str:
        return "claim-" + self.key.replace(".", "-")

    def owns(self, finding_id: str) -> bool:
        """Whether a findings row belongs to the group (its id starts with the key and a dot)."""
        return finding_id == self.key or finding_id.startswith(self.key + ".")


SEEDS = {
    "003": "Seed 003 · combined Q/K PCA",
    "002": "Seed 002 · planar rotation",
    "ecl": "Plasticity and effective context",
    "attn": "Attention as the model computes it",
}

GROUPS: tuple[ClaimGroup, ...] = (
    ClaimGroup("003.F1", "003", "Finding 1",
               "About a quarter of Q+K variance is linear in position (Q 27%, K 14%), most of it on PC0 (~90% / ~74%).",
               "003.F1.pos_var_q", figures=("explained-variance",), see=("pc-roles",)),
    ClaimGroup("003.F2", "003", "Finding 2",
               "Q and K are linearly separable on PC0: Fisher ratio ≈ 44, accuracy 98.5–100%, clusters ≈ 47 units apart.",
               "003.F2.accuracy", figures=("pca-collage",), see=("explained-variance",)),
    ClaimGroup("003.fig01", "003", "figure 01",
               "PC0 carries the position signal, queries more than keys: mean r_q ≈ 0.80, r_k ≈ 0.48.",
               "003.fig01.q_dominant", figures=("pc-roles",)),
    ClaimGroup("003.F3", "003", "Finding 3",
               "A moderate K gradient on PC0 (r_k ≈ 0.48) times a large Q cluster mean (|μQ| 20–30 units) makes the position bias.",
               "003.F3.pc0_r_k", figures=("depth-heatmap-rq", "depth-heatmap-rk"), see=("pc-roles",)),
    ClaimGroup("003.F4", "003", "Finding 4",
               "Head taxonomy: 55.4% mixed, 26.6% position-dominated, 14.2% Q-positional, 3.8% content-focused, <0.1% K-positional.",
               "003.F4.position_dominated", figures=("rq-vs-rk",)),
    ClaimGroup("003.F5", "003", "Finding 5",
               "Positional structure emerges early in training: r_q 0.67 → 0.81 and content-focused heads 11% → <1% within 1.2M steps.",
               "003.F5.r_q", figures=("series-position-signal",), see=("series-taxonomy",)),
    ClaimGroup("003.F6", "003", "Finding 6",
               "Long-context fine-tuning raises r_q (0.81 → 0.87) and PC0's variance while r_k drops (0.54 → 0.46).",
               "003.F6.r_k", figures=("series-phase-portraits", "series-depth-heatmap-rq", "series-depth-heatmap-rk"),
               see=("series-position-signal", "series-explained-variance", "series-taxonomy")),
    ClaimGroup("003.fig08", "003", "figure 08",
               "Position-dominated heads grow from 34% to 71% over training.",
               "003.fig08.position_dominated", figures=("series-taxonomy",)),
    ClaimGroup("003.fig09", "003", "figure 09",
               "PC0's explained variance grows from 0.19 to 0.34 over training.",
               "003.fig09.pc0_ev", figures=("series-explained-variance",)),
    ClaimGroup("002.F1", "002", "Finding 1",
               "On the drift axis a keys encode position more strongly than queries (|r_k| 0.87 vs |r_q| 0.74) and drift 1.83× faster.",
               "002.F1.k_over_q", figures=("drift-bars", "slope-ratio")),
    ClaimGroup("002.F2", "002", "Finding 2",
               "Recency bias is universal: 99.0% of heads have a positive bias strength (Q mean on a × K slope).",
               "002.F2.bias_positive", figures=("bias-strength", "depth-heatmaps")),
    ClaimGroup("002.F3", "002", "Finding 3",
               "The {a, b} plane holds ~38% of the variance (29–46% across models); axis b carries more than axis a in 88% of heads.",
               "002.F3.plane_var", figures=("variance-decomposition", "ab-plane-collage")),
    ClaimGroup("002.lemma", "002", "Lemma",
               "No direction outside the drift axis a correlates linearly with position (largest residual 7.3e-15).",
               "002.lemma", see=("ab-plane-collage",)),
    ClaimGroup("002.F4", "002", "Finding 4",
               "The complement of {a, b} holds RoPE rotation planes: 18–29 of 30 SVD pairs, 44–89% of its variance.",
               "002.F4.active_pairs", figures=("complement-collage",)),
    ClaimGroup("rope.low_band", "002", "Barbero et al. 2025",
               "Queries and keys build their logits from the lowest RoPE frequencies: the planes that never finish a "
               "turn in the trained context (Liu et al.'s critical plane onward) carry more than their even share.",
               "rope.low_band", figures=("frequency-usage",)),
    ClaimGroup("002.F5", "002", "Finding 5",
               "Simpson's paradox: bias and separation correlate +0.48 pooled, but −0.65 within Llama 3.2.",
               "002.F5.simpson", figures=("bias-vs-separation",)),
    ClaimGroup("002.F6", "002", "Finding 6",
               "Long-context training collapses the recency bias (−91%) through the K drift slope (−93%).",
               "002.F6.lc_bias", figures=("series-trajectory", "series-bias-decomposition")),
    ClaimGroup("003.ap", "ecl", "testable hypotheses",
               "The taxonomy predicts attention plasticity (content-focused > Q-positional > position-dominated), "
               "plasticity falls along the context, and long-context training raises it.",
               "003.ap.content_vs_qpos",
               figures=("plasticity-by-taxonomy", "plasticity-profile", "plasticity-heatmap", "series-plasticity")),
    ClaimGroup("003.ecl", "ecl", "Effective context",
               "Plasticity tracks long-context performance: across models, AP drop against LongBench-Pro's overall score "
               "(r = −0.675 over the author's 7 models) and AP retention against score retention (r = 0.943).",
               "003.ecl.ap_drop", figures=("plasticity-vs-benchmark", "plasticity-retention")),
    ClaimGroup("002.recency", "ecl", "recency term",
               "The logits carry a recency term μQ^a·αK·j: each head's measured logit slope in the key position is its bias strength.",
               "002.recency.corr", figures=("recency-check",)),
    ClaimGroup("attn.sink", "attn", "attention sinks",
               "Most heads put more than 0.3 of their attention on token 0 (Gu et al. 2025: LLaMA3-8B 99.02%, "
               "Mistral-7B 97.49%), and that mass is position-driven: every query favours token 0 alike.",
               "attn.sink.rate", figures=("sink-card", "sink-map", "sink-series")),
)

# The front page's headline figures, best first; the report shows the first few the data supports.
FRONT = ("rq-vs-rk", "bias-strength", "bias-vs-separation", "series-bias-decomposition", "drift-bars",
         "variance-decomposition")
N_FRONT = 4


NO_DATA = "no data"
MIXED = "mixed"
PARTLY = "partly tested"


@dataclass(frozen=True)
class ClaimState:
    """What a claim's findings rows say together.

    Every row of a claim is one of its parts: the seed states each number (overall, per family,
    per group of models, over a series) as part of the claim. The claim *holds* (or *does not
    hold*, or is *inconclusive*) only when every part has data and they agree; with some parts
    without data it is *partly tested*, whatever the tested parts say; parts with data that
    disagree make it *mixed*; no part with data, *no data*.
    """

    status: str
    parts: tuple[dict, ...]

    @property
    def tested(self) -> tuple[dict, ...]:
        return tuple(r for r in self.parts if has_data(r))

    @property
    def untested(self) -> tuple[dict, ...]:
        return tuple(r for r in self.parts if not has_data(r))

    @property
    def tested_status(self) -> str:
        """The verdict the tested parts share, ``mixed`` when they differ, ``no data`` without any."""
        seen = {r.get("status") for r in self.tested}
        return NO_DATA if not seen else seen.pop() if len(seen) == 1 else MIXED

    @property
    def label(self) -> str:
        """The verdict as printed: ``partly tested: 1 of 5 parts`` when some parts have no data."""
        if self.status == PARTLY:
            return f"{PARTLY}: {len(self.tested)} of {len(self.parts)} parts"
        return self.status


def has_data(r: dict) -> bool:
    return r.get("status") not in (None, NO_DATA)


def claim_state(rs: list[dict]) -> ClaimState:
    """The claim's verdict from all of its rows (see :class:`ClaimState`)."""
    parts = tuple(rs)
    tested = [r for r in parts if has_data(r)]
    if not tested:
        status = NO_DATA
    elif len(tested) < len(parts):
        status = PARTLY
    else:
        seen = {r["status"] for r in tested}
        status = seen.pop() if len(seen) == 1 else MIXED
    return ClaimState(status, parts)


def claim_states(findings: list[dict]) -> dict[str, ClaimState]:
    """Every claim group's state, by key, in the groups' order."""
    return {g.key: claim_state([r for r in findings if group_of(r["id"]) is g]) for g in GROUPS}


def claim_counts(states) -> str:
    """'2 hold, 1 does not hold, 3 mixed, 9 partly tested, 5 without data (of 20 claims)'."""
    states = list(states)
    n = {s: sum(c.status == s for c in states) for s in ("holds", "does not hold", "inconclusive", MIXED, PARTLY, NO_DATA)}
    parts = [f"{n['holds']} hold", f"{n['does not hold']} {'does' if n['does not hold'] == 1 else 'do'} not hold",
             f"{n['inconclusive']} inconclusive", f"{n[MIXED]} mixed", f"{n[PARTLY]} partly tested",
             f"{n[NO_DATA]} without data"]
    return ", ".join(parts) + f" (of {len(states)} claims; a claim holds only when all its parts have data and hold)"


def group_of(finding_id: str) -> ClaimGroup | None:
    """The claim group a findings row belongs to (the longest matching key)."""
    matches = [g for g in GROUPS if g.owns(finding_id)]
    return max(matches, key=lambda g: len(g.key)) if matches else None


def home_of(figure: str) -> ClaimGroup:
    """The group whose section draws ``figure``."""
    return next(g for g in GROUPS if figure in g.figures)


def figures_for(finding_id: str) -> tuple[str, ...]:
    """The figures that show a findings row: its group's own, then the ones it points at."""
    g = group_of(finding_id)
    return () if g is None else g.figures + g.see


def check() -> None:
    """Every registry figure has exactly one home and every name is a registry figure."""
    homes = [f for g in GROUPS for f in g.figures]
    named = set(homes) | {f for g in GROUPS for f in g.see} | set(FRONT)
    unknown = named - set(registry.FIGURES)
    if unknown:  # pragma: no cover - a table bug
        raise AssertionError(f"claims name unknown figures: {sorted(unknown)}")
    if sorted(homes) != sorted(registry.FIGURES):  # pragma: no cover - a table bug
        raise AssertionError("every figure needs exactly one home claim group")
