"""What `qkdb publish` uploads and how long publish, a second publish and a pull take, for a warehouse of N models.

Run from the repository root:

    python benchmarks/sharing.py                 # the 23 registry models (~8 minutes the first time)
    python benchmarks/sharing.py --models 2      # a quick look

What it does (docs/benchmarks.md, "Sharing a warehouse", and docs/sharing.md, "Sizes", show one run):

1. Builds, once, a warehouse of the first N registry models simulated at the seeds' shape: 300 query
   heads each, the model's own layers, heads and head dimension, 1,024 vectors per head file (more
   than the 512 points per kind a head keeps), in the user cache dir. The vectors are deleted after
   each ingest: only the warehouse is kept.
2. Serves the test suite's fake Hugging Face Hub (``tests/helpers/hub_server.py``, real HTTP on
   127.0.0.1, the LFS upload protocol) and, through the real huggingface_hub client, times
   ``qkdb.api.publish`` (with its figures), the same publish again (nothing to send), and
   ``qkdb.api.pull`` into an empty warehouse with an empty Hugging Face cache.
3. Prints the bytes published per top-level folder of the repo (each table, the figures, the
   manifest, the card) and the three times. Loopback has no bandwidth limit: over a real network add
   the transfer of the bytes printed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from helpers.hub_server import FakeHub  # noqa: E402  (the test suite's fake Hub)
from ingest import log  # noqa: E402

VECTORS = 1024


def build(root: Path, n: int) -> Path:
    """The warehouse of the first ``n`` registry models (built once; later runs reuse it)."""
    from qkdb import api
    from qkdb.ingest import SimSpec, registry, simulate

    home = root / "home"
    specs = registry.load_registry()[:n]
    if (root / ".complete").exists():
        return home
    log(f"building a {len(specs)}-model warehouse in {root} (once) ...")
    for i, s in enumerate(specs):
        if (home / ".store" / s.model / "current").is_symlink():
            continue
        data = simulate(root / "data" / s.model, SimSpec(
            layers=s.n_layers, q_heads=s.n_q_heads, kv_heads=s.n_kv_heads, sample_q_heads=300,
            head_dim=s.head_dim or 128, vectors=VECTORS, seed=i, model=s.model, family=s.family,
            rope_theta=s.rope_theta or 1e4, nope_layers=s.nope_layers,
        ))
        api.ingest(data, s.model, home=home, refresh_findings=False)
        shutil.rmtree(root / "data")
        log(f"  {i + 1}/{len(specs)} {s.model}")
    api.refresh_findings(home)
    (root / ".complete").write_text("")
    return home


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=int, default=23, help="registry models in the warehouse (default 23: all)")
    args = ap.parse_args(argv)
    from huggingface_hub import constants
    from platformdirs import user_cache_path

    import qkdb

    constants.HF_HUB_DISABLE_XET = True  # (the fake speaks LFS, as a client without hf_xet)
    home = build(user_cache_path("qkdb") / "bench" / f"sharing-{args.models}x300x{VECTORS}", args.models)
    work = Path(tempfile.mkdtemp(prefix="qkdb-sharing-"))
    try:
        with FakeHub(page_size=1000) as hub:
            t0 = time.perf_counter()
            first = qkdb.api.publish("bench/warehouse", home=home, endpoint=hub.url, token="hf_write_token")
            t_publish = time.perf_counter() - t0
            t0 = time.perf_counter()
            again = qkdb.api.publish("bench/warehouse", home=home, endpoint=hub.url, token="hf_write_token")
            t_again = time.perf_counter() - t0
            assert not again.changed, "a second publish of the same warehouse sent something"
            t0 = time.perf_counter()
            pulled = qkdb.api.pull("bench/warehouse", home=work / "pulled", endpoint=hub.url,
                                   cache_dir=work / "hf-cache", token=False)
            t_pull = time.perf_counter() - t0
            files = hub.repos["bench/warehouse"].commits[first.commit].files
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sizes: dict[str, int] = {}
    for path, data in files.items():
        sizes[path.split("/")[0]] = sizes.get(path.split("/")[0], 0) + len(data)
    heads = sum(m["heads"] or 0 for m in __import__("json").loads(files["qkdb_warehouse.json"])["models"].values())
    print(f"{len(first.models)} models, {heads} query heads: {sum(sizes.values()) / 1e6:.1f} MB in {len(files)} files")
    for name, n in sorted(sizes.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<24} {n / 1e6:10.3f} MB")
    print(f"publish {t_publish:.1f} s (figures: {', '.join(first.figures) or 'none'}); again {t_again:.1f} s, "
          f"nothing sent; pull {t_pull:.1f} s (findings the publisher's: {pulled.findings_match})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
