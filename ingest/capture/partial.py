"""A capture in progress on disk: resumable after any kill, and published only when complete.

``qkdb sniff --out DIR`` works in a hidden folder beside it, ``.DIR.partial/``:

``capture.json``
    What the capture is (:func:`identity`: every option that decides what it holds, the resolved
    device and dtype, the library versions, and hashes of the texts' tokens and of the plan).
    Written once, atomically, before the first forward pass.
``texts/NNNNNN.npy`` and ``texts/NNNNNN.json``
    One text's rows (every head file's, in the plan's order: :meth:`CapturePlan.text_layout`) and
    its check statistics. Each file is written under a temporary name, flushed to disk and renamed;
    the ``.json`` is renamed last, so a text is complete exactly when its ``.json`` exists. A kill at
    any moment leaves complete texts and, at worst, temporary files that the next run deletes.
``build/``
    The finished dataset being assembled; ``os.replace`` moves it to ``DIR`` in one step.

Texts run in order, so the complete texts are always the first ones; a run of the same command
continues with the first text that is not complete. What a reader sees at ``DIR`` is either nothing,
the previous capture (replaced only with ``--force``), or the whole new one.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

from qkdb.errors import SniffError

IDENTITY_FILE = "capture.json"

# Seconds to stop at a point of a capture, so that the crash tests can SIGKILL it there
# (tests/ingest/capture/test_sniff_resume.py): "rows_written:N" (text N's rows renamed into place, its
# statistics not yet), "assembling" (the first head file of the dataset written), "published" (the
# dataset moved to --out, the working folder not yet removed). Empty outside tests, which fill it
# in the process they run (as warehouse/store.py's PAUSES).
PAUSES: dict[str, float] = {}


def pause(point: str) -> None:
    delay = PAUSES.get(point)
    if delay:
        time.sleep(delay)


def partial_folder(out: Path) -> Path:
    out = Path(out)
    return out.parent / f".{out.name}.partial"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # (some file systems do not open folders)
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes | np.ndarray) -> None:
    """Write ``data`` (bytes, or an array as .npy) to ``path`` so that ``path`` holds either nothing (or its
    old bytes) or all of them."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        if isinstance(data, np.ndarray):
            # straight from the array, not through a bytes copy first (~0.1 s of a text's 190 MB of
            # rows, SmolLM2 at every position)
            np.save(fh, np.ascontiguousarray(data), allow_pickle=False)
        else:
            fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


class PartialCapture:
    """The hidden working folder of the capture ``out`` (see the module doc)."""

    def __init__(self, out: Path):
        self.out = Path(out)
        self.root = partial_folder(self.out)
        self.texts = self.root / "texts"

    # -- what it is -------------------------------------------------------------------------------

    @property
    def exists(self) -> bool:
        return (self.root / IDENTITY_FILE).is_file()

    def identity(self) -> dict:
        try:
            return json.loads((self.root / IDENTITY_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise SniffError(f"{self.root}: the partial capture's {IDENTITY_FILE} cannot be read ({exc}); remove the "
                             "folder or use --force to start again") from None

    def start(self, identity: dict) -> None:
        """Make the folder for a new capture (anything left of another one is removed first)."""
        if self.root.exists():
            shutil.rmtree(self.root)
        self.texts.mkdir(parents=True)
        write_atomic(self.root / IDENTITY_FILE, json.dumps(identity, indent=2, sort_keys=True).encode())

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    # -- texts ------------------------------------------------------------------------------------

    def _names(self, text: int) -> tuple[Path, Path]:
        return self.texts / f"{text:06d}.npy", self.texts / f"{text:06d}.json"

    def done(self, n_texts: int) -> int:
        """How many texts are complete (always the first ones); removes what a kill left half-written."""
        if not self.texts.is_dir():
            return 0
        for p in self.texts.iterdir():
            if p.name.endswith(".tmp"):
                p.unlink(missing_ok=True)
        count = 0
        while count < n_texts and all(p.is_file() for p in self._names(count)):
            count += 1
        # rows without their .json (killed between the two renames), and anything past a gap, are not complete
        for p in self.texts.iterdir():
            stem = p.name.split(".")[0]
            if stem.isdigit() and int(stem) >= count:
                p.unlink(missing_ok=True)
        return count

    def commit_text(self, text: int, block: np.ndarray, stats: dict, lse: np.ndarray | None = None) -> None:
        """Store one text's rows (and its query rows' normalisers) and statistics; complete once this returns."""
        rows, meta = self._names(text)
        if lse is not None:  # (before the rows: a text is complete once its rows and .json are there)
            write_atomic(self._lse_name(text), lse)
        write_atomic(rows, block)
        pause(f"rows_written:{text}")
        write_atomic(meta, json.dumps({"text": text, "rows": int(block.shape[0]), **stats}, sort_keys=True).encode())

    def rows(self, text: int) -> np.ndarray:
        """A complete text's rows (memory-mapped: read as they are used)."""
        return np.load(self._names(text)[0], mmap_mode="r", allow_pickle=False)

    def _lse_name(self, text: int) -> Path:
        return self.texts / f"{text:06d}.lse.npy"

    def lse(self, text: int) -> np.ndarray | None:
        """A complete text's normaliser per row (NaN for key rows), None when it was captured without."""
        path = self._lse_name(text)
        return np.load(path, allow_pickle=False) if path.is_file() else None

    def stats(self, text: int) -> dict:
        return json.loads(self._names(text)[1].read_text())

    # -- publishing --------------------------------------------------------------------------------

    def build_folder(self) -> Path:
        build = self.root / "build"
        if build.exists():
            shutil.rmtree(build)  # a kill during an earlier assembly
        build.mkdir()
        return build

    def publish(self, build: Path, replace: bool) -> None:
        """Move the finished ``build`` to ``out`` in one rename (the previous capture there only with ``replace``)."""
        out = self.out
        if out.is_dir() and any(out.iterdir()):
            if not replace:
                err = SniffError(f"{out}: something was written there during the capture; the capture stays in "
                                 f"{self.root} until it is gone (then run the command again), or --force replaces it")
                err.keep_partial = True
                raise err
            old = self.root / "old"
            if old.exists():
                shutil.rmtree(old)
            os.replace(out, old)
        elif out.is_dir():
            out.rmdir()
        os.replace(build, out)
        _fsync_dir(out.parent)
        pause("published")
        self.remove()


def differences(recorded: dict, now: dict, labels: dict[str, str]) -> list[str]:
    """One phrase per entry of ``now`` that differs from ``recorded``: ``--seed 3 (the partial capture's: 2)``."""
    out = []
    for key in sorted(set(recorded) | set(now)):
        a, b = recorded.get(key), now.get(key)
        if a != b:
            label = labels.get(key, key)
            out.append(f"{label} {_show(b)} (the partial capture's: {_show(a)})")
    return out


def _show(value) -> str:
    if value is None:
        return "not given"
    if isinstance(value, bool):
        return "on" if value else "off"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "…"


__all__ = ["IDENTITY_FILE", "PartialCapture", "differences", "partial_folder", "write_atomic"]
