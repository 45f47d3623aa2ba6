"""The ingest layer: where datasets come from, how they are made, the metrics, and how an ingest runs.

Rooms (data flows sources → engine → metrics; capture writes datasets that sources read)::

    sources/   a dataset's layout on disk, the model registry and facts, head selection, and the
               sources an ingest reads (a local folder, a Hub branch) behind one protocol
    capture/   what *writes* datasets: ``qkdb sniff`` (a real model) and ``qkdb simulate`` (planted)
    metrics/   the seeds' per-head metrics: pure numpy, from vectors or their moments
    engine/    one head from files to rows, the worker pool, runtime tuning, a Ray cluster's tasks
    options.py every option of an ingest, in one dataclass

This package is the layer's facade: the names below are what the rest of qkdb uses, each loaded
on first use.
"""

from qkdb._lazy import facade

__getattr__, __dir__ = facade(__name__, {
    # options
    "IngestOptions": "qkdb.ingest.options",
    "FIT_ROWS": "qkdb.ingest.options",
    "PLASTICITY_PAIRS": "qkdb.ingest.options",
    "PLASTICITY_QUERIES": "qkdb.ingest.options",
    "FREQUENCY_PAIRS": "qkdb.ingest.options",
    # sources
    "Source": "qkdb.ingest.sources",
    "open_source": "qkdb.ingest.sources",
    "ModelSpec": "qkdb.ingest.sources.registry",
    "registry": "module:qkdb.ingest.sources.registry",
    "trained_context": "module:qkdb.ingest.sources.trained_context",
    "resolve_spec": "qkdb.ingest.sources.facts",
    "spec_notes": "qkdb.ingest.sources.facts",
    "recorded_facts_notes": "qkdb.ingest.sources.facts",
    "read_saver_state": "qkdb.ingest.sources.saver_state",
    "dataset_facts": "qkdb.ingest.sources.saver_state",
    "capture_record": "qkdb.ingest.sources.saver_state",
    "HeadSelection": "qkdb.ingest.sources.select",
    "read_metadata": "qkdb.ingest.sources.layout",
    "discover": "qkdb.ingest.sources.layout",
    "largest_position": "qkdb.ingest.sources.layout",
    "HEAD_DIR": "qkdb.ingest.sources.layout",
    "VALUE_BOUND": "qkdb.ingest.sources.layout",
    "hub": "module:qkdb.ingest.sources.hub",
    "hub_repo": "module:qkdb.ingest.sources.hub_repo",
    # capture
    "simulate": "qkdb.ingest.capture.simulate",
    "SimSpec": "qkdb.ingest.capture.simulate",
    "Ranges": "qkdb.ingest.capture.simulate",
    "Sinks": "qkdb.ingest.capture.simulate_sinks",
    "PLANTED_FILE": "qkdb.ingest.capture.simulate",
    "sniff": "qkdb.ingest.capture.sniff",
    "SniffOptions": "qkdb.ingest.capture.sniff",
    "resume_options": "qkdb.ingest.capture.sniff",
    "sniff_series": "qkdb.ingest.capture.series",
    "sample_path": "qkdb.ingest.capture.sniff_sample",
    "push_capture": "qkdb.ingest.capture.push",
    "SAMPLE_MODEL": "qkdb.ingest.capture.sniff_sample",
    # engine
    "run_groups": "qkdb.ingest.engine.pool",
    "collage_heads": "qkdb.ingest.engine.pool",
    "default_workers": "qkdb.ingest.engine.pool",
    "check_rope": "qkdb.ingest.engine.plane_layout",
    "check_pre_rope": "qkdb.ingest.engine.pre_rope",
    "plane_layout": "module:qkdb.ingest.engine.plane_layout",
    "tune_ingest_process": "qkdb.ingest.engine.runtime",
    "tune_command_line": "qkdb.ingest.engine.runtime",
    "RayCluster": "qkdb.ingest.engine.cluster",
    "ClusterCall": "qkdb.ingest.engine.cluster",
    "check_cluster_address": "qkdb.ingest.engine.cluster",
})
