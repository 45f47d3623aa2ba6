"""The attention function ``qkdb sniff`` registers: what it keeps, and the check behind every row.

transformers hands every attention layer's ``query`` and ``key`` — after RoPE, after any q/k norm,
after anything else the model's attention code does to them — to a function looked up by name in
``transformers.AttentionInterface``. :class:`Recorder` is that function. For each sampled row it

1. reads the row exactly as attention received it;
2. divides out the model's known position-dependent scalings that are not RoPE
   (:class:`PositionScaling`, e.g. Ministral3's llama-4 query scale) unless told to keep them;
3. **establishes** the layer's RoPE on the first text (:mod:`qkdb.ingest.capture.rope_layout`): the
   cos/sin the layer's attention module was called with give the rotated width, frequencies and
   amplitude; the one rotation (pairing, offset of the rotated slice) of the layer's own
   projection output (:mod:`qkdb.ingest.capture.qk_sources`: its ``q_proj``/``k_proj``, fused or
   latent projections, through its q/k norm) that reproduces the rows attention receives gives
   the layout — or none, for a layer without RoPE;
4. **checks** every row of every text against that recomputation in float64. Anything else
   between the projection and attention (a scale, a norm after RoPE, another rotation) makes the
   two differ, and the capture stops with an error naming the layer, instead of storing a
   positional signal nothing records;
5. stores it, or (``pre_rope``) its pre-rotation vector, into arrays allocated once for the whole
   capture.

Then it hands everything on to the attention implementation :mod:`qkdb.ingest.capture.attention_backend`
chose, recording the ``scaling`` and any ``softcap`` attention was called with.

Why arrays allocated up front: the per-text chunks the first version kept (a few tens of KB per head
file and text) were the only long-lived allocations made between forward passes. glibc raises its
mmap threshold after the first large ``free`` (dynamic threshold), so the forward passes' multi-MB
temporaries come from the heap, and every text's small survivors pinned the heap above them: peak
memory grew by ~13 times the data kept (1.2 → 3.5–4.1 GB from 1 to 16 texts on SmolLM2-135M).
With one array per head file, allocated before the first text, nothing survives a forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from qkdb.errors import SniffError
from qkdb.ingest.capture import qk_sources, sampling
from qkdb.ingest.capture.devices import Pending
from qkdb.ingest.capture.kernel_lse import KernelLse
from qkdb.ingest.capture.normaliser import sampled_lse
from qkdb.ingest.capture.rope_layout import (
    NO_ROTATION, SNAP_TOLERANCE, CosSin, FrequencySource, GatheredPE, NotRoPE, Rotation, candidates, gather_pe,
    interpret_pe, pe_rows,
)

# Relative difference (max |captured − recomputed| / max |recomputed| over a head's rows of a text)
# below which a row counts as the recomputation. float32 rounding of RoPE gives ~1e-7; a real
# scale or a missing rotation gives 1e-3 and more.
CHECK_TOLERANCE = 1e-4
# In half precision the model rounds every product of RoPE (and the projection, and the norm) to
# its dtype: the recomputation from the same rounded inputs differs by about one unit in the last
# place of the largest values (measured on every family of the coverage matrix: up to 7.2e-3 in
# bfloat16, whose epsilon is 2^-7 = 7.8e-3, and 1.15e-3 in float16, epsilon 2^-10 = 9.8e-4). The
# tolerances are ~4-5 of them: above rounding, below the factors the check exists for (Llama 4's
# 1.22; Ministral3's 1.07 from 16k, which is known and divided out).
HALF_TOLERANCES = {"bfloat16": 3e-2, "float16": 5e-3}


def check_tolerance(compute_dtype: str) -> float:
    """The check's relative tolerance for rows computed in ``compute_dtype``."""
    return HALF_TOLERANCES.get(compute_dtype, CHECK_TOLERANCE)



class StopForward(Exception):
    """Raised after the deepest sampled layer: the rest of the forward pass is not needed."""


@dataclass(frozen=True)
class PositionScaling:
    """A factor the model multiplies queries (or keys) by that depends on position and is not RoPE.

    ``llama4``: ``1 + beta · ln(1 + floor(position / original_max_position_embeddings))`` —
    transformers' ``get_llama_4_attn_scale``, applied to the queries of every layer by Ministral3
    (and Mistral4) after RoPE: 1 below ``original_max_position_embeddings``, then growing by steps
    (Ministral-3: beta 0.1, 16,384 → ×1.07 from 16k, ×1.22 at 128k).
    """

    kind: str
    type: str
    layers: tuple[int, ...]
    params: dict

    FORMULAS = {"llama4": "1 + beta * ln(1 + floor(position / original_max_position_embeddings))"}

    def factor(self, positions: np.ndarray) -> np.ndarray:
        """The factor at each position (float64)."""
        if self.type != "llama4":  # pragma: no cover - only known types are constructed
            raise ValueError(self.type)
        beta = float(self.params["beta"])
        orig = float(self.params["original_max_position_embeddings"])
        return 1.0 + beta * np.log1p(np.floor(np.asarray(positions, np.float64) / orig))

    def record(self, removed: bool, max_position: int | None) -> dict:
        """The entry of ``position_scaling`` in ``qkdb_dataset.json``."""
        out = {
            "kind": self.kind,
            "type": self.type,
            "formula": self.FORMULAS[self.type],
            **self.params,
            "layers": list(self.layers),
            "removed": removed,
        }
        if max_position is not None:
            out["max_factor_in_capture"] = float(self.factor(np.asarray([max_position]))[0])
        return out


def relative_difference(a: np.ndarray, b: np.ndarray) -> float:
    """max |a − b| / max |b| (absolute when b is all zero)."""
    if a.size == 0:
        return 0.0
    scale = float(np.max(np.abs(b)))
    diff = float(np.max(np.abs(a - b)))
    return diff / scale if scale > 0 else diff


