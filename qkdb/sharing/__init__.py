"""Sharing what was measured: a warehouse published to a Hub dataset repo, and pulled back into a home.

Rooms::

    layout.py    where each thing lives in the repo (the warehouse's own layout, plus the manifest and card)
    manifest.py  ``qkdb_warehouse.json``: per model its fingerprint, files and hashes, source dataset and
                 revision, RoPE facts, parameters; the versions and the findings' params
    card.py      the dataset card (README.md): models, the findings table, a few figures, how to pull
    publish.py   ``qkdb publish``: the tables (never raw vectors), manifest, card and figures in one commit
    pull.py      ``qkdb pull``: models added as an ingest adds them (atomic, locked, never over other data)

This is glue, like :mod:`qkdb.pipeline`: it reaches the warehouse, the charts and the Hub client
(``qkdb.ingest.sources.hub_repo``) through their facades. docs/sharing.md is the user's page.
"""
