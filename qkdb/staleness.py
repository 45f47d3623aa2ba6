"""Models whose RoPE facts changed since they were ingested: their planes were computed with other frequencies.

A model's ``rope_planes`` (and ``rotation.omega``, the complement's frequency grid and every RoPE
finding) follow from its RoPE layout: which dims rotate, how they pair, at which frequencies
(:mod:`qkdb.ingest.engine.plane_layout`). That layout can change without the data changing: the
registry gains a model's ``rope_scaling``, or a newer qkdb reads a capture's facts it used to
ignore (an older capture's partial rotary). :func:`stale_models` compares, for every ingested model,
the layout its planes were computed with (the ``models`` row's ``rotary_*``/``rope_*`` columns, or
for models ingested before qkdb recorded them, the ``rope_planes`` rows themselves) with the one an
ingest would use now, and names the command that recomputes it. :func:`rope_changed` is the same
comparison for the ingest itself, so that a model whose data and parameters are unchanged is still
recomputed when its layout is not.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from qkdb.errors import QkdbError

# The models columns a layout is read from (older partitions give NULL for the newer ones).
MODEL_COLUMNS = (
    "model", "source", "location", "revision", "head_dim", "n_layers", "rope", "rope_pairing", "rotary_dims",
    "rotary_offset", "rope_source", "rope_inv_freq", "layer_rope_inv_freq", "pre_rope", "trained_context",
    "trained_context_source",
)

PlanesReader = Callable[[str], list[tuple[int, int, float, str]]]  # model -> (layer, j, omega, omega_source)


@dataclass(frozen=True)
class StaleModel:
    model: str
    change: str  # what differs, in a few words
    command: str  # what recomputes it
    stale: str = "its rope_planes, rotation.omega and RoPE findings"  # what the change leaves stale

    def message(self) -> str:
        return (f"{self.model}: its RoPE facts changed since it was ingested ({self.change}); {self.stale} "
                f"are stale: `{self.command}` recomputes them")


def used_layouts(row: dict, planes: PlanesReader) -> dict:
    """Layer -> the layout the model's planes were computed with (None: no planes for that layer)."""
    from qkdb.ingest.engine.plane_layout import RopeLayout

    if row.get("rope") == "none":
        return {}
    if row.get("rope_source") is None:
        # Ingested before qkdb recorded its layouts: the planes themselves say what was used
        # (always the rotate-half or given pairing over the first 2·(max j + 1) dims).
        by_layer: dict[int, list[tuple[int, float, str]]] = {}
        for layer, j, omega, source in planes(row["model"]):
            by_layer.setdefault(layer, []).append((j, omega, source))
        out = {}
        for layer, rows in by_layer.items():
            rows.sort()
            fitted = any(s != "given" for _, _, s in rows)
            out[layer] = RopeLayout(row.get("rope_pairing") or "half", 0, 2 * len(rows),
                                    None if fitted else tuple(w for _, w, _ in rows), "fitted" if fitted else "given")
        return out
    n = row.get("n_layers") or 1
    per_layer = row.get("layer_rope_inv_freq")
    out = {}
    for layer in range(n):
        freq = per_layer[layer] if per_layer is not None and layer < len(per_layer) else row.get("rope_inv_freq")
        out[layer] = RopeLayout(row["rope_pairing"], int(row["rotary_offset"] or 0), int(row["rotary_dims"]),
                                None if freq is None else tuple(freq), row["rope_source"])
    return out


def _describe(before, after) -> str:
    """What differs between two layouts of one layer, in a few words."""
    if before is None or after is None:
        return "RoPE planes " + ("added" if before is None else "no longer computed")
    if before.pairing != after.pairing:
        return f"pairing {before.pairing} → {after.pairing}"
    if (before.offset, before.dims) != (after.offset, after.dims):
        return f"rotated dims {before.dims} → {after.dims}" + (
            f" from dim {after.offset}" if after.offset else "")
    if (before.omega is None) != (after.omega is None):
        return "frequencies " + ("fitted → " + after.source if before.omega is None else before.source + " → fitted")
    worst = max(max(a / b, b / a) for a, b in zip(before.omega, after.omega) if a > 0 and b > 0)
    return f"frequencies differ by up to {worst:.3g}×"


def rope_changed(spec, row: dict, planes: PlanesReader) -> str | None:
    """What changed between the layout a model was ingested with and ``spec``'s now; None when nothing did."""
    from qkdb.ingest.engine.plane_layout import layer_layout, same_layouts

    head_dim = row.get("head_dim")
    if not head_dim:
        return None
    if spec.pre_rope and row.get("pre_rope") is not True:
        # (qkdb before issue 37 read a --pre-rope capture's vectors as they were stored)
        return "a capture stored before RoPE was read as post-RoPE"
    used = used_layouts(row, planes)
    if spec.rope == "none":
        return None if not used else "the model has no RoPE now"
    for layer, before in sorted(used.items()):
        after = layer_layout(spec, layer, head_dim)
        # recorded and derived frequencies are both 'given' to the planes: compare what they hold
        if not same_layouts([_planes_view(before)], [_planes_view(after)]):
            return _describe(before, after) + (f" in layer {layer}" if len(used) > 1 else "")
    return None


