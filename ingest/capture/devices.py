"""Where ``qkdb sniff`` computes: the device, the compute dtype, and the little that differs on an accelerator.

This module is the one seam for device-specific code. The rest of the capture asks it

* which device and dtype to load the model with (:func:`resolve`, :meth:`Device.load_kwargs`),
  refusing in one line a device that is not there or a dtype it cannot run (:func:`probe`);
* to bring a text's rows to the host without making the next text wait (:meth:`Device.to_host`):
  on CUDA the copies are queued non-blocking into pinned memory behind the text's kernels and an
  event marks their end, which only the host side waits for; on the CPU the rows are already there;
* the peak memory it allocated (:meth:`Device.peak_memory`), and what to record about it
  (:meth:`Device.record`).

Everything CUDA-only is in :class:`Device`'s ``cuda`` branches below; MPS is handled like CUDA
except that its copies are synchronous (its non-blocking semantics are not those of CUDA streams).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from qkdb.errors import SniffError

COMPUTE_DTYPES = ("bfloat16", "float16", "float32")
DEVICE_FORMS = "auto, cpu, cuda, cuda:N or mps"
_DEVICE = re.compile(r"^(auto|cpu|mps|cuda)(?::(\d+))?$")


@dataclass
class Pending:
    """Rows on their way to the host: :meth:`wait` returns them once they are there."""

    tensors: list
    event: Any = None

    def wait(self) -> list:
        if self.event is not None:
            self.event.synchronize()
            self.event = None
        return self.tensors


@dataclass
class Device:
    """The device and compute dtype a capture runs with (see :func:`resolve`)."""

    torch: Any
    asked: str  # as given: auto, cpu, cuda, cuda:N, mps
    name: str  # resolved: cpu, cuda:N, mps
    dtype_name: str  # bfloat16, float16, float32
    device_map: str | None = None  # "auto": accelerate spreads the model over the visible GPUs (then the CPU)

    @property
    def type(self) -> str:
        return self.name.split(":")[0]

    @property
    def dtype(self):
        return getattr(self.torch, self.dtype_name)

    @property
    def accelerator(self) -> bool:
        """Rows stay on the device during a text and the host does its work while the next text runs."""
        return self.type != "cpu"

    def load_kwargs(self) -> dict:
        """``from_pretrained`` arguments: the dtype, and where the weights go."""
        kwargs: dict = {"dtype": self.dtype}
        if self.device_map is not None:
            kwargs["device_map"] = self.device_map
        elif self.accelerator:
            kwargs["device_map"] = self.name  # straight onto the device, not through host memory
        return kwargs

    def to_host(self, tensors: list) -> Pending:
        """Start copying ``tensors`` to host memory; the copies run behind the kernels already queued."""
        torch = self.torch
        if not self.accelerator or not any(t.device.type != "cpu" for t in tensors):
            return Pending(list(tensors))
        if self.type == "cuda":
            # pinned destination (non_blocking to the CPU allocates it from torch's caching host
            # allocator), then an event: the caller's thread never waits for the copy
            out = [t.to("cpu", non_blocking=True) for t in tensors]
            event = torch.cuda.Event()
            event.record()
            return Pending(out, event)
        return Pending([t.to("cpu") for t in tensors])

    def reset_peak(self) -> None:
        if self.type == "cuda":
            for i in range(self.torch.cuda.device_count()):
                self.torch.cuda.reset_peak_memory_stats(i)

    def peak_memory(self) -> int | None:
        """Bytes the device allocator held at most since :meth:`reset_peak` (all GPUs), None on the CPU."""
        torch = self.torch
        if self.type == "cuda":
            return int(sum(torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count())))
        if self.type == "mps":
            return int(torch.mps.driver_allocated_memory())
        return None

    def synchronize(self) -> None:
        if self.type == "cuda":
            self.torch.cuda.synchronize()
        elif self.type == "mps":
            self.torch.mps.synchronize()

    def record(self, model=None) -> dict:
        """``capture.device`` in ``qkdb_dataset.json``."""
        torch = self.torch
        out: dict = {"asked": self.asked, "device": self.name, "model_dtype": self.dtype_name,
                     "device_map": self.device_map}
        if self.type == "cuda":
            index = int(self.name.split(":")[1]) if ":" in self.name else 0
            out["gpu"] = torch.cuda.get_device_name(index)
            out["compute_capability"] = ".".join(map(str, torch.cuda.get_device_capability(index)))
            out["cuda_version"] = torch.version.cuda
        placed = getattr(model, "hf_device_map", None) if model is not None else None
        if self.device_map is not None and isinstance(placed, dict):
            # module -> device, folded to device -> how many modules (a 70B model has thousands)
            counts: dict[str, int] = {}
            for where in placed.values():
                counts[str(where)] = counts.get(str(where), 0) + 1
            out["placement"] = counts
        return out


def _accelerator(torch) -> str:
    if torch.cuda.is_available():
        return "cuda:0"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


def default_dtype(device_type: str, torch) -> str:
    """float32 on the CPU and MPS (exact), bfloat16 on a GPU that runs it natively, else float16."""
    if device_type == "cuda":
        try:
            native = torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:  # older torch: no emulation flag
            native = torch.cuda.is_bf16_supported()
        return "bfloat16" if native else "float16"
    return "float32"


def check_spec(device: str, model_dtype: str, device_map: str | None) -> None:
    """Refuse a malformed ``--device``/``--model-dtype``/``--device-map`` before anything is imported."""
    m = _DEVICE.match(device.strip())
    if m is None or (m.group(2) is not None and m.group(1) != "cuda"):
        raise SniffError(f"--device {device!r}: unknown device; expected {DEVICE_FORMS}", kind="usage")
    if model_dtype != "auto" and model_dtype not in COMPUTE_DTYPES:
        raise SniffError(f"--model-dtype {model_dtype!r}: expected auto, {', '.join(COMPUTE_DTYPES)}", kind="usage")
    if device_map not in (None, "auto"):
        raise SniffError(f"--device-map {device_map!r}: the one map qkdb sniff takes is 'auto' (accelerate's)",
                         kind="usage")
    if device_map is not None and m.group(1) not in ("auto", "cuda"):
        raise SniffError(f"--device-map auto spreads a model over GPUs; it does not go with --device {device}",
                         kind="usage")


def resolve(device: str, model_dtype: str, device_map: str | None, torch) -> Device:
    """The :class:`Device` for the options, or a one-line :class:`SniffError`: not there, or the dtype fails on it.

    ``auto`` is the first accelerator (CUDA, then MPS), else the CPU; ``--model-dtype auto`` is
    :func:`default_dtype`.
    """
    check_spec(device, model_dtype, device_map)
    kind, index = _DEVICE.match(device.strip()).groups()
    if kind == "auto":
        name = _accelerator(torch)
    elif kind == "cuda":
        if not torch.cuda.is_available():
            why = "this torch has no CUDA support" if torch.version.cuda is None else "no CUDA device is visible"
            raise SniffError(f"--device {device}: {why}", kind="system")
        n = torch.cuda.device_count()
        i = int(index or 0)
        if i >= n:
            raise SniffError(f"--device {device}: there {'is' if n == 1 else 'are'} {n} CUDA device"
                             f"{'' if n == 1 else 's'} (cuda:0–cuda:{n - 1})", kind="system")
        name = f"cuda:{i}"
    elif kind == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise SniffError(f"--device {device}: MPS (Apple GPU) is not available here", kind="system")
        name = "mps"
    else:
        name = "cpu"
    if device_map is not None and not name.startswith("cuda"):
        raise SniffError(f"--device-map auto spreads a model over GPUs, and --device {device} is {name}", kind="system")
    dtype = default_dtype(name.split(":")[0], torch) if model_dtype == "auto" else model_dtype
    found = Device(torch, device, name, dtype, device_map)
    probe(found)
    return found


def probe(device: Device) -> None:
    """Run a projection and causal attention in the compute dtype on the device; refuse it in one line if they fail.

    Cheap (a few small kernels) and the only reliable test: what a device supports depends on the
    hardware, the driver and the torch build (bfloat16 on a pre-Ampere GPU, MPS on an older macOS).
    """
    torch = device.torch
    if device.type == "cuda" and device.dtype_name == "bfloat16":
        try:
            native = torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:
            native = torch.cuda.is_bf16_supported()
        if not native:
            name = torch.cuda.get_device_name(torch.device(device.name))
            raise SniffError(f"--model-dtype bfloat16: {device.name} ({name}) does not compute in bfloat16 "
                             "natively; use --model-dtype float16 or float32", kind="system")
    try:
        x = torch.ones(1, 2, 4, 8, dtype=device.dtype, device=device.name)
        w = torch.ones(8, 8, dtype=device.dtype, device=device.name)
        q = x @ w
        out = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        ok = bool(torch.isfinite(out.float()).all())
    except (RuntimeError, TypeError, NotImplementedError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SniffError(f"--model-dtype {device.dtype_name}: {device.name} cannot compute in it ({first[:200]})",
                         kind="system") from None
    if not ok:
        raise SniffError(f"--model-dtype {device.dtype_name}: {device.name} gives non-finite results in it",
                         kind="system")


__all__ = ["COMPUTE_DTYPES", "DEVICE_FORMS", "Device", "Pending", "check_spec", "default_dtype", "probe", "resolve"]
