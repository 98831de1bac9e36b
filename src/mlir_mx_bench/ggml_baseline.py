"""ggml (llama.cpp's tensor library) Q8_0 and MXFP4 matmuls through ggml-python.

ggml-python 0.0.45 is built from its source package (the ``bench`` extra;
``docs/bench.md`` says how).  We use its low-level API only:

* a ``ggml_context`` holding the weight ``W`` (``ne = [K, N]``, i.e. ``B^T``
  row-major) quantized from the SAME f32 weights ``B`` with
  ``ggml_quantize_chunk``, and the f32 activation ``X = A`` (``ne = [K, M]``);
* ``Y = ggml_mul_mat(W, X)`` (``ne = [N, M]``, i.e. the (M, N) product);
* ``ggml_graph_plan(graph, n_threads)`` with a work buffer we own, then
  ``ggml_graph_compute(graph, plan)`` per call: the thread count is the plan's.

ggml quantizes the activation row to its ``vec_dot_type`` (Q8_0 for both
types) inside the matmul and takes integer dot products per block, so its
result is checked against its OWN operands: the oracle of
``dequant(quantize_vdt(A)) @ dequant(W)^T``, both dequantized with ggml's own
type traits (the activation with the same CPU ``from_float`` the matmul uses).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os

import numpy as np

from .cases import Oracle, Problem, is_nvfp4
from .emulate import baseline_level
from .method import Method, Skipped

__all__ = ["GGML_TYPES", "ggml_available", "ggml_isa", "ggml_methods"]

#: (label, ggml type enum name)
GGML_TYPES = (("ggml Q8_0", "GGML_TYPE_Q8_0"), ("ggml MXFP4", "GGML_TYPE_MXFP4"))
#: The row of an ``nvfp4`` problem, where the installed ggml has the type.
GGML_NVFP4 = ("ggml NVFP4", "GGML_TYPE_NVFP4")
_INSTALL = "pip install --no-binary ggml-python 'mlir-mx[bench]' (needs cmake and a C compiler)"


def load_ggml():
    """The ``ggml`` module of ggml-python (ImportError when not installed)."""
    # ggml aborts the process on a failed assert; keep its gdb backtrace quiet.
    os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    import ggml

    return ggml


def ggml_available() -> str | None:
    """None when ggml-python can be imported and has every type we time, else
    why not; under ``--emulate`` also why not when its build runs a wider ISA
    than the emulated one (it runs what it was compiled for)."""
    why = _loadable()
    if why is None and (level := baseline_level()) is not None:
        isa = ggml_isa()
        if _rank(isa) > _rank(level):
            return (
                f"ggml-python here is built for {isa}, wider than the emulated {level}: "
                "install an AVX2 build of it (docs/bench.md) for its rows"
            )
    return why


def _rank(level: str) -> int:
    """Wider ISA levels rank higher (levels of :data:`_GGML_LEVELS` and ``SSE``)."""
    names = [lv for _, lv in reversed(_GGML_LEVELS)]
    return names.index(level) + 1 if level in names else 0


def _loadable() -> str | None:
    """None when ggml-python imports and has every type we time, else why not."""
    if importlib.util.find_spec("ggml") is None:
        return f"ggml-python is not installed ({_INSTALL})"
    try:
        gg = load_ggml()
    except (ImportError, OSError) as err:  # a broken native build
        return f"ggml-python does not load: {err}"
    missing = [t for _, t in GGML_TYPES if not hasattr(gg, t)]
    if missing:
        return f"ggml-python {gg.__version__} lacks {', '.join(missing)} (need 0.0.45)"
    return None


#: ggml's compile-time ISA flags (``ggml_cpu_has_*``), widest first, and the
#: level each names: ggml runs the kernels its build was compiled for
#: (``-march=native`` by default, or ``GGML_AVX512=OFF`` etc. in ``CMAKE_ARGS``),
#: not what the CPU has.
_GGML_LEVELS = (
    ("avx512_vnni", "AVX512-VNNI"),
    ("avx512", "AVX512"),
    ("avx_vnni", "AVX-VNNI"),
    ("avx2", "AVX2"),
    ("avx", "AVX"),
)


def ggml_isa() -> str | None:
    """The ISA level ggml-python's build runs (None: not installed)."""
    if _loadable() is not None:
        return None
    gg = load_ggml()
    for flag, level in _GGML_LEVELS:
        if getattr(gg, f"ggml_cpu_has_{flag}")():
            return level
    return "SSE"


def _fptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


def _to_float(gg, typ: int, src: int, n: int) -> np.ndarray:
    out = np.empty(n, np.float32)
    gg.ggml_get_type_traits(typ).contents.to_float(src, _fptr(out), n)
    return out


