"""Torch's CPU math functions made safe to run on several threads before a capture's first forward pass.

ATen hands contiguous float32 and float64 unary ops (``sin``, ``cos``, ``exp``, ``sqrt``, …) to oneMKL's
vector math library (VML), one chunk per intra-op thread. oneMKL chooses each function's kernel
lazily, on that function's first call, and when that first call runs on several threads at once one
thread can run a low-accuracy kernel for its whole chunk, although high accuracy was asked for
(pytorch/pytorch#188792: oneMKL 2024.2, which torch's wheels bundle, on Intel CPUs; errors of
~1,000–4,000 ulp; calls after the first are right).

In a capture the first such call is the model's rotary embedding computing cos/sin for the first
text: a thread's share of positions got cos/sin of amplitude 0.999851–1.00007, and the capture's
check refused the layer (docs/benchmarks.md, "a flaky capture failure"). The model's attention had
computed with those cos/sin too, so the refusal was right, and nothing stored was wrong; but a
capture failed at random (about 1 process in 8 on an Intel Xeon VM; never seen on an AMD EPYC one).

:func:`settle` calls each function VML serves once, on one element, on the calling thread, before
the model exists: the choice is then made by one thread, and every later call, on any number of
threads, uses the accurate kernel. This is upstream's remedy (pytorch/pytorch#188791) done from
outside; it costs ~1 ms and changes no result of a correctly dispatched call.
"""

from __future__ import annotations

# The functions aten/src/ATen/cpu/vml.h sends to VML (IMPLEMENT_VML_MKL), for float and double.
# Calling one that a given torch build computes elsewhere costs a microsecond and does no harm.
VML_FUNCTIONS = ("acos", "asin", "atan", "cos", "erf", "erfc", "erfinv", "exp", "log", "log10", "log2",
                 "sin", "sqrt", "tan", "tanh", "trunc")

_settled = False


def settle(torch) -> None:
    """Resolve oneMKL's kernel choice for every VML function, float32 and float64, on this thread (once per process).

    Parameters
    ----------
    torch : module
        The imported ``torch``.
    """
    global _settled
    if _settled:
        return
    for dtype in (torch.float32, torch.float64):
        # one element: below ATen's grain size, so the call stays on this thread; 0.5 lies in every
        # function's domain (acos, asin, erfinv, the logarithms)
        x = torch.full((1,), 0.5, dtype=dtype)
        for name in VML_FUNCTIONS:
            getattr(torch, name)(x)
    _settled = True


__all__ = ["VML_FUNCTIONS", "settle"]
