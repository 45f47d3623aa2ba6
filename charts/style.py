"""Shared look of every figure: font, colours, sizes and number formats.

The seeds' conventions: queries blue and keys red (light = early position, dark = late),
``Blues``/``Reds`` heatmaps for Q/K position signal, one colour per model family, one per
taxonomy category and one per training phase. Colours are fixed for the names the registry
knows, so a family keeps its colour whichever models are ingested; unknown names get the next
colour of a fallback palette in sorted order (deterministic, too).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import altair as alt

# DejaVu Sans has every glyph the figures use (α μ ω × ³ − ·). A font vl-convert cannot find draws
# no text at all, so the family is a CSS list ending in the generic sans-serif: vl-convert and
# browsers take the first one installed (on Debian: `apt-get install fonts-dejavu-core`).
FONT = "DejaVu Sans"
FONT_STACK = "DejaVu Sans, Liberation Sans, Verdana, sans-serif"

Q_COLOR = "#2166ac"  # query: the dark end of Blues
K_COLOR = "#b2182b"  # key: the dark end of Reds

# Truncated Blues/Reds for points coloured by position (the seeds truncate the light end so early
# points stay visible on white).
Q_SCHEME = alt.SchemeParams(name="blues", extent=[0.3, 1.0])
K_SCHEME = alt.SchemeParams(name="reds", extent=[0.3, 1.0])

PANEL = 240  # width/height of one scatter panel in px
SMALL_PANEL = 130  # complement-collage panels (two subtitle lines of ~24 characters fit)
HEATMAP_CELL = 34  # px per heatmap cell

# Dark2 without its two greens side by side (Llama 3.1 and 3.2 were olive and teal: one family at
# a glance); no family takes the Q blue or the K red, which mean "query" and "key" everywhere.
FAMILY_COLORS = {
    "Llama 3.2": "#1b9e77",
    "Llama 3.1": "#a6761d",
    "Qwen3": "#7570b3",
    "Ministral3": "#d95f02",
    "Mistral": "#e6ab02",
    "SmolLM3": "#e7298a",
    "SmolLM2": "#66a61e",
}
# Background tints of the training phases: greys for pre-training, lilacs for long-context training.
# Pale and hue-free next to the Q blue / K red lines drawn over them (salmon under a red line hid it).
PHASE_COLORS = {
    "stage1": "#f0f0f0",
    "stage2": "#e2e2e2",
    "stage3": "#d4d4d4",
    "lc-4k-to-32k": "#e8e0f0",
    "lc-32k-to-64k": "#d3c4e6",
}
CATEGORIES = ("position-dominated", "q-positional", "k-positional", "content-focused", "mixed")
CATEGORY_COLORS = {
    "position-dominated": "#6a3d9a",
    "q-positional": Q_COLOR,
    "k-positional": K_COLOR,
    "content-focused": "#33a02c",
    "mixed": "#999999",
}
_FALLBACK = (
    "#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#9c755f", "#76b7b2", "#edc948", "#ff9da7", "#bab0ac",
    "#e15759",
)
_PHASE_FALLBACK = ("#ebe6dc", "#dcebe6", "#e6dceb", "#ebdce3")

# Notation. Vega text has no sub- or superscripts and Unicode has no subscript q, so the seeds'
# μ_Q^a and α_K cannot be typeset in a figure; they are named in words (with the column in
# tooltips). r_q and r_k keep the seeds' spelling: it is also the column name everywhere.
BIAS = "bias strength"
BIAS_E3 = "bias strength (×10³ per token)"
BIAS_DEF = "bias strength = (Q mean on axis a) × (K drift slope on a)"
MU_Q_A = "Q mean on axis a"
ALPHA_K_E3 = "K drift slope on a (×10³ per token)"
SLOPE_RATIO = "drift slope ratio, keys / queries"

CONFIG = {
    "font": FONT_STACK,
    "background": "white",
    "padding": 8,
    "title": {"fontSize": 15, "subtitleFontSize": 11, "subtitleColor": "#555555", "anchor": "start"},
    "axis": {"labelFontSize": 11, "titleFontSize": 12, "gridColor": "#e6e6e6"},
    "header": {"labelFontSize": 12, "titleFontSize": 12, "labelFontWeight": "bold"},
    "legend": {"labelFontSize": 11, "titleFontSize": 11},
    "view": {"stroke": "#bbbbbb"},
}


def configure(chart: alt.TopLevelMixin) -> alt.TopLevelMixin:
    """The chart with qkdb's configuration (font, sizes) attached, in place; a configured chart is final.

    In place because ``chart.configure()`` copies the chart, and a copy of a compound chart with
    parameters re-runs Altair's parameter lifting, which deep-copies every panel (~0.1 s for the
    interactive scatters). The charts passed here are the builders' own, fresh.
    """
    chart.config = alt.Config(**CONFIG)
    return chart


def _natural_key(name: str) -> list:
    # "llama3.2-1b" < "llama3.2-3b" < "llama3.2-11b", as the seeds order models by size.
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def natural_sorted(names: Iterable[str]) -> list[str]:
    return sorted(names, key=_natural_key)


def palette(names: Sequence[str], known: dict[str, str]) -> tuple[list[str], list[str]]:
    """(domain, range) for a colour scale: fixed colours for known names, fallbacks for the rest."""
    domain = list(dict.fromkeys(n for n in names if n is not None))
    free = [c for c in _FALLBACK if c not in known.values()]
    out, i = [], 0
    for name in domain:
        if name in known:
            out.append(known[name])
        else:
            out.append(free[i % len(free)])
            i += 1
    return domain, out


def family_scale(families: Sequence[str]) -> alt.Scale:
    domain, range_ = palette(sorted(set(f for f in families if f is not None)), FAMILY_COLORS)
    return alt.Scale(domain=domain, range=range_)


def phase_scale(phases: Sequence[str]) -> alt.Scale:
    domain = list(dict.fromkeys(phases))
    free = iter(_PHASE_FALLBACK * len(domain))
    return alt.Scale(domain=domain, range=[PHASE_COLORS.get(p) or next(free) for p in domain])


def category_scale() -> alt.Scale:
    return alt.Scale(domain=list(CATEGORIES), range=[CATEGORY_COLORS[c] for c in CATEGORIES])


def kind_scale() -> alt.Scale:
    return alt.Scale(domain=["Q", "K"], range=[Q_COLOR, K_COLOR])


def _signed(text: str) -> str:
    # A real minus sign, and no "−0.00" for a value that rounds to zero.
    if text.lstrip("+-").strip("0.%") == "":
        text = text.lstrip("+-")
    return text.replace("-", "−")


def fmt_r(x: float | None) -> str:
    """A correlation as the seeds print it: +0.48, −0.65."""
    if x is None:
        return "n/a"
    return _signed(f"{x:+.2f}")


def fmt_num(x: float | None, digits: int = 2) -> str:
    if x is None:
        return "n/a"
    return _signed(f"{x:.{digits}f}")


def fmt_pct(x: float | None, digits: int = 0) -> str:
    if x is None:
        return "n/a"
    return _signed(f"{100 * x:.{digits}f}%")


def fmt_p(p: float | None) -> str:
    """A p-value compactly: 'p 3e−41', 'p 0.0021', 'p 1'."""
    if p is None:
        return "p n/a"
    if p <= 0:
        return "p < 1e−300"
    if p < 1e-3:
        return "p " + f"{p:.0e}".replace("e-0", "e-").replace("-", "−")
    return f"p {p:.2g}"


def grey_for(strength: float | None, full: float = 0.5) -> str:
    """A text grey from #aaaaaa (strength 0) to #111111 (strength ≥ ``full``)."""
    t = 0.0 if strength is None else max(0.0, min(1.0, strength / full))
    v = round(0xAA + (0x11 - 0xAA) * t)
    return f"#{v:02x}{v:02x}{v:02x}"