@dataclass
class LayerRope:
    """What one layer was established to do (on the first text that reached it)."""

    rotation: Rotation | None  # None: not established (--unchecked, or no projection to follow)
    variants: dict[str, int] = field(default_factory=dict)  # kind -> index into its sources' variants
    labels: dict[str, str] = field(default_factory=dict)  # kind -> the variant's description
    cos_sin: CosSin | None = None  # as given on the establishing text (None: no cos/sin)
    omega: np.ndarray | None = None  # the frequencies recorded (rad/token)
    omega_source: str | None = None  # the model buffer they equal, None when read from cos/sin only
    amplitude: float | None = None
    amplitude_source: str | None = None
    shared_key: bool = False  # every key head's rotated slice is one vector (MLA)
    reason: str | None = None  # why the layout was not established


@dataclass
class LayerMaterial:
    """What one layer gave during one text's forward pass, for the host side (tensors until :meth:`host`).

    ``obs[kind]`` the rows attention received at the check sample's positions, file after file;
    ``pre[kind]`` per variant of the layer's sources, all heads' pre-RoPE rows (n_cu, heads, d) at
    the union of the layer's check positions (None for a variant that does not apply, or was not
    evaluated); ``pe`` the position embeddings at :func:`pe_rows` of what is needed (or None when
    the layer got none, or the :class:`NotRoPE` saying why they are not a rotation); ``keys`` every KV
    head's key rows at the check union (the first text only: multi-head latent attention's shared key).
    """

    layer: int
    obs: dict
    pre: dict
    pe: object
    keys: object = None

    def tensors(self) -> list:
        out = [t for t in self.obs.values()]
        out += [t for variants in self.pre.values() for t in variants if t is not None]
        if isinstance(self.pe, GatheredPE):
            out += self.pe.tensors()
        if self.keys is not None:
            out.append(self.keys)
        return out

    def with_tensors(self, tensors: list) -> LayerMaterial:
        it = iter(tensors)
        obs = {k: next(it) for k in self.obs}
        pre = {k: [None if t is None else next(it) for t in variants] for k, variants in self.pre.items()}
        pe = self.pe.with_tensors([next(it), next(it)]) if isinstance(self.pe, GatheredPE) else self.pe
        keys = next(it) if self.keys is not None else None
        return LayerMaterial(self.layer, obs, pre, pe, keys)


@dataclass
class _TextState:
    """One text's indices and what the host side builds for it (each text its own: the host side of one text
    runs while the next text's forward pass fills the next state)."""

    text: int
    seq_len: int
    replay: bool
    idx: dict = field(default_factory=dict)  # layer -> its rows' indices (begin_text)
    cs: dict = field(default_factory=dict)  # layer -> CosSin of this text
    stats: dict = field(default_factory=lambda: {"max_difference": {}, "rows_checked": 0})
    pre: dict = field(default_factory=dict)  # the layer being checked: kind -> variant -> (heads, n_cu, d)


@dataclass
class TextWork:
    """One text's forward pass, handed to the host side (:meth:`Recorder.finish_text`)."""

    state: _TextState
    pieces: list  # [(start, stop, rows tensor)] of the text's block (accelerator), or []
    buffer: object  # the text's block on the host (CPU), or None
    materials: list  # [LayerMaterial] (accelerator), or []
    pending: Pending | None = None
    n_pieces: int = 0
    lse: object = None  # the text's normaliser per row (NaN for key rows), filled on the CPU path
    lse_pieces: list = field(default_factory=list)  # [(start, stop)] of the lse tensors after the pieces (accelerator)

    @property
    def text(self) -> int:
        return self.state.text

    @property
    def replay(self) -> bool:
        return self.state.replay


def _ensure_numpy(t) -> np.ndarray:
    return t.float().numpy() if hasattr(t, "numpy") else np.asarray(t)


