"""The wheel installs everything under the `qkdb` import name, with the SQL and registry as data."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_holds_only_the_qkdb_package(tmp_path):
    # No build isolation: tests never fetch; the test extra installs setuptools and wheel.
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("qkdb-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert top == {"qkdb", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}
    for required in (
        "qkdb/cli/app.py",
        "qkdb/ingest/sources/layout.py",
        "qkdb/ingest/sources/models.csv",
        "qkdb/warehouse/catalog.py",
        "qkdb/charts/__init__.py",
        "qkdb/sql/head_metrics.sql",
    ):
        assert required in names, required
    # every source module of the repository's package folders is in the wheel
    for folder, pkg in (("ingest", "qkdb/ingest"), ("warehouse", "qkdb/warehouse"), ("charts", "qkdb/charts"),
                        ("sql", "qkdb/sql"), ("qkdb", "qkdb")):
        for src in (ROOT / folder).rglob("*.py"):
            if "__pycache__" in src.parts:
                continue
            rel = src.relative_to(ROOT / folder).as_posix()
            assert f"{pkg}/{rel}" in names, f"{folder}/{rel} missing from the wheel"
        for sql in (ROOT / folder).glob("*.sql"):
            assert f"{pkg}/{sql.name}" in names


def test_console_script_is_declared():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'qkdb = "qkdb.__main__:main"' in text
