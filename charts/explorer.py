"""The linked head explorer of the cross-model scatters (``rq-vs-rk``, ``bias-vs-separation``).

With ``interactive=True`` those figures gain what no paper figure has: a click on a head shows its
sampled Q and K points (table ``points``) on PC0/PC1 and on its {a, b} plane beside the scatter,
and dropdowns filter the scatter by family and by model. It is all Vega-Lite params inside the
spec, so it works in the offline report with no server and no request.

A page cannot carry every head's points (6,900 heads × 2 kinds × 30 points is ~15 MB), so a
deterministic sample of :data:`EXPLORER_HEADS` heads carries :data:`POINTS_PER_KIND` points per
kind, as CSV text (a third of the size of JSON objects). They are the first heads of the scatter's
own ``hash(model, layer, head)`` order, hence always drawn; they are outlined, and only they answer
a click, so the detail panels are never empty (an empty panel makes Vega warn about an infinite
extent). Both figures build the same CSV for the same models, which the report stores once.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence

import altair as alt
import duckdb

from qkdb.charts.data import rows
from qkdb.charts.style import K_SCHEME, Q_SCHEME

EXPLORER_HEADS = 600
POINTS_PER_KIND = 30
SELECT = "head_select"
FAMILY = "family_filter"
MODEL = "model_filter"
ALL = "all"
DETAIL = 210  # px, each detail panel

_POINTS = """
with h as (
    select model, layer, head from heads
    where list_contains($models, model)
    order by hash(model, layer, head)
    limit $n
)
select p.model, p.layer, p.head, p.kind, p.position, p.pc0, p.pc1, p.a, p.b
from points p join h using (model, layer, head)
where p.pc0 is not null and p.pc1 is not null and p.a is not null and p.b is not null
qualify row_number() over (partition by p.model, p.layer, p.head, p.kind order by hash(p.idx)) <= $per_kind
order by p.model, p.layer, p.head, p.kind desc, p.idx
"""

_FIELDS = ("m", "l", "h", "k", "t", "p0", "p1", "a", "b")

# Within shared(), figures over the same models reuse one Explorer (one points query, one CSV).
_SHARED: contextvars.ContextVar[dict | None] = contextvars.ContextVar("qkdb_explorers", default=None)


@contextlib.contextmanager
def shared() -> Iterator[None]:
    """Let the figures built inside reuse each other's explorers (the report builds two)."""
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def explorer(con: duckdb.DuckDBPyConnection, models: Sequence[str]) -> "Explorer":
    """The Explorer of ``models``: a new one, or inside :func:`shared` the one already built."""
    cache = _SHARED.get()
    if cache is None:
        return Explorer(con, models)
    key = (id(con), tuple(models))
    if key not in cache:
        cache[key] = Explorer(con, models)
    return cache[key]


def _g(x: float) -> str:
    # Three significant digits: the detail panels are ~200 px, finer values only grow the page.
    return f"{x:.3g}"


