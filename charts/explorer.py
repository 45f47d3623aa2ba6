"""The linked head explorer of the cross-model scatters (``rq-vs-rk``, ``bias-vs-separation``).

With ``interactive=True`` those figures gain what no paper figure has: a click on a head shows its
sampled Q and K points (table ``points``) on PC0/PC1 and on its {a, b} plane beside the scatter,
and dropdowns filter the scatter by family and by model. It is all Vega-Lite params inside the
spec, so it works in the offline report with no server and no request.

A page cannot carry every head's points (6,900 heads × 2 kinds × 30 points is ~15 MB), so a
deterministic sample of at most :data:`EXPLORER_HEADS` heads carries :data:`POINTS_PER_KIND` points
per kind, as CSV text (a third of the size of JSON objects). They are heads the scatter draws (its
own ``hash(model, layer, head)`` order, :data:`~qkdb.charts.data.MAX_HEAD_ROWS` heads), taken in that
order from the models where the drawn heads come first, as long as those models hold fewer than
:data:`EXPLORER_SCAN_HEADS` heads: reading ``points`` costs what the models' files hold, so the cost
stays bounded however many heads the warehouse has (on 140,000 heads, ~200 explorer heads from the
first ~25 models). They are outlined, and only they answer a click, so the detail panels are never
empty (an empty panel makes Vega warn about an infinite extent). Both figures build the same CSV
for the same models, which the report stores once.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence

import altair as alt
import duckdb

from qkdb.charts.data import MAX_HEAD_ROWS, rows
from qkdb.charts.style import K_SCHEME, Q_SCHEME

EXPLORER_HEADS = 600
EXPLORER_SCAN_HEADS = 8000  # the explorer reads the points of models holding at most about this many heads
POINTS_PER_KIND = 30
SELECT = "head_select"
FAMILY = "family_filter"
MODEL = "model_filter"
ALL = "all"
DETAIL = 210  # px, each detail panel

# The explorer's heads: the scatter's drawn heads, from the models that come first in their order
# while those models hold fewer than $scan heads (their points files are what the next query reads).
_HEADS = """
with h as (
    select model, layer, head, hash(model, layer, head) as k from head_metrics where list_contains($models, model)
), drawn as (
    select * from h qualify row_number() over (order by k) <= $drawn
), m as (
    select d.model, min(d.k) as first, any_value(t.n) as n
    from drawn d join (select model, count(*) as n from h group by model) t using (model)
    group by d.model
), admitted as (
    select model from (select model, sum(n) over (order by first, model rows unbounded preceding) - n as before from m)
    where before < $scan
)
select model, layer, head from drawn where model in (select model from admitted) order by k limit $n
"""

# Their points; the models are written into the query (a literal list lets DuckDB open only their
# files: a parameter or a join reads every model's).
_POINTS = """
select p.model, p.layer, p.head, p.kind, p.position, p.pc0, p.pc1, p.a, p.b
from points p join (select unnest($layers) as layer, unnest($heads) as head, unnest($models) as model) h
    using (model, layer, head)
where p.model in ({models})
  and p.pc0 is not null and p.pc1 is not null and p.a is not null and p.b is not null
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


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


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
        heads = rows(con, _HEADS, {"models": self.models, "drawn": MAX_HEAD_ROWS, "n": EXPLORER_HEADS,
                                   "scan": EXPLORER_SCAN_HEADS})
        got = []
        if heads:
            listed = ", ".join(_sql_str(m) for m in sorted({h["model"] for h in heads}))
            got = rows(con, _POINTS.format(models=listed), {
                "models": [h["model"] for h in heads], "layers": [h["layer"] for h in heads],
                "heads": [h["head"] for h in heads], "per_kind": POINTS_PER_KIND,
            }, limit=EXPLORER_HEADS * 2 * POINTS_PER_KIND)
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
    def family_expr() -> str:
        """The family dropdown alone (for marks of a whole family, which no model filter applies to)."""
        return f"({FAMILY} == '{ALL}' || datum.family == {FAMILY})"

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