def trained_context_changed(spec, row: dict) -> str | None:
    """What changed in the trained context ``frequency_usage``'s critical plane was computed over; None when nothing did."""
    if spec.rope == "none" or not row.get("head_dim") or row.get("trained_context") == spec.trained_context:
        return None
    if row.get("source") == "hub" and str(row.get("trained_context_source") or "").startswith(
            ("config", "simulate", "dataset")):
        return None  # (what a pushed capture recorded is not read again here: _metadata reads local datasets)
    def said(v) -> str:
        return "unknown" if v is None else f"{v:,} tokens"

    return f"trained context {said(row.get('trained_context'))} → {said(spec.trained_context)}"


def _planes_view(layout):
    from dataclasses import replace

    return None if layout is None else replace(layout, source="given" if layout.omega is not None else "fitted")


def _metadata(row: dict) -> tuple[dict, dict]:
    """(qkdb_dataset.json, the facts the dataset records) of a local dataset, as the ingest reads them."""
    from qkdb.ingest import dataset_facts, read_metadata, read_saver_state

    location = row.get("location")
    if row.get("source") in ("hub", None) or not location or not Path(location).is_dir():
        return {}, {}
    metadata = read_metadata(Path(location))
    return metadata, dataset_facts(metadata, read_saver_state(Path(location)))


def _resolvable(row: dict) -> bool:
    """Whether the facts of the model's dataset can be read here (a Hub model's always; a local one's while its folder exists)."""
    location = row.get("location")
    return row.get("source") in ("hub", None) or bool(location and Path(location).is_dir())


def current_spec(row: dict, parameters: dict | None):
    """The facts an ingest of this model would use now (None when they cannot be resolved here)."""
    from qkdb.ingest import IngestOptions, plane_layout, resolve_spec, trained_context

    given = dict((parameters or {}).get("facts_given") or {})
    if not _resolvable(row):
        return None  # the dataset is gone: what its qkdb_dataset.json said is unknown here
    try:
        metadata, recorded = _metadata(row)
        spec = trained_context.resolve(resolve_spec(row["model"], recorded, **given), given.get("trained_context"))
        return plane_layout.reconcile_options(spec, IngestOptions(**{k: v for k, v in given.items()
                                                                     if k.startswith("rope_")}), metadata)
    except (QkdbError, TypeError, ValueError):
        return None


def _command(row: dict, home: Path | None) -> str:
    at = f" --home {home}" if home is not None else ""
    if row.get("source") == "hub":
        from qkdb.ingest import registry

        spec = registry.find(row["model"])
        revision = row.get("revision")
        extra = f" --revision {revision}" if revision and (spec is None or revision != spec.dataset_revision) else ""
        return f"qkdb ingest --model {row['model']}{extra}{at}"
    if row.get("source") == "sample":
        return f"qkdb demo --force{at}"
    return f"qkdb ingest --path {row.get('location')} --model {row['model']}{at}"


def stale_models(con, home: Path | None = None) -> list[StaleModel]:
    """Every ingested model whose RoPE layout differs from the one an ingest would use now.

    ``con`` is a warehouse connection; ``home`` goes into the suggested commands.
    """
    cols = ", ".join(MODEL_COLUMNS)
    rows = [dict(zip(MODEL_COLUMNS, r)) for r in con.execute(f"select {cols} from models order by model").fetchall()]
    if not rows:
        return []
    rows = [r for r in rows if r.get("rope") != "none" and _resolvable(r)]
    # The runs' parameters only of the models whose facts can be resolved here (one file per run:
    # a warehouse of simulated or moved datasets reads none of them).
    # (The names as literals: DuckDB then skips the other models' folders, which a parameter would not let it.)
    names = ", ".join("'" + r["model"].replace("'", "''") + "'" for r in rows)
    params = dict(con.execute(
        f"select model, parameters from ingest_runs where model in ({names}) "
        "qualify row_number() over (partition by model order by finished_at desc) = 1"
    ).fetchall()) if rows else {}

    def planes(model: str):
        return con.execute(
            "select layer, j, min(omega), max(omega_source) from rope_planes where model = ? group by all order by all",
            [model],
        ).fetchall()

    out = []
    for row in rows:
        spec = current_spec(row, json.loads(params[row["model"]]) if params.get(row["model"]) else None)
        if spec is None:
            continue
        change = rope_changed(spec, row, planes)
        if change:
            out.append(StaleModel(row["model"], change, _command(row, home)))
        elif change := trained_context_changed(spec, row):
            out.append(StaleModel(row["model"], change, _command(row, home),
                                  "its frequency_usage (critical plane, low band) and rope.low_band"))
    return out
