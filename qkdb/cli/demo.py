"""``qkdb demo``: the whole main job offline, on real vectors, in one command.

Ingests the bundled sample (SmolLM2-135M-Instruct, captured with ``qkdb sniff``) into a demo
home of its own, prints the findings, writes the HTML report when the charts layer offers one,
and tells the user what to try next. The demo home is ``--home`` or, by default, the platform's
user data dir for ``qkdb-demo`` — never the user's own warehouse (``$QKDB_HOME`` is not read),
so trying the demo cannot touch real data.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from qkdb.cli.app import app
from qkdb.cli.common import demo_home_default, err



def say(message: str) -> None:
    """A message on stderr, never wrapped (the commands it suggests must stay copyable)."""
    typer.echo(message, err=True)


@app.command("demo")
def demo_command(
    home: Annotated[Optional[Path], typer.Option("--home", help="Warehouse home for the demo (default: a 'qkdb-demo' folder in the platform's user data dir; $QKDB_HOME is not used).", show_default=False)] = None,
    report: Annotated[Optional[Path], typer.Option("--report", "-o", help="Where to write the HTML report (default: report.html in the demo home).", show_default=False)] = None,
    no_report: Annotated[bool, typer.Option("--no-report", help="Skip the HTML report.")] = False,
    workers: Annotated[Optional[int], typer.Option("--workers", "-j", min=1, help="Worker processes for the ingest (default: cores).", show_default=False)] = None,
    force: Annotated[bool, typer.Option("--force", help="Re-ingest the sample even if the demo home already has it.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Ingest the bundled real sample (SmolLM2-135M) offline, print the findings and write the report."""
    from qkdb import api
    from qkdb.cli.progress import ingest_progress
    from qkdb.ingest import SAMPLE_MODEL, read_metadata, sample_path

    t0 = time.perf_counter()
    home = (home or demo_home_default()).expanduser().resolve()
    with sample_path() as sample:
        meta = read_metadata(sample)
        cap = meta.get("capture", {})
        say(
            f"qkdb demo: {meta.get('hf_model', SAMPLE_MODEL)} — {cap.get('q_heads', '?')} of its "
            f"{meta.get('n_layers', 0) * meta.get('n_q_heads', 0)} query heads, captured by `qkdb sniff` on the built-in pydoc corpus "
            f"({cap.get('texts', {}).get('n_texts', '?')} texts of {cap.get('max_length', '?')} tokens)"
        )
        say(f"warehouse home: {home}")
        with ingest_progress(quiet) as progress:
            result = api.ingest(
                path=sample, model=SAMPLE_MODEL, home=home, workers=workers, force=force, progress=progress,
                source="sample",
            )
    if result.unchanged:
        say(f"{SAMPLE_MODEL} is already in the demo home (use --force to ingest it again)")
    else:
        say(f"ingested {SAMPLE_MODEL}: {result.heads_done} heads in {result.seconds:.1f}s")

    _print_findings(home)
    _print_sinks(home)
    written = None if no_report else _write_report(home, report or home / "report.html")
    say(f"demo done in {time.perf_counter() - t0:.0f}s")
    _next_steps(home, written)


def _print_findings(home: Path) -> None:
    """The findings table exactly as ``qkdb findings`` prints it (stdout), or a summary without that view."""
    try:
        from qkdb.cli.findings import findings as findings_command
    except ImportError:
        findings_command = None
    say("")
    if findings_command is not None:
        from qkdb.cli.output import Format

        say("The seeds' findings, measured on this sample (qkdb findings):")
        findings_command(model=None, family=None, series=None, all_rows=False, format=Format.table, output=None, home=home)
        return
    from qkdb.cli.output import Format, write_result
    from qkdb.query import run_query

    say("Headline metrics of this sample (this installation has no findings view):")
    sql = (
        "select count(*) as heads, avg((bias_strength > 0)::int) as share_positive_bias, "
        "avg(abs(r_q_a)) as mean_abs_r_q_a, avg(abs(r_k_a)) as mean_abs_r_k_a from head_metrics"
    )
    with run_query(sql, home) as results:
        write_result(results[-1], Format.table)


def _print_sinks(home: Path) -> None:
    """One line on attention sinks (view sink_rate): the sample records each query's normaliser."""
    from qkdb import api

    con = api.connect(home, read_only=True)
    try:
        got = con.execute("select model, n_heads, n_sink_heads, sink_rate_pooled, sink_rate_per_text, per_text, "
                          "epsilon, context from sink_rate where status = 'measured'").fetchall()
    finally:
        con.close()
    for model, n, n_sink, pooled, per_text, why, eps, context in got:
        gu = (f"Gu et al.'s per-text rate {100 * per_text:.1f}%" if per_text is not None
              else f"Gu et al.'s per-text rate {why}")
        say(f"attention sinks ({model}): {n_sink} of {n} heads put more than {eps:g} of their attention on token 0 "
            f"over the first {context} positions ({100 * pooled:.1f}%, pooled); {gu} — `qkdb query \"from sink_rate\"`, "
            "docs/attention.md")


def _write_report(home: Path, path: Path) -> Path | None:
    """Write the offline HTML report when the charts layer has one; None (with a note) otherwise."""
    try:
        from qkdb.charts import build_report
    except ImportError:
        say("(no report: this installation's charts layer has no report)")
        return None
    from qkdb import api

    from qkdb.charts import render

    path = render.check_output(path.expanduser().resolve())
    con = api.connect(home, read_only=True)
    try:
        with err.status("writing the report"):
            result = build_report(con, title="qkdb demo: SmolLM2-135M-Instruct (bundled sample)")
    finally:
        con.close()
    path.write_text(result.html, encoding="utf-8")
    say(f"report: {path} ({len(result.shown)} figures)")
    return path


def _sniff_install() -> str:
    """How to add the sniff extra to this installation: from its checkout when it runs from one."""
    import qkdb

    root = Path(qkdb.__file__).resolve().parents[1]
    if (root / "pyproject.toml").is_file() and (root / "ingest").is_dir():  # an editable install of a checkout
        return f"pip install -e '{root}[sniff]'"
    return "pip install 'qkdb[sniff]'"


def _next_steps(home: Path, report: Path | None) -> None:
    # The README's "A session" block, with this machine's paths: pasted as is, it continues here.
    h = shlex.quote(str(home))
    lines = ["", "Continue with the demo's warehouse (paste these lines):"]
    if report is not None:
        lines.append(f"  # the report: {report.as_uri()}   (open it in a browser; it works offline)")
    lines += [
        f"  export QKDB_HOME={h}",
        "  qkdb findings",
        '  qkdb query "select layer, head, bias_strength, r_q_a, r_k_a from head_metrics order by bias_strength desc limit 5"',
        "  qkdb chart bias-vs-separation -o fig.png",
        "  qkdb report -o report.html",
        "  qkdb shell",
        "Your own data goes to the default warehouse, apart from the demo's (`unset QKDB_HOME` first):",
        "  qkdb ingest --model llama3.2-3b          # a model from the seeds, from the Hugging Face Hub",
        f"  {_sniff_install()} && qkdb sniff --model-path ./my-hf-model --out ./sniffed   # your own model",
    ]
    say("\n".join(lines))