class Recorder:
    """The registered attention function, the check, and the rows kept.

    Parameters
    ----------
    torch
        The torch module.
    backend
        :class:`qkdb.ingest.capture.attention_backend.Backend`: the attention everything is handed on to.
    plan
        :class:`qkdb.ingest.capture.plan.CapturePlan`: the head files and their positions per text.
    nope_layers : set of int
        Layers the config says apply no RoPE (what the layers do is established, and wins).
    scalings : list of PositionScaling
        Known non-RoPE position-dependent factors.
    remove_scalings : bool
        Divide them out of the stored rows (the default) or keep the rows as attention saw them.
    pre_rope : bool
        Store pre-rotation vectors.
    check : bool
        Compare rows with the recomputation (``--unchecked`` turns it off; the layout is then
        still looked up on the first text where the projection can be followed, and left unknown
        where it cannot).
    attn_modules : dict of int to module
        Each layer's attention module, for the hooks.
    dims : tuple of int
        ``(n_q_heads, n_kv_heads, head_dim)``.
    frequencies : FrequencySource
        The model's ``inv_freq`` buffers, to record exact frequencies.
    tolerance : float
        The check's relative tolerance (:func:`check_tolerance` of the compute dtype).
    check_rows : int or None
        Rows per head file and text the check compares after the first text (None: all); the first
        text, which establishes each layer's RoPE, is checked in full.
    seed : int
        Seeds the check sample (:func:`qkdb.ingest.capture.sampling.check_sample`).
    device : qkdb.ingest.capture.devices.Device or None
        Where the model computes. On an accelerator (or with ``deferred``), rows stay on the device
        during a text and everything the host does runs in :meth:`finish_text`, which the capture
        calls from another thread while the next text runs; on the CPU the check runs layer by
        layer and the rows are gathered straight into a reused host block.
    storage_dtype : str
        The stored vectors' numpy dtype.
    normalise : bool
        Compute each sampled query row's softmax normaliser (:mod:`.normaliser`).
    """

    def __init__(self, torch, backend, plan, *, nope_layers, scalings, remove_scalings, pre_rope, check,
                 attn_modules, dims, frequencies: FrequencySource, tolerance: float = CHECK_TOLERANCE,
                 check_rows: int | None = None, seed: int = 0, device=None, deferred: bool | None = None,
                 storage_dtype: str = "float32", normalise: bool = True):
        self.torch = torch
        self.backend = backend
        self.plan = plan
        self.by_layer: dict[int, dict[str, list[int]]] = {}
        for layer, head, kind in plan.files:
            self.by_layer.setdefault(layer, {"q": [], "k": []})[kind].append(head)
        self.last_layer = max(self.by_layer)
        self.nope_layers = set(nope_layers)
        self.scalings = {(s.kind, layer): s for s in scalings for layer in s.layers}
        self.remove_scalings = remove_scalings
        self.pre_rope = pre_rope
        self.check = check
        self.tolerance = float(tolerance)
        self.check_rows = check_rows
        self.seed = int(seed)
        self.n_q, self.n_kv, self.d = dims
        self.frequencies = frequencies
        self.device = device
        self.deferred = bool(device is not None and device.accelerator) if deferred is None else bool(deferred)
        self.storage_dtype = np.dtype(storage_dtype)
        self.normalise = bool(normalise)
        self.kernel_lse = KernelLse(torch, backend.name) if self.normalise else None
        self.active = False
        self._ts = _TextState(-1, 0, False)
        self.sliding: dict[int, int | None] = {}
        self.scale: dict[int, float] = {}  # layer -> the scaling attention was called with
        self.softcap: dict[int, float | None] = {}
        self.normalisers: dict[int, dict] = {}  # layer -> how its rows' lse was computed (capture.normaliser)
        self.seen_layers: set[int] = set()
        self.rope: dict[int, LayerRope] = {}
        self.max_difference: dict[int, float] = {}  # layer -> largest relative difference checked
        self.rows_checked = 0
        self.unchecked: dict[int, str] = {}  # layer -> why it could not be checked
        self._handles = []
        self._sources: dict[int, qk_sources.LayerSources] = {}
        # where each (layer, kind)'s files lie in a text's block: (first file index, last + 1)
        self._ranges: dict[tuple[int, str], tuple[int, int]] = {}
        for layer, heads in self.by_layer.items():
            for kind in ("q", "k"):
                idx = [plan.index[(layer, h, kind)] for h in heads[kind]]
                if idx:
                    if idx != list(range(idx[0], idx[-1] + 1)):  # pragma: no cover - the plan's order guarantees it
                        raise ValueError("a layer's files of one kind must be contiguous in the plan")
                    self._ranges[(layer, kind)] = (idx[0], idx[-1] + 1)
        for layer in self.by_layer:
            attn = attn_modules.get(layer)
            if attn is None:
                self._sources[layer] = qk_sources.LayerSources(reason="its attention module was not found")
                continue
            self._handles.append(attn.register_forward_pre_hook(self._pre_hook(layer), with_kwargs=True))
            sources = qk_sources.sources_of(attn, self.n_q, self.n_kv, self.d)
            self._sources[layer] = sources
            for module, key in sources.hooks:
                self._handles.append(module.register_forward_hook(self._proj_hook(layer, key)))
        # the CPU's reused host blocks (two: one being filled, one being written)
        self._blocks: list = []
        self._block_turn = 0
        # per text
        self._proj: dict[int, dict[str, object]] = {}
        self._pe: dict[int, object] = {}
        self._pieces: list = []
        self._lse_pieces: list = []
        self._lse = None  # the text's lse per row (NaN for key rows), on the CPU path
        self._lse_why: dict[int, str | None] = {}  # layer -> why its lse was recomputed (None: the kernel's)
        self._materials: list = []
        self._buffer = None

    def close(self) -> None:
        """Remove the hooks from the model."""
        for h in self._handles:
            h.remove()
        self._handles = []

    # -- per text -------------------------------------------------------------------------------

    def _check_sample(self, f, text: int) -> np.ndarray:
        """Indices into the file's rows of ``text`` that the check compares (all on the establishing text)."""
        count = int(self.plan.counts[self.plan.index[f], text])
        if not self.check and self.rope.get(f[0]) is not None:
            return np.zeros(0, np.int64)
        n = None if f[0] not in self.rope else self.check_rows
        return sampling.check_sample(count, n, self.seed, text, *f)

    def begin_text(self, text: int, length: int, replay: bool = False) -> None:
        """Prepare the index of every row the text's forward pass gathers (``replay``: gather, keep nothing)."""
        ts = self._ts = _TextState(int(text), int(length), replay)
        for layer, heads in self.by_layer.items():
            entry: dict = {}
            cu_parts, keep_parts = [], []
            for kind in ("q", "k"):
                hs, ps, chs, cps, counts = [], [], [], [], []
                for h in heads[kind]:
                    f = (layer, h, kind)
                    pos = self.plan.positions_of(f, text)
                    sel = self._check_sample(f, text)
                    hs.append(np.full(len(pos), h, np.int64))
                    ps.append(pos)
                    chs.append(np.full(len(sel), h, np.int64))
                    cps.append(pos[sel])
                    counts.append(len(sel))
                    cu_parts.append(pos[sel])
                    keep_parts.append(pos)
                if heads[kind]:
                    entry[kind] = {"heads": np.concatenate(hs), "positions": np.concatenate(ps),
                                   "check_heads": np.concatenate(chs), "check_positions": np.concatenate(cps),
                                   "check_counts": counts}
            cu = np.unique(np.concatenate(cu_parts)).astype(np.int64) if cu_parts else np.zeros(0, np.int64)
            need = np.unique(np.concatenate([cu, *keep_parts])) if self.pre_rope else cu
            entry["cu"] = cu
            entry["pe_rows"] = pe_rows(need, ts.seq_len)
            entry["need"] = need
            ts.idx[layer] = entry
        self._proj = {}
        self._pe = {}
        self._pieces = []
        self._lse_pieces = []
        self._materials = []
        self._buffer = None
        # (no array at all without a normaliser: --no-lse costs nothing per text)
        self._lse = np.full(self.plan.text_rows(text), np.nan) if self.normalise else None
        if not self.deferred:
            rows = self.plan.text_rows(text)
            need = max((self.plan.text_rows(e) for e in range(self.plan.n_texts)), default=0)
            if not self._blocks:
                dtype = self.device.dtype if self.device is not None else self.torch.float32
                self._blocks = [self.torch.empty((need, self.d), dtype=dtype) for _ in range(2)]
            self._buffer = self._blocks[self._block_turn][:rows]
            self._block_turn ^= 1
        self.active = True

    def end_text(self) -> TextWork:
        """The text's forward pass is over: what the host side needs, its copies to the host started."""
        self.active = False
        work = TextWork(self._ts, self._pieces, self._buffer, self._materials, lse=self._lse,
                        lse_pieces=[(a, b) for a, b, _ in self._lse_pieces])
        if self.deferred:
            tensors = [t for _, _, t in self._pieces] + [t for _, _, t in self._lse_pieces]
            work.n_pieces = len(self._pieces)
            for m in self._materials:
                tensors += m.tensors()
            work.pending = self.device.to_host(tensors) if self.device is not None else Pending(tensors)
        self._pieces, self._lse_pieces, self._materials, self._proj, self._pe = [], [], [], {}, {}
        self._lse = None
        return work

    # -- hooks: only the rows needed are gathered, where the forward pass computes ---------------

    def _index(self, values: np.ndarray, device):
        t = self.torch.from_numpy(np.ascontiguousarray(values, np.int64))
        if device.type == "cuda":
            t = t.pin_memory()
        return t.to(device, non_blocking=True)

    def _rows(self, tensor, positions: np.ndarray):
        """Rows ``positions`` of a tensor of one text ((1, seq, w) or (seq, w)), as an (n, w) tensor where it is."""
        t = tensor.detach()
        seq_len = self._ts.seq_len
        t = t.reshape(seq_len, t.shape[-1]) if t[..., 0].numel() == seq_len else t[0]
        return t.index_select(0, self._index(positions, t.device))

    def _pre_hook(self, layer: int):
        def grab(module, args, kwargs):
            if not self.active:
                return
            pe = kwargs.get("position_embeddings")
            if pe is None or (isinstance(pe, (tuple, list)) and any(p is None for p in pe)):
                self._pe[layer] = None
                return
            try:
                rows = self._ts.idx[layer]["pe_rows"]
                device = pe.device if hasattr(pe, "device") else pe[0].device
                self._pe[layer] = gather_pe(pe, self._index(rows, device), self._ts.seq_len)
            except NotRoPE as exc:
                self._pe[layer] = exc
        return grab

    def _proj_hook(self, layer: int, key: str):
        def grab(module, args, output):
            if self.active and (self.check or layer not in self.rope):
                out = output[0] if isinstance(output, tuple) else output
                self._proj.setdefault(layer, {})[key] = self._rows(out, self._ts.idx[layer]["cu"])
        return grab

    # -- the attention function -----------------------------------------------------------------

    def __call__(self, module, query, key, value, attention_mask, *args, **kwargs):
        layer = getattr(module, "layer_idx", None)
        if self.active and layer is not None and layer in self.by_layer:
            done = self._kernel(module, layer, query, key, value, attention_mask, args, kwargs)
            self._layer(module, layer, query, key, kwargs, attention_mask,
                        kernel_lse=None if done is None else done[1])
            if layer == self.last_layer:
                raise StopForward
            if done is not None:
                return done[0], None
        elif self.active and layer is not None:
            self.seen_layers.add(layer)
        if self.active and layer == self.last_layer:
            raise StopForward
        return self.backend.forward(module, query, key, value, attention_mask, *args, **kwargs)

    def _kernel(self, module, layer: int, query, key, value, attention_mask, args, kwargs):
        """``(output, logsumexp)`` from the attention kernel when it gives the layer's normaliser
        (:mod:`.kernel_lse`), else None (and why, once per layer, for capture.normaliser)."""
        if self.kernel_lse is None or not self.by_layer[layer]["q"]:
            return None
        why = self.kernel_lse.why_not(module, query, key, value, attention_mask, kwargs)
        done = None
        if why is None:
            with self.torch.no_grad():
                done = self.kernel_lse.attend(self.backend.forward, module, query, key, value, attention_mask,
                                              args, kwargs)
            if done is None:
                why = "the kernel's output differed from sdpa's on this model"
        self._lse_why.setdefault(layer, why)
        return done

    def _gather_heads(self, states, heads: np.ndarray, positions: np.ndarray, out=None):
        """Rows (head, position) of a (1, heads, seq, d) tensor, in one gather (``out``: a host block slice to fill).

        The vectors of a layer's states are contiguous (last stride 1) and start at multiples of d
        whenever the states are (a view of) a (1, seq, heads, d) or (1, heads, seq, d) tensor, as in
        every model qkdb knows: then they are rows of one (n, d) strided view and ``index_select``
        takes them (~20× faster than indexing with two index tensors). Anything else is indexed.
        """
        s = states[0]
        st = s.stride()
        d = s.shape[-1]
        if st[-1] == 1 and st[0] % d == 0 and st[1] % d == 0 and st[0] > 0 and st[1] > 0:
            rows = heads * (st[0] // d) + positions * (st[1] // d)
            n = (s.shape[0] - 1) * (st[0] // d) + (s.shape[1] - 1) * (st[1] // d) + 1
            flat = s.as_strided((n, d), (d, 1))
            idx = self._index(rows, s.device)
            if out is not None:
                return self.torch.index_select(flat, 0, idx, out=out)
            return flat.index_select(0, idx)
        got = s[self._index(heads, s.device), self._index(positions, s.device)]
        if out is not None:
            out.copy_(got)
            return out
        return got

    def _layer(self, module, layer: int, query, key, kwargs, mask=None, kernel_lse=None) -> None:
        if query.shape[0] != 1:
            raise SniffError("internal: qkdb sniff runs one text per forward pass")
        if query.shape[-1] != self.d or key.shape[-1] != self.d:
            raise SniffError(f"layer {layer}: attention receives queries of {query.shape[-1]} and keys of "
                             f"{key.shape[-1]} dims, but the config gives head_dim {self.d}: qkdb sniff cannot "
                             "tell how this model's heads are laid out")
        if query.shape[1] != self.n_q or key.shape[1] != self.n_kv:
            raise SniffError(f"layer {layer}: attention receives {query.shape[1]} query and {key.shape[1]} key heads, "
                             f"but the config gives {self.n_q} and {self.n_kv}: qkdb sniff cannot tell how this "
                             "model's heads are laid out")
        self.seen_layers.add(layer)
        sw = kwargs.get("sliding_window", getattr(module, "sliding_window", None))
        self.sliding.setdefault(layer, int(sw) if sw else None)
        scaling = kwargs.get("scaling")
        # sdpa's own default when no scaling is passed
        self.scale.setdefault(layer, float(scaling) if scaling is not None else self.d ** -0.5)
        softcap = kwargs.get("softcap")
        self.softcap.setdefault(layer, float(softcap) if softcap else None)
        if softcap and not (self.backend.name.startswith("eager") or self.backend.name.startswith("flash")):
            raise SniffError(f"layer {layer}: attention is called with logit softcapping (softcap {softcap:g}) that "
                             "the config does not declare (attn_logit_softcapping): qkdb sniff handed it on to "
                             f"{self.backend.name}, which does not support it")
        idx = self._ts.idx[layer]
        offsets = self.plan.text_layout(self._ts.text)
        obs = {}
        for kind, states in (("q", query), ("k", key)):
            if kind not in idx:
                continue
            ix = idx[kind]
            first, last = self._ranges[(layer, kind)]
            a, b = int(offsets[first]), int(offsets[last])
            if self.deferred:
                self._pieces.append((a, b, self._gather_heads(states, ix["heads"], ix["positions"])))
            elif b > a:
                self._gather_heads(states, ix["heads"], ix["positions"], out=self._buffer[a:b])
            if len(ix["check_positions"]):
                obs[kind] = self._gather_heads(states, ix["check_heads"], ix["check_positions"])
            if kind == "q" and b > a and self.normalise:
                self._normalise(module, layer, query, key, mask, ix, a, b, kernel_lse)
        establishing = layer not in self.rope
        pre: dict[str, list] = {}
        outputs = self._proj.pop(layer, {})
        sources = self._sources[layer]
        if sources.reason is None and (self.check or establishing) and outputs:
            for kind in ("q", "k"):
                variants = sources.variants[kind]
                n_heads = self.n_q if kind == "q" else self.n_kv
                chosen = None if establishing else self.rope[layer].variants.get(kind)
                if not establishing and chosen is None:
                    continue
                pre[kind] = [qk_sources.evaluate_tensor(v, outputs, n_heads, self.d)
                             if (chosen is None or i == chosen) else None for i, v in enumerate(variants)]
        keys = None
        if establishing and len(idx["cu"]):
            keys = key[0].detach().index_select(1, self._index(idx["cu"], key.device))
        mat = LayerMaterial(layer, obs, pre, self._pe.pop(layer, None), keys)
        if self.deferred:
            self._materials.append(mat)
        else:
            self._host_layer(mat, self._ts)

    def _normalise(self, module, layer: int, query, key, mask, ix, a: int, b: int, kernel_lse=None) -> None:
        """The softmax normaliser of the layer's sampled query rows, into rows a:b of the text's: the
        attention kernel's own (``kernel_lse``, (1, n_q, seq)) where it gave one, else recomputed (:mod:`.normaliser`)."""
        sinks = getattr(module, "sinks", None)
        window = self.sliding.get(layer)
        tensor_mask = mask if hasattr(mask, "dim") and mask.dim() == 4 else None
        why = self._lse_why.get(layer)
        self.normalisers.setdefault(layer, {
            "scaling": self.scale[layer], "softcap": self.softcap.get(layer),
            "mask": ("the mask tensor attention was handed" if tensor_mask is not None else
                     f"causal, sliding window {window}" if window else "causal"),
            "sinks": sinks is not None,
            "lse_source": "kernel" if kernel_lse is not None else "recomputed",
            **({"recomputed_because": why} if kernel_lse is None and why else {}),
        })
        device = query.device
        if kernel_lse is not None:  # (n_q, seq) read at (head, position): one flat gather
            seq = kernel_lse.shape[-1]
            flat = ix["heads"].astype(np.int64) * seq + ix["positions"].astype(np.int64)
            lse = kernel_lse[0].detach().reshape(-1).index_select(0, self._index(flat, device))
        else:
            lse = sampled_lse(self.torch, query.detach(), key.detach(), self._index(ix["heads"], device),
                              self._index(ix["positions"], device), scaling=self.scale[layer],
                              softcap=self.softcap.get(layer), window=window, mask=tensor_mask,
                              sinks=None if sinks is None else sinks.detach())
        if self.deferred:
            self._lse_pieces.append((a, b, lse))
        else:
            self._lse[a:b] = lse.double().numpy()

    # -- the host side ----------------------------------------------------------------------------

    def finish_text(self, work: TextWork) -> tuple[np.ndarray, np.ndarray, dict]:
        """The text's rows as stored (the block, file after file, in the storage dtype), each query row's
        normaliser (NaN for key rows) and the text's check statistics.

        On an accelerator this is where the check runs: after the rows reach the host, while the
        next text's forward pass runs.
        """
        ts = work.state
        if work.pending is not None:
            tensors = work.pending.wait()
            pieces = [(a, b, t) for (a, b, _), t in zip(work.pieces, tensors[:work.n_pieces])]
            n_lse = len(work.lse_pieces)
            for (a, b), t in zip(work.lse_pieces, tensors[work.n_pieces:work.n_pieces + n_lse]):
                work.lse[a:b] = t.double().numpy() if hasattr(t, "double") else np.asarray(t, np.float64)
            rest = tensors[work.n_pieces + n_lse:]
            for m in work.materials:
                n = len(m.tensors())
                self._host_layer(m.with_tensors(rest[:n]), ts)
                rest = rest[n:]
        else:
            pieces = [(0, work.buffer.shape[0], work.buffer)] if work.buffer is not None else []
        block = np.empty((self.plan.text_rows(work.text), self.d), self.storage_dtype)
        offsets = self.plan.text_layout(work.text)
        for a, b, rows in pieces:
            raw = rows.float().numpy() if hasattr(rows, "float") else np.asarray(rows, np.float32)
            block[a:b] = raw
            for i in range(int(np.searchsorted(offsets, a, "right")) - 1, len(self.plan.files)):
                fa, fb = int(offsets[i]), int(offsets[i + 1])
                if fa >= b:
                    break
                f = self.plan.files[i]
                if fb > fa and self._transforms(f):
                    block[fa:fb] = self._transform(f, ts, raw[fa - a:fb - a])
        return block, work.lse, ts.stats

    def _transforms(self, f) -> bool:
        layer, _, kind = f
        return self.pre_rope or ((kind, layer) in self.scalings and self.remove_scalings)

    def _transform(self, f, ts: _TextState, raw: np.ndarray) -> np.ndarray:
        """A file's stored rows from the rows attention received: scalings divided out, or turned back (--pre-rope)."""
        layer, _, kind = f
        idx = self.plan.positions_of(f, ts.text)
        y = raw.astype(np.float64)
        scaling = self.scalings.get((kind, layer))
        if scaling is not None and (self.remove_scalings or self.pre_rope):
            y = y / scaling.factor(idx)[:, None]
        if not self.pre_rope:
            return y
        state = self.rope.get(layer)
        rot = state.rotation if state is not None else None
        if rot is None:
            raise SniffError(f"--pre-rope: layer {layer}'s RoPE layout could not be established "
                             f"({state.reason if state is not None else 'no row reached it'}), so its rotation "
                             "cannot be undone")
        if rot.pairing is None:
            return y
        cos, sin = ts.cs[layer].at(idx)
        return rot.undo(y, cos, sin)

    def _host_layer(self, mat: LayerMaterial, ts: _TextState) -> None:
        """Establish (first text) or confirm the layer's RoPE, and check the sampled rows."""
        layer = mat.layer
        idx = ts.idx[layer]
        cu = idx["cu"]
        pe = mat.pe
        cs = pe
        if isinstance(pe, GatheredPE):
            try:
                host = pe.with_tensors([_ensure_numpy(t) for t in pe.tensors()])
                cs = interpret_pe(host, idx["pe_rows"], idx["need"], ts.seq_len)
            except NotRoPE as exc:
                cs = exc
            else:
                # --pre-rope reads cos/sin at every kept position too (``need`` ⊇ ``cu``), but the check
                # indexes its rows into ``cu``: its own rows of cos/sin, or it rotates by other positions'
                # angles (``_transform`` reads kept positions through ``CosSin.at``, which uses the table)
                if len(idx["need"]) != len(cu):
                    at = np.searchsorted(idx["need"], cu)
                    cs = replace(cs, cos=cs.cos[at], sin=cs.sin[at])
        if isinstance(cs, CosSin):
            ts.cs[layer] = cs
        rows = {}
        for kind in ("q", "k"):
            if kind not in mat.obs:
                continue
            data = _ensure_numpy(mat.obs[kind])
            ix = idx[kind]
            start = 0
            for head, n in zip(self.by_layer[layer][kind], ix["check_counts"]):
                positions = ix["check_positions"][start:start + n]
                raw = data[start:start + n]
                start += n
                y = raw.astype(np.float64)
                scaling = self.scalings.get((kind, layer))
                if scaling is not None:
                    y = y / scaling.factor(positions)[:, None]
                rows[(kind, head)] = (positions, np.searchsorted(cu, positions), raw, y)
        ts.pre = {kind: [None if t is None else t.double().transpose(0, 1).numpy() for t in variants]
                  for kind, variants in mat.pre.items()}
        try:
            state = self.rope.get(layer)
            searched: dict = {}
            if state is None:
                keys = None if mat.keys is None else _ensure_numpy(mat.keys)
                state, searched = self._establish(layer, cs, rows, keys, ts)
                self.rope[layer] = state
            else:
                self._same_rope(layer, state, cs, ts)
            for (kind, head), obs in rows.items():
                self._check_row(layer, head, kind, obs, state, cs, ts, searched.get((kind, head)))
        finally:
            ts.pre = {}

    # -- establishing a layer's RoPE --------------------------------------------------------------

    def _pre_rows(self, ts: _TextState, kind: str, variant: int) -> np.ndarray | None:
        """All heads' pre-RoPE rows (heads, n_cu, d) of ``kind`` by one variant, the layer being checked."""
        variants = ts.pre.get(kind)
        if variants is None or variant >= len(variants):
            return None
        return variants[variant]

    def _establish(self, layer: int, cs, rows: dict, keys, ts: _TextState) -> tuple[LayerRope, dict]:
        """The layer's rotation, frequencies and amplitude, from its cos/sin and the rows of this text; and
        each sampled head's relative difference under the rotation found ({(kind, head): diff}, which the
        search computed on the very rows the check compares: it need not compute them again)."""
        state = LayerRope(rotation=None, cos_sin=cs if isinstance(cs, CosSin) else None)
        if isinstance(cs, CosSin):
            if cs.dims > self.d:
                raise SniffError(f"layer {layer}: RoPE over {cs.dims} dimensions of a {self.d}-dimensional head")
            if cs.omega is not None:
                state.omega, state.omega_source = self.frequencies.frequencies(cs.omega, cs.omega_error,
                                                                               cs.table[0] if cs.table else None)
            state.amplitude, state.amplitude_source = self.frequencies.amplitude(cs.amplitude, state.omega_source,
                                                                                 cs.eps)
        sources = self._sources[layer]
        if sources.reason is not None:
            state.reason = sources.reason
            self.unchecked[layer] = sources.reason
            return state, {}
        rotations = candidates(self.d, cs.dims) if isinstance(cs, CosSin) else [NO_ROTATION]
        found, best, diffs = self._search(layer, rotations, cs, rows, ts)
        common = [r for r in found["q"] if any(r.same_planes(o) for o in found["k"])]
        distinct = [r for i, r in enumerate(common) if not any(r.same_planes(o) for o in common[:i])]
        if len(distinct) == 1:
            rot = distinct[0]
            state.rotation = rot
            searched = {}
            for kind in ("q", "k"):
                r, v = next((r, v) for r, v in found[kind].items() if r.same_planes(rot))
                state.variants[kind] = v
                state.labels[kind] = sources.variants[kind][v][0]
                if r == rot:  # (the check rotates with ``rot``: only its own differences stand in for it)
                    searched.update({(kind, head): diff for head, diff in diffs[(kind, r, v)].items()})
            if rot.pairing is not None and self.n_kv > 1 and keys is not None:
                part = keys[:, :, rot.offset:rot.offset + rot.dims]
                state.shared_key = bool(np.array_equal(part, np.broadcast_to(part[:1], part.shape)))
            self._same_layout(layer, rot)
            return state, searched
        if not best:  # no variant gave rows of the heads' shape
            state.reason = "its projection outputs were not seen or do not split into the heads attention receives"
            self.unchecked[layer] = state.reason
            return state, {}
        if not common and found["q"] and found["k"]:
            why = (f"layer {layer}: its queries are reproduced by {next(iter(found['q'])).describe()} and its keys by "
                   f"{next(iter(found['k'])).describe()}: qkdb sniff records one RoPE layout per layer")
        elif distinct:
            why = (f"layer {layer}: the rows are reproduced by several RoPE layouts ("
                   + "; ".join(r.describe() for r in distinct) + ")")
        elif "q" not in best or "k" not in best:
            state.reason = "its projection outputs were not seen or do not split into the heads attention receives"
            self.unchecked[layer] = state.reason
            return state, {}
        else:
            kind = "q" if best["q"][0] > self.tolerance else "k"
            why = self._explain(layer, cs, kind, best[kind], rows, ts)
        if self.check:
            raise SniffError(why + HINT)
        state.reason = f"on the first text, {why.split(': ', 1)[-1]}"
        return state, {}

    def _same_layout(self, layer: int, rot: Rotation) -> None:
        """Refuse layers that rotate in different layouts (no known model does; one record could not say it)."""
        for other, st in self.rope.items():
            r = st.rotation
            if r is not None and r.pairing is not None and rot.pairing is not None and not r.same_planes(rot):
                raise SniffError(f"layer {layer} applies RoPE as {rot.describe()}, layer {other} as {r.describe()}: "
                                 "qkdb sniff records one RoPE layout per capture")

    def _search(self, layer: int, rotations: list[Rotation], cs, rows: dict, ts: _TextState):
        """Per kind, the rotations (with the variant) that reproduce every sampled head's rows; and the closest miss."""
        found: dict[str, dict[Rotation, int]] = {"q": {}, "k": {}}
        best: dict[str, tuple] = {}
        diffs: dict[tuple[str, Rotation, int], dict[int, float]] = {}
        for kind in ("q", "k"):
            heads = self.by_layer[layer][kind]
            for v in range(len(self._sources[layer].variants[kind])):
                pre = self._pre_rows(ts, kind, v)
                if pre is None:
                    continue
                for rot in rotations:
                    worst = (-1.0, None)
                    per_head = {}
                    for head in heads:
                        if (kind, head) not in rows:
                            continue
                        idx, at, raw, y = rows[(kind, head)]
                        expected = rot.apply(pre[head][at], cs.cos[at], cs.sin[at]) if rot.pairing else pre[head][at]
                        diff = per_head[head] = relative_difference(y, expected)
                        if diff > worst[0]:
                            worst = (diff, head)
                        if diff > self.tolerance:
                            # a layout that misses one head is not the layer's: the other heads cannot
                            # change that (the closest miss is ranked by the first head it misses)
                            break
                    if worst[1] is None:
                        continue
                    if worst[0] <= self.tolerance:
                        found[kind].setdefault(rot, v)
                        diffs.setdefault((kind, rot, v), per_head)
                    if kind not in best or worst[0] < best[kind][0]:
                        best[kind] = (worst[0], worst[1], rot, v)
        return found, best, diffs

    def _same_rope(self, layer: int, state: LayerRope, cs, ts: _TextState) -> None:
        """Refuse a later text whose cos/sin carry other frequencies or another amplitude than the first's."""
        first = state.cos_sin
        if isinstance(cs, NotRoPE) or (first is None) != (cs is None):
            if state.rotation is not None and state.rotation.pairing is None:
                return  # a layer without RoPE: whatever it is given, it does not use it
            raise SniffError(f"layer {layer}: text {ts.text} gives its attention other position embeddings than "
                             "the first text did: qkdb sniff cannot record one RoPE for the capture")
        if cs is None or first is None or cs.omega is None or state.omega is None:
            return
        omega, _ = self.frequencies.frequencies(cs.omega, cs.omega_error, cs.table[0] if cs.table else None)
        allowed = SNAP_TOLERANCE + (cs.omega_error + first.omega_error) / np.maximum(np.abs(state.omega), 1e-300)
        rel = np.abs(omega - state.omega) / np.maximum(np.abs(state.omega), 1e-300)
        diff = float(np.max(rel))
        if cs.dims != first.dims or np.any(rel > allowed) \
                or abs(cs.amplitude - first.amplitude) > max(SNAP_TOLERANCE, 2 * cs.eps) * first.amplitude:
            raise SniffError(
                f"layer {layer}: the RoPE frequencies (or cos/sin amplitude) of text {ts.text} ({ts.seq_len} tokens) "
                f"differ from those of the first text (by up to {diff:.3g}, relative): the model changes its RoPE with "
                "the text's length (dynamic or longrope scaling); capture texts of one length (see --max-length, "
                "--no-pack)"
            )

    # -- per row --------------------------------------------------------------------------------

    def _check_row(self, layer: int, head: int, kind: str, obs, state: LayerRope, cs, ts: _TextState,
                   searched: float | None = None) -> None:
        """Compare a head's rows with its projection under the layer's rotation (``searched``: the
        difference the establishing search already computed for exactly these rows)."""
        idx, at, raw, y = obs
        rot = state.rotation
        if not (self.check and rot is not None and layer not in self.unchecked) or len(idx) == 0:
            return
        if searched is not None:
            diff = searched
        else:
            pre = self._pre_rows(ts, kind, state.variants[kind])
            if pre is None:
                self.unchecked[layer] = "its projection output was not seen"
                return
            if rot.pairing:
                expected = rot.apply(pre[head][at], cs.cos[at], cs.sin[at])
            else:
                expected = pre[head][at]
            diff = relative_difference(y, expected)
        if diff > self.tolerance:
            miss = (diff, head, rot, state.variants[kind])
            raise SniffError(self._explain(layer, cs, kind, miss, {(kind, head): obs}, ts) + HINT)
        self.max_difference[layer] = max(self.max_difference.get(layer, 0.0), diff)
        stats = ts.stats["max_difference"]
        stats[layer] = max(stats.get(layer, 0.0), diff)
        ts.stats["rows_checked"] += len(idx)
        self.rows_checked += len(idx)

    # -- why rows differ ------------------------------------------------------------------------

    def _explain(self, layer: int, cs, kind: str, miss: tuple, rows: dict, ts: _TextState) -> str:
        """One line saying how the vectors attention receives differ from the closest recomputation ``miss``."""
        diff, head, rot, v = miss
        label = self._sources[layer].variants[kind][v][0]
        what = f"layer {layer} {'queries' if kind == 'q' else 'keys'} (head {head})"
        idx, at, raw, y = rows[(kind, head)]
        pre = self._pre_rows(ts, kind, v)[head][at]
        expected = rot.apply(pre, cs.cos[at], cs.sin[at]) if rot.pairing else pre
        rotated = "RoPE of " if rot.pairing else ""
        scaling = self.scalings.get((kind, layer))
        if scaling is not None and relative_difference(raw.astype(np.float64), expected) <= self.tolerance:
            return (f"{what}: the config declares a {scaling.type} position scaling, but the model does not apply "
                    "it to these vectors")
        # A row-wise factor: y_i = c_i · expected_i up to rounding.
        denom = np.einsum("ij,ij->i", expected, expected)
        c = np.divide(np.einsum("ij,ij->i", y, expected), denom, out=np.ones_like(denom), where=denom > 0)
        if relative_difference(y, c[:, None] * expected) <= self.tolerance:
            lo, hi = int(np.argmin(c)), int(np.argmax(c))
            return (f"{what}: attention receives {rotated}the {label} output times a factor that varies from "
                    f"{c[lo]:.4g} (position {int(idx[lo])}) to {c[hi]:.4g} (position {int(idx[hi])}) — a scaling "
                    "that is not RoPE and that qkdb sniff does not know")
        given = (f"; its position embeddings are not a rotation qkdb knows ({cs})" if isinstance(cs, NotRoPE) else
                 f"; it is given cos/sin over {cs.dims} dims ({cs.describe()})" if isinstance(cs, CosSin) else
                 "; it is given no cos/sin")
        return (f"{what}: attention receives vectors that differ from every rotation qkdb sniff knows of the "
                f"{label} output (closest: {rot.describe()}, off by up to {diff:.2g}, relative){given}")



HINT = ("; the stored vectors would carry it into the warehouse unrecorded. --unchecked captures them anyway "
        "(recorded as unchecked in qkdb_dataset.json)")


def check_summary(recorder: Recorder, layers: list[int]) -> dict:
    """What the check established, for ``capture.check`` in ``qkdb_dataset.json``."""
    if not recorder.check:
        return {"method": "none (--unchecked)", "checked_layers": [], "unchecked_layers": sorted(layers)}
    checked = sorted(l for l in layers if l in recorder.max_difference and l not in recorder.unchecked)
    sample = ("every row" if recorder.check_rows is None else
              f"every row of the first text (which establishes the layout), then {recorder.check_rows} rows per head "
              "file and text drawn by numpy default_rng([seed, text, layer, head, kind (q 0, k 1), 1]).choice(rows, "
              "n, replace=False)")
    out = {
        "method": ("each checked row equals the layer's own projection output (q_proj/k_proj, fused or latent "
                   "projections, through its q/k norm), rotated by the layer's own cos/sin in the layout "
                   "established on the first text (capture.rope) unless it applies no RoPE, with the position "
                   "scalings listed in position_scaling divided out; compared in float64"),
        "rows": sample,
        "rows_per_head_and_text": recorder.check_rows,
        "rows_checked": int(recorder.rows_checked),
        "tolerance": recorder.tolerance,
        "checked_layers": checked,
        "max_relative_difference": max((recorder.max_difference[l] for l in checked), default=None),
    }
    reasons: dict[str, list[int]] = {}
    for layer in sorted(l for l in layers if l not in checked):
        reasons.setdefault(recorder.unchecked.get(layer, "no row was checked"), []).append(layer)
    if reasons:
        out["unchecked"] = [{"layers": ls, "reason": r} for r, ls in reasons.items()]
    return out


def normaliser_record(recorder: Recorder, max_position: int | None = None) -> dict:
    """How the query files' ``lse`` column was made, for ``capture.normaliser`` in ``qkdb_dataset.json``.

    ``max_position``: the largest position captured. A query scaling divided out of the stored queries
    changed nothing when its factor is 1 there (llama4's is 1 below original_max_position_embeddings
    and moves only by whole steps of it), and then the stored vectors still give the logits.
    """
    removed = [s for (kind, _), s in recorder.scalings.items() if kind == "q"] if recorder.remove_scalings else []
    changed = [s for s in removed if max_position is None or s.factor(np.asarray([max_position]))[0] != 1.0]
    transformed = recorder.pre_rope or bool(changed)
    return {
        "column": "lse",
        "definition": ("lse_t = log sum_s exp(logit(t, s)) over every key s the layer let query t see, with "
                       "logit = scaling * q_t.k_s, soft-capped (softcap * tanh(x / softcap)) where the layer caps, "
                       "plus the layer's mask; and the per-head sink logit where the layer has one. A captured "
                       "key's attention weight is exp(logit(t, s) - lse_t)"),
        "how": ("taken from the attention kernel (aten._scaled_dot_product_flash_attention_for_cpu, which sdpa runs "
                "on the CPU for a causal layer without a mask tensor; its output checked equal to sdpa's) where "
                "layers[].lse_source is 'kernel'; elsewhere ('recomputed', with recomputed_because) computed for "
                "the sampled query rows from the layer's queries and all its keys as attention received them, in "
                "blocks (qkdb.ingest.capture.normaliser)"),
        # Whether logit(t, s) can be recomputed from the stored vectors as they are (not --pre-rope, no
        # position scaling divided out of the queries): else they must be turned back first.
        "logits_from_stored_vectors": not transformed,
        "layers": [{"layer": layer, **info} for layer, info in sorted(recorder.normalisers.items())],
    }