class _GgmlMatmul:
    """One ggml context, graph and plan computing ``A @ B`` with ``W`` of type ``typ``."""

    def __init__(self, gg, typ: int, p: Problem, threads: int):
        s = p.shape
        self.gg, self.typ, self.shape = gg, typ, s
        self.w_bytes = gg.ggml_row_size(typ, s.K) * s.N
        mem = (
            16 * gg.ggml_tensor_overhead()
            + gg.ggml_graph_overhead()
            + self.w_bytes
            + 4 * (s.M * s.K + s.M * s.N)
            + (1 << 20)
        )
        params = gg.ggml_init_params(mem_size=mem, mem_buffer=None, no_alloc=False)
        self.ctx = gg.ggml_init(params)
        if not self.ctx:
            raise MemoryError(f"ggml_init could not allocate {mem} bytes")
        self.w = gg.ggml_new_tensor_2d(self.ctx, typ, s.K, s.N)
        self.x = gg.ggml_new_tensor_2d(self.ctx, gg.GGML_TYPE_F32, s.K, s.M)
        bt = np.ascontiguousarray(p.b.T)
        gg.ggml_quantize_chunk(typ, _fptr(bt), gg.ggml_get_data(self.w), 0, s.N, s.K, None)
        ctypes.memmove(gg.ggml_get_data(self.x), p.a.ctypes.data, p.a.nbytes)
        self.y = gg.ggml_mul_mat(self.ctx, self.w, self.x)
        self.graph = gg.ggml_new_graph(self.ctx)
        gg.ggml_build_forward_expand(self.graph, self.y)
        self.plan = gg.ggml_graph_plan(self.graph, threads, None)
        self.work = np.empty(max(int(self.plan.work_size), 1), np.uint8)
        self.plan.work_data = self.work.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))

    def run(self, n: int) -> None:
        for _ in range(n):
            if self.gg.ggml_graph_compute(self.graph, ctypes.byref(self.plan)) != 0:
                raise RuntimeError("ggml_graph_compute failed")

    def result(self) -> np.ndarray:
        self.run(1)
        s = self.shape
        ptr = ctypes.cast(self.gg.ggml_get_data(self.y), ctypes.POINTER(ctypes.c_float))
        return np.ctypeslib.as_array(ptr, shape=(s.M, s.N)).copy()

    def oracle(self, p: Problem) -> Oracle:
        """The oracle of ggml's own operands (see the module docstring)."""
        gg, s = self.gg, self.shape
        w = _to_float(gg, self.typ, gg.ggml_get_data(self.w), s.N * s.K).reshape(s.N, s.K)
        vdt = gg.ggml_get_type_traits_cpu(self.typ).contents.vec_dot_type
        x = p.a
        if vdt != gg.GGML_TYPE_F32:
            buf = np.empty(gg.ggml_row_size(vdt, s.M * s.K), np.uint8)
            gg.ggml_get_type_traits_cpu(vdt).contents.from_float(
                _fptr(p.a), buf.ctypes.data, s.M * s.K
            )
            x = _to_float(gg, vdt, buf.ctypes.data, s.M * s.K).reshape(s.M, s.K)
        return Oracle.of(x, w.T)

    def close(self) -> None:
        if self.ctx:
            self.gg.ggml_free(self.ctx)
            self.ctx = None


def ggml_methods(p: Problem, threads: int) -> list[Method] | Skipped:
    """ggml Q8_0 and MXFP4 at ``threads`` threads (weights quantized from ``B``)."""
    why = ggml_available()
    if why:
        return Skipped("ggml NVFP4" if is_nvfp4(p.element) else "ggml Q8_0/MXFP4", why)
    gg = load_ggml()
    s = p.shape
    out = []
    types = GGML_TYPES
    if is_nvfp4(p.element):  # ggml's NVFP4 (llama.cpp PR #19769), where this build has it
        if not hasattr(gg, GGML_NVFP4[1]):
            return Skipped(
                "ggml NVFP4", f"ggml-python {gg.__version__} has no {GGML_NVFP4[1]} (ggml's NVFP4, "
                "llama.cpp PR #19769, is newer than the ggml it vendors)",
            )  # fmt: skip
        types = (GGML_NVFP4,)
    for label, type_name in types:
        typ = getattr(gg, type_name)
        mm = _GgmlMatmul(gg, typ, p, threads)
        key = f"ggml-{type_name}"
        if key not in p.cache:
            p.cache[key] = mm.oracle(p)
        out.append(
            Method(
                label,
                "baseline",
                threads,
                mm.w_bytes + 4 * (s.M * s.K + s.M * s.N),
                run=mm.run,
                result=mm.result,
                oracle=p.cache[key],
                note=f"ggml-python {gg.__version__}: {mm.w_bytes / (s.K * s.N):.4g} B/weight, "
                "activation quantized to Q8_0 inside the matmul",
                close=mm.close,
            )
        )
    return out
