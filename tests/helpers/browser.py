"""Debian's chromium, headless and offline, for the tests that draw qkdb's HTML in a real browser.

Flags from ../shared/NOTES.md. `.ci/run` installs chromium and sets QKDB_REQUIRE_BROWSER=1, so
there a missing browser fails these tests; elsewhere they skip, saying why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.environ.get("QKDB_REQUIRE_BROWSER") == "1":
        pytest.fail("QKDB_REQUIRE_BROWSER=1 but no chromium on PATH (.ci/run installs Debian's chromium)")
    pytest.skip("no chromium on PATH: `apt-get install chromium` to run the browser tests")


def run_chromium(tmp_path: Path, page: Path, *args: str, budget_ms: int = 60000) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    cmd = [
        chromium(), "--headless", "--no-sandbox", "--disable-gpu", f"--virtual-time-budget={budget_ms}",
        # Without these chromium phones home, and this closed network refuses it (noise, slowness).
        "--disable-background-networking", "--disable-component-update", "--no-first-run", "--disable-sync",
        f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--hide-scrollbars",
        *args, page.as_uri(),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def console(stderr: str) -> list[str]:
    """The page's console messages (chromium logs them as INFO:CONSOLE…)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]
