"""A figure of one model reads that model's file alone (charts.data.model_table), with the view's rows.

The catalog's view of a table binds every model's file; the collages ask for one model's rows.
Where the connection reads its warehouse's views as they are, the model's own file stands in for
the view, with the same rows and columns; shadowed (restricted to models, a test's table), the view.
"""

from __future__ import annotations

import pytest

import qkdb
from qkdb.charts import data as chart_data
from qkdb.charts.api import chart
from qkdb.charts.figures import ab_plane_collage, collage, complement_collage, pca_collage
from qkdb.warehouse.views import restrict_models

from helpers.chart_warehouse import POOLED_MODELS

COLLAGES = ("pca-collage", "ab-plane-collage", "complement-collage")


@pytest.mark.parametrize("table", ["points", "pca", "rotation", "complement"])
def test_one_models_file_gives_the_views_rows_of_that_model(con, table):
    for model in POOLED_MODELS:
        source = chart_data.model_table(con, table, model)
        assert source != table and f"model={model}" in source
        mine = con.execute(f"select * from {source} where model = ? order by all", [model]).fetchall()
        view = con.execute(f"select * from {table} where model = ? order by all", [model]).fetchall()
        assert mine == view and len(mine) > 0
        names = [d[0] for d in con.execute(f"select * from {source} limit 0").description]
        assert names == [d[0] for d in con.execute(f"select * from {table} limit 0").description]


def test_a_model_without_a_file_has_no_rows_and_a_restricted_connection_reads_the_view(chart_home):
    c = qkdb.api.connect(chart_home, read_only=True)
    try:
        assert c.execute(f"select count(*) from {chart_data.model_table(c, 'points', 'not-ingested')}").fetchall() == [(0,)]
        restrict_models(c, POOLED_MODELS[:1])
        assert chart_data.model_table(c, "points", POOLED_MODELS[0]) == "points"
    finally:
        c.close()


@pytest.mark.parametrize("name", COLLAGES)
def test_a_collage_is_the_same_from_its_models_file_and_from_the_view(con, monkeypatch, name):
    model = POOLED_MODELS[0]
    direct = chart(name, con, models=[model]).to_dict()
    calls = []

    def the_view(con, table, model):
        calls.append(table)
        return table

    for module in (collage, pca_collage, ab_plane_collage, complement_collage):
        monkeypatch.setattr(module, "model_table", the_view)
    assert chart(name, con, models=[model]).to_dict() == direct
    assert calls  # (the figure asked for its model's rows)