class Explorer:
    """The sampled points of the chosen models' explorer heads, and the chart pieces that use them.

    Parameters
    ----------
    con
        Warehouse connection.
    models
        The figure's models, in display order; a head's model is sent as its index in this list.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, models: Sequence[str]):
        self.models = list(models)
        index = {m: i for i, m in enumerate(self.models)}
        got = rows(con, _POINTS, {"models": self.models, "n": EXPLORER_HEADS, "per_kind": POINTS_PER_KIND},
                   limit=EXPLORER_HEADS * 2 * POINTS_PER_KIND)
        self.keys = {(d["model"], d["layer"], d["head"]) for d in got}
        lines = [",".join(_FIELDS)]
        lines += [
            f"{index[d['model']]},{d['layer']},{d['head']},{d['kind']},{d['position']},"
            f"{_g(d['pc0'])},{_g(d['pc1'])},{_g(d['a'])},{_g(d['b'])}"
            for d in got
        ]
        self.csv = "\n".join(lines)
        positions = [d["position"] for d in got] or [0, 1]
        self.position_domain = [min(positions), max(positions)]

    def mark(self, data: list[dict]) -> list[dict]:
        """Add the selection key (``m`` the model's index, ``l`` layer, ``h`` head: the points' own
        fields) and ``pts`` (1: the head's points are embedded) to scatter rows."""
        index = {m: i for i, m in enumerate(self.models)}
        for d in data:
            d["m"], d["l"], d["h"] = index[d["model"]], d["layer"], d["head"]
            d["pts"] = int((d["model"], d["layer"], d["head"]) in self.keys)
        return data

    @staticmethod
    def initial(data: list[dict]) -> dict | None:
        """The head selected when the page opens: the first drawn head with points."""
        first = next((d for d in data if d.get("pts")), None)
        return None if first is None else {"m": first["m"], "l": first["layer"], "h": first["head"]}

    def filters(self, families: Sequence[str]) -> list[alt.Parameter]:
        """The family and model dropdowns."""
        return [
            alt.param(name=FAMILY, value=ALL, bind=alt.binding_select(options=[ALL, *families], name="family ")),
            alt.param(name=MODEL, value=ALL, bind=alt.binding_select(options=[ALL, *self.models], name="model ")),
        ]

    @staticmethod
    def filter_expr() -> str:
        return f"({FAMILY} == '{ALL}' || datum.family == {FAMILY}) && ({MODEL} == '{ALL}' || datum.model == {MODEL})"

    def pickable(self, base: alt.Chart, x, y, color, name: str, tooltip) -> alt.Chart:
        """The explorer heads, outlined; clicks on them select (the selection lists ``name``)."""
        return (
            base.transform_filter("datum.pts == 1")
            .mark_circle(size=24, opacity=0.8, stroke="#222222", strokeWidth=0.6)
            .encode(x=x, y=y, color=color, tooltip=tooltip)
            .properties(name=name)
        )

    @staticmethod
    def highlight(base: alt.Chart, x, y) -> alt.Chart:
        """A ring around the selected head."""
        return (
            base.transform_filter(alt.ParameterPredicate(param=SELECT, empty=False))
            .mark_point(shape="circle", size=260, filled=False, stroke="#000000", strokeWidth=2.2)
            .encode(x=x, y=y)
        )

    @staticmethod
    def selection(views: Sequence[str], initial: dict | None) -> alt.TopLevelSelectionParameter:
        # One top-level parameter naming its views: the same selection in several panels without
        # Altair's duplicate-parameter warning. Not clearable: an empty selection empties the panels.
        return alt.TopLevelSelectionParameter(
            name=SELECT,
            select=alt.PointSelectionConfig(type="point", fields=["m", "l", "h"], on="click", nearest=True, clear=False),
            value=[initial] if initial else alt.Undefined,
            views=list(views),
        )

    def detail(self, header: str) -> alt.VConcatChart:
        """The selected head: a header line (``header``: a Vega expression over the scatter row) and
        its points on PC0/PC1 and on {a, b}. The header reads the enclosing chart's data."""
        selected = alt.ParameterPredicate(param=SELECT, empty=False)
        lines = alt.Chart().transform_filter(selected).transform_calculate(
            line1="datum.model + ' · layer ' + datum.layer + ', head ' + datum.head", line2=header
        )
        text = alt.layer(*(
            lines.mark_text(align="left", baseline="top", fontSize=12, fontWeight="bold" if i == 1 else "normal")
            .encode(x=alt.value(0), y=alt.value(16 * (i - 1)), text=alt.Text(f"line{i}:N"))
            for i in (1, 2)
        )).properties(width=DETAIL, height=30, view=alt.ViewBackground(stroke=None))
        parse = {f: "number" for f in _FIELDS if f != "k"}
        points = alt.Chart(alt.InlineData(values=self.csv, format=alt.DataFormat(type="csv", parse=parse))).transform_filter(
            selected
        ).transform_calculate(
            q_position="datum.k == 'q' ? datum.t : null", k_position="datum.k == 'k' ? datum.t : null"
        )
        color = alt.Color("q_position:Q", scale=alt.Scale(scheme=Q_SCHEME, domain=self.position_domain), legend=None)
        fill = alt.Fill("k_position:Q", scale=alt.Scale(scheme=K_SCHEME, domain=self.position_domain), legend=None)

        def scatter(xf, yf, xt, yt, title):
            x = alt.X(f"{xf}:Q", title=xt, scale=alt.Scale(zero=False, nice=True))
            y = alt.Y(f"{yf}:Q", title=yt, scale=alt.Scale(zero=False, nice=True), axis=alt.Axis(minExtent=30))
            tip = [alt.Tooltip("k:N", title="kind"), alt.Tooltip("t:Q", title="position")]
            q = points.transform_filter("datum.k == 'q'").mark_circle(size=18, opacity=0.75).encode(x=x, y=y, color=color, tooltip=tip)
            k = points.transform_filter("datum.k == 'k'").mark_circle(size=18, opacity=0.75).encode(x=x, y=y, fill=fill, tooltip=tip)
            return alt.layer(q, k).properties(
                width=DETAIL, height=int(DETAIL * 0.8),
                title=alt.TitleParams(title, fontSize=12, anchor="start"),
            )

        return alt.vconcat(
            text,
            scatter("p0", "p1", "PC0", "PC1", "its Q (blue) and K (red) on PC0 / PC1"),
            scatter("a", "b", "axis a (drift)", "axis b (separation)", "on its {a, b} plane"),
            spacing=12,
        )

    def note(self, n_drawn: int) -> str:
        """The subtitle line that tells the reader what to click."""
        which = ("a head" if len(self.keys) >= n_drawn
                 else f"an outlined head ({len(self.keys):,} of those drawn carry their points)")
        return (f"Click {which} to see its sampled Q/K points on the right; dropdowns below filter by family and "
                "model.")
