"""The capture settles oneMKL's kernel choice for torch's vector math before any model computes.

oneMKL picks each VML function's kernel on its first call; a first call split across threads can
run one thread's share with a low-accuracy kernel (pytorch/pytorch#188792; ``vector_math``'s
docstring). That race happens on some CPUs only, one process in several, so no test here can wait
for it. What is tested is the remedy's one requirement: in a capture, the first call of every
such function, in float32 and float64, has one element (it cannot be split across threads), and it
comes before the model's own calls — the rotary embedding's cos and sin among them.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.sniff

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from helpers import tiny_models as tm  # noqa: E402

from qkdb.ingest.capture import vector_math  # noqa: E402


class _CallLog(TorchDispatchMode):
    """(function, dtype, elements) of every CPU call of a VML function, in order."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__.rstrip("_")  # cos_ (in place) is cos
        x = args[0] if args else None
        if name in vector_math.VML_FUNCTIONS and isinstance(x, torch.Tensor) and x.device.type == "cpu" \
                and x.dtype in (torch.float32, torch.float64):
            self.calls.append((name, str(x.dtype).removeprefix("torch."), x.numel()))
        return func(*args, **(kwargs or {}))


@pytest.fixture
def unsettled(monkeypatch):
    """This process as if no capture had settled it yet (earlier tests in the worker did)."""
    monkeypatch.setattr(vector_math, "_settled", False)


def test_settle_calls_every_vml_function_once_on_one_element_per_dtype(unsettled):
    with _CallLog() as log:
        vector_math.settle(torch)
        vector_math.settle(torch)  # once per process
    expected = [(name, dtype, 1) for dtype in ("float32", "float64") for name in vector_math.VML_FUNCTIONS]
    assert log.calls == expected


def test_a_capture_settles_them_before_the_model_computes(unsettled, model_of, family_corpus, tmp_path):
    folder = model_of("llama")
    with _CallLog() as log:
        tm.sniff_family(folder, family_corpus, tmp_path / "out", n_texts=2, max_length=64, vectors_per_head=40)
    first: dict[tuple[str, str], int] = {}
    for name, dtype, n in log.calls:
        first.setdefault((name, dtype), n)
    assert set(first) == {(name, dtype) for dtype in ("float32", "float64") for name in vector_math.VML_FUNCTIONS}
    assert all(n == 1 for n in first.values()), {k: n for k, n in first.items() if n != 1}
    # the model did compute with them afterwards: its rotary embedding's cos and sin, one per position and dim
    rotary = [(name, n) for name, dtype, n in log.calls if name in ("cos", "sin") and dtype == "float32" and n > 1]
    assert {name for name, _ in rotary} == {"cos", "sin"}
