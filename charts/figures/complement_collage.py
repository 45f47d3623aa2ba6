"""Rotation figure 08: the complement of {a, b} for one head, one panel per SVD pair (5×6 for 30 pairs).

Source: table ``points`` (complement scores ``c0 … c59``, stored only for the collage heads: by
default the seeds' ``random.Random(42)`` sample of four heads per model, plus any given to
``qkdb ingest --collage-heads``) and ``complement`` (per pair: variance share, fitted frequency
ω, the strength ρ² of the phase–position relation at ω, and the Holm-adjusted p-value of its
test). RoPE rotation planes show as rings ("donuts"), Q and K on the same ring. Both axes of a
panel share one symmetric range so rings look round.

``active`` is a significance test (docs/rotation-planes.md): on real captures nearly every pair
passes it, including pairs whose relation is far too weak to see. So the panels do not say
"active"; each prints its ρ² (``omega_r_squared``, the effect size) and its adjusted p-value, and
its title darkens with ρ², so what the eye should find in a panel is stated next to it.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.data import (
    POINTS_PER_KIND,
    check_heads,
    head_label,
    model_heads,
    model_table,
    parse_heads,
    resolve_one_model,
    rows,
    scalar,
    seed_sample,
    values,
)
from qkdb.charts.caption import attach, count
from qkdb.charts.figures.collage import position_colors
from qkdb.charts.style import SMALL_PANEL, fmt_num, fmt_p, fmt_pct, grey_for
from qkdb.errors import ChartError

COLUMNS = 6
POINTS_PER_KIND_HERE = min(POINTS_PER_KIND, 300)  # 30 panels: fewer points keep the render quick

_HAS_SCORES = """
select distinct layer, head from {points} where model = $model and c0 is not null order by layer, head
"""

_STRENGTH = """
select c.layer, c.head, max(c.omega_r_squared * c.ring) as strength,
       arg_max(c.pair, c.omega_r_squared * c.ring) as pair
from {complement} c
where c.model = $model and (c.layer, c.head) in (
    select (layer, head) from {points} where model = $model and c0 is not null
)
group by c.layer, c.head
"""

_PAIRS = """
select pair, var_frac, angle_r, ring, omega, omega_r_squared, qk_accuracy, statistic, p_adjusted, active,
       (select plane_alpha from params) as alpha
from {complement}
where model = $model and layer = $layer and head = $head
order by pair
"""


def _pick_head(con: duckdb.DuckDBPyConnection, model: str, head) -> tuple[tuple[int, int], list | None]:
    """The head to draw: the one asked for, else the stored head with the strongest ring (and the ranking that chose it)."""
    has_scores = _HAS_SCORES.format(points=model_table(con, "points", model))
    with_scores = [(r["layer"], r["head"]) for r in rows(con, has_scores, {"model": model})]
    heads = parse_heads(head)
    ingest_hint = (
        f"re-ingest {model!r} with `qkdb ingest ... --collage-heads l{{LL}}h{{HH}} --force` "
        "(complement scores are stored for 4 heads per model by default, drawn with random.Random(42))"
    )
    if heads:
        if len(heads) > 1:
            raise ChartError("complement-collage shows one head; give one --head")
        check_heads(con, model, heads)
        if heads[0] not in with_scores:
            have = ", ".join(f"{l}.{h}" for l, h in with_scores) or "none"
            l, h = heads[0]
            raise ChartError(
                f"head {l}.{h} of model {model!r} has no stored complement scores (heads with them: {have}); "
                + ingest_hint.replace("{LL}", f"{l:02d}").replace("{HH}", f"{h:02d}"), kind="not_found",
            )
        return heads[0], None
    if not with_scores:
        raise ChartError(
            f"model {model!r} has no head with stored complement scores (points.c0 is NULL everywhere); "
            + ingest_hint.replace("{LL}h{HH}", "03h07"), kind="not_found",
        )
    return _strongest_ring(con, model, with_scores)


def _strongest_ring(con: duckdb.DuckDBPyConnection, model: str, with_scores: list[tuple[int, int]]):
    """The stored head with the clearest ring, and every stored head's best pair: ((layer, head), [(layer, head, pair, strength)]).

    A pair's ring strength is ρ² × ring: how strongly its angle follows position at its ω (RoPE turns a
    ring with position) times how ring-shaped it is (1 for a ring, π/4 for a Gaussian blob). The
    seeds' random.Random(42) sample often lands on a head of blobs while another stored head shows
    clear rings; ties (and heads without ω) keep the seeds' order.
    """
    strength = _STRENGTH.format(points=model_table(con, "points", model), complement=model_table(con, "complement", model))
    best = {(r["layer"], r["head"]): r for r in rows(con, strength, {"model": model})}
    order = [h for h in seed_sample(model_heads(con, model)) if h in with_scores]
    order += [h for h in with_scores if h not in order]
    ranked = sorted(order, key=lambda h: -(best.get(h, {}).get("strength") or -1.0))
    return ranked[0], [(h[0], h[1], best.get(h, {}).get("pair"), best.get(h, {}).get("strength")) for h in ranked]


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.ConcatChart:
    """A grid of the head's complement SVD pairs (s_2i, s_2i+1), Q blues / K reds by position."""
    model = resolve_one_model(con, models, "complement-collage")
    (layer, hd), ranking = _pick_head(con, model, head)
    pairs = rows(con, _PAIRS.format(complement=model_table(con, "complement", model)),
                 {"model": model, "layer": layer, "head": hd})
    if not pairs:
        raise ChartError(
            f"head {layer}.{hd} of model {model!r} has no complement pairs (ingested with --no-complement?); "
            f"re-ingest with `qkdb ingest --model {model} --force`", kind="not_found",
        )
    n = len(pairs)
    cols = ", ".join(f"c{i}" for i in range(2 * n))
    data = rows(con, f"""
        select kind, case when kind = 'q' then position end as q_position,
               case when kind = 'k' then position end as k_position, {cols}
        from {model_table(con, "points", model)}
        where model = $model and layer = $layer and head = $head and c0 is not null
        qualify row_number() over (partition by kind order by hash(idx)) <= $per_kind
        order by kind desc, idx
    """, {"model": model, "layer": layer, "head": hd, "per_kind": POINTS_PER_KIND_HERE})
    base = alt.Chart()
    color, fill = position_colors()  # one legend each, never merged (see collage.position_colors)
    panels = []
    for p in pairs:
        i = p["pair"]
        xs, ys = f"c{2 * i}", f"c{2 * i + 1}"
        extent = max((abs(d[c]) for d in data for c in (xs, ys) if d[c] is not None), default=1.0) * 1.05
        scale = alt.Scale(domain=[-extent, extent], nice=False)
        axis = alt.Axis(labels=False, ticks=False, title=None, grid=False)
        x = alt.X(f"{xs}:Q", scale=scale, axis=axis)
        y = alt.Y(f"{ys}:Q", scale=scale, axis=axis)
        q = base.transform_filter("datum.kind == 'q'").mark_circle(size=5, opacity=0.55).encode(
            x=x, y=y,
            color=color,
        )
        k = base.transform_filter("datum.kind == 'k'").mark_circle(size=5, opacity=0.55).encode(
            x=x, y=y,
            fill=fill,
        )
        strength = p["omega_r_squared"]
        tested = p["p_adjusted"] is not None
        panels.append(alt.layer(q, k).properties(
            width=SMALL_PANEL, height=SMALL_PANEL,
            title=alt.TitleParams(
                f"pair {i}",
                subtitle=[
                    f"ρ² {fmt_num(strength)} · " + (fmt_p(p["p_adjusted"]) if tested else ("flagged" if p["active"] else "not flagged")),
                    f"ω {fmt_num(p['omega'], 3)} · {fmt_pct(p['var_frac'], 1)} of var.",
                ],
                fontSize=11, subtitleFontSize=10, anchor="middle",
                color=grey_for(strength), subtitleColor=grey_for(strength, full=0.25),
            ),
        ))
    n_pass = sum(bool(p["active"]) for p in pairs)
    pass_share = sum(p["var_frac"] or 0 for p in pairs if p["active"])
    plane = scalar(con, "select plane_var_fraction from rotation where model = $m and layer = $l and head = $h",
                   {"m": model, "l": layer, "h": hd})
    alpha = pairs[0]["alpha"]
    tested = any(p["p_adjusted"] is not None for p in pairs)
    test = (f"pass the phase–position test (Holm-adjusted p < {alpha:g})" if tested
            else "carry the stored active flag (ingested before the test; re-ingest to apply it)")
    # The subtitle says what is drawn (and why this head); the numbers are the caption's.
    title = alt.TitleParams(
        f"Complement of {{a, b}}: {model} {head_label(layer, hd)}",
        subtitle=[
            "Planar rotation (seed 002 figure 08): SVD pairs (s₂ᵢ, s₂ᵢ₊₁) of the centred complement, "
            f"the d − 2 dimensions outside {{a, b}} ({fmt_pct(None if plane is None else 1 - plane)} of the variance).",
            "Q blue, K red, light = early, dark = late position; per pair: ρ² = strength of the phase–position relation "
            "at the fitted ω (rad/token), its p-value, share of complement variance.",
            "Titles darken with ρ²: passing the phase–position test means not chance, not visible.",
            *(["The head: of those with stored complement scores, the one with the strongest ring "
               "(ρ² × ring of its best pair); --head draws another."] if ranking else []),
        ],
    )
    strongest = sorted((p for p in pairs if p["omega_r_squared"] is not None), key=lambda p: -p["omega_r_squared"])[:3]
    r2 = sorted(p["omega_r_squared"] for p in pairs if p["omega_r_squared"] is not None)
    median = r2[len(r2) // 2] if r2 else None
    chosen = ""
    if ranking:
        _, _, best_pair, strength = ranking[0]
        p0 = next((p for p in pairs if p["pair"] == best_pair), None)
        others = [f"{head_label(l, h)} {fmt_num(v)}" for l, h, _, v in ranking[1:]]
        chosen = (f", the strongest ring of the {count(len(ranking), 'head')} with stored complement scores"
                  + (f" (pair {best_pair}: ρ² {fmt_num(p0['omega_r_squared'])} × ring {fmt_num(p0['ring'])} = "
                     f"{fmt_num(strength)}" + (f"; the others' best: {', '.join(others)}" if others else "") + ")"
                     if p0 is not None and strength is not None else ""))
    caption = (
        f"Head {head_label(layer, hd)} of {model}{chosen}: {n_pass} of {count(n, 'complement pair')} {test}, holding "
        f"{fmt_pct(pass_share)} of the complement variance. "
        f"Their ρ² ranges {fmt_num(r2[0] if r2 else None)}–{fmt_num(r2[-1] if r2 else None)} (median {fmt_num(median)}); "
        "the strongest relations: "
        + ", ".join(f"pair {p['pair']} (ρ² {fmt_num(p['omega_r_squared'])}, ω {fmt_num(p['omega'], 3)})" for p in strongest)
        + ". A pair turning many times over the positions shows a ring in shape, not a colour gradient."
    )
    built = alt.concat(*panels, columns=COLUMNS, spacing=10, data=values(data)).properties(title=title)
    return attach(built, caption)
