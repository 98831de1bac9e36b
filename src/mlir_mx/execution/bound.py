"""``Runner.bind``'s result: a public function of a compiled module with
some arguments fixed (:class:`BoundFunction`), the :data:`FREE` marker of
the arguments each call supplies, and where a call's results are written
(:func:`result_cell`)."""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable

import numpy as np

from mlir_mx.errors import MXArgTypeError, MXValueError, expect_type
from mlir_mx.execution import arguments as args_
from mlir_mx.execution.c_interface import packed_function, pointer_array
from mlir_mx.execution.signature import MXParam, Param, Signature
from mlir_mx.execution.threads import TaskCall

__all__ = ["FREE", "BoundFunction", "result_cell"]


def _result_ctype(p: Param):
    if p.is_buffer:
        return args_.descriptor_type(len(p.shape))
    return args_.CTYPES[p.dtype.itemsize]


def result_cell(sig: Signature):
    """``(cell, first)``: where ``@name``'s results are written (None when
    it returns nothing); ``first``: a struct whose pointer goes in the
    first slot (memrefs, several results), else a scalar in the last."""
    res = sig.flat_results
    if not res:
        return None, False
    if len(res) == 1 and not res[0].is_buffer:
        return _result_ctype(res[0])(), False
    fields = [(f"r{i}", _result_ctype(p)) for i, p in enumerate(res)]
    if len(res) == 1:
        return fields[0][1](), True
    return type("Results", (ctypes.Structure,), {"_fields_": fields})(), True


class _Free:
    def __repr__(self) -> str:
        return "FREE"


#: Marks an argument of :meth:`Runner.bind` that each call supplies.
FREE = _Free()


class BoundFunction:
    """``@name`` of a Runner with some arguments fixed (:meth:`Runner.bind`).

    Every memref argument has its own descriptor, made once: a call checks
    its arguments (``arguments.check_buffer``, as :meth:`Runner.invoke`
    does) and points their descriptors at them, then calls.  Calls are
    serialized (the descriptors are shared).
    """

    def __init__(self, runner, name: str, args: tuple, names=None):  # runner: its Runner
        if not callable(getattr(runner, "callable_signature", None)):  # a Runner (no import circle)
            what = type(runner).__name__
            raise MXArgTypeError(f"runner: expected a Runner (Runner.bind makes one), got {what}")
        expect_type(name, str, "name", "a function name (a str)")
        args = tuple(expect_type(args, (tuple, list), "args", "a tuple of arguments"))
        sig = runner.callable_signature(name, len(args), " to bind")
        self.runner, self.name, self.sig = runner, name, sig
        names = _check_names(sig, names)
        self._labels = _flat_labels(sig, names)  # per flat slot: the caller's name, or None
        self._free = [i for i, a in enumerate(args) if a is FREE]
        self._free_names = None if names is None else [names[i] for i in self._free]
        self._free_params = [sig.args[i] for i in self._free]
        self._split = any(isinstance(p, MXParam) for p in self._free_params)
        slots, n = [], 0  # flat slots of each declared argument
        for p in sig.args:
            k = len(p.parts) if isinstance(p, MXParam) else 1
            slots.append(range(n, n + k))
            n += k
        fixed = [i for i, a in enumerate(args) if a is not FREE]
        fixed_names = None if names is None else [names[i] for i in fixed]
        fixed_flat = args_.split_mx_args(
            name, [sig.args[i] for i in fixed], [args[i] for i in fixed], MXParam, fixed_names
        )
        writes = runner.compiled.writes(name)
        self._cells: list = [None] * n
        self._keep: list = []  # the fixed cells and descriptors, alive as long as this
        self._fixed_arrays: list[np.ndarray] = []
        for j, a in zip([j for i in fixed for j in slots[i]], fixed_flat, strict=True):
            self._cells[j] = self._cell(j, a, writes)
        self._slots = [j for i in self._free for j in slots[i]]
        self._params = [sig.flat_args[j] for j in self._slots]
        self._writes = [j in writes for j in self._slots]
        self._descs = []
        for j, p in zip(self._slots, self._params, strict=True):
            if p.is_buffer:  # a descriptor of its own, refilled by each call
                desc = args_.descriptor_type(len(p.shape))()
                self._descs.append(desc)
                self._cells[j] = ctypes.pointer(desc)
            else:
                self._descs.append(None)
        _, self._first = result_cell(sig)
        self._shift = int(self._first)  # struct results take slot 0
        self._array = pointer_array([None] * (n + bool(sig.flat_results)))
        for j, cell in enumerate(self._cells):
            if cell is not None:
                self._array[j + self._shift] = ctypes.cast(ctypes.pointer(cell), ctypes.c_void_p)
        self._fn = packed_function(runner.entry(name))
        team = runner.compiled.tasks.get(name)
        if team is not None:  # run by the caller's threads (mlir_mx.execution.threads)
            self._fn = TaskCall(runner.entry(name), self._array, team)
        self._lock = threading.Lock()
        #: per free buffer, the shape call_unchecked last wrote into its descriptor
        #: (with offset 0 and C strides); None after __call__ wrote it
        self._shapes: list = [None] * len(self._descs)
        self._unchecked = not (self._split or sig.flat_results or None in self._descs)

    def _cell(self, j: int, a, writes):
        """The cell of fixed flat argument ``j``: a pointer to a descriptor, or a scalar."""
        p, label = self.sig.flat_args[j], self._labels[j]
        if not p.is_buffer:
            cell = args_.scalar_cell(self.name, j, p, a, label)
            self._keep.append(cell)
            return cell
        arr = args_.check_buffer(self.name, j, p, a, lambda: j in writes, label)
        desc = args_.descriptor(arr)
        self._keep.append(desc)
        self._fixed_arrays.append(arr)
        return ctypes.pointer(desc)

    def __call__(self, *args):
        if len(args) != len(self._free):
            raise MXArgTypeError(f"{self.name}: expected {len(self._free)} argument(s), got {len(args)}")
        if self._split:
            args = args_.split_mx_args(
                self.name, self._free_params, args, MXParam, self._free_names
            )
        arrays = []
        for j, p, w, a in zip(self._slots, self._params, self._writes, args, strict=True):
            label = self._labels[j]
            if p.is_buffer:
                arrays.append(args_.check_buffer(self.name, j, p, a, lambda w=w: w, label))
            else:
                arrays.append(args_.scalar_cell(self.name, j, p, a, label))
        out, first = result_cell(self.sig)
        cell = None
        if out is not None:
            cell = ctypes.pointer(ctypes.pointer(out)) if first else ctypes.pointer(out)
        with self._lock:  # the descriptors and slots are shared by calls
            self._shapes[:] = [None] * len(self._shapes)  # call_unchecked refills them
            for j, d, a in zip(self._slots, self._descs, arrays, strict=True):
                if d is not None:
                    args_.point(d, a)
                else:
                    self._array[j + self._shift] = ctypes.cast(ctypes.pointer(a), ctypes.c_void_p)
            if cell is not None:
                self._array[0 if first else -1] = ctypes.cast(cell, ctypes.c_void_p)
            self._fn(self._array)
        if out is None:
            return None
        buffers = [a for a, p in zip(arrays, self._params, strict=True) if p.is_buffer]
        return self.runner.read_results(self.sig, out, buffers + self._fixed_arrays)

    def call_unchecked(self, *buffers: tuple[int, tuple[int, ...]]) -> None:
        """Call with each free argument given as ``(address, shape)`` of a
        C-contiguous buffer of its parameter's dtype, **unchecked**: for a
        caller that made and validated the buffers itself and keeps them alive
        during the call (``mlir_mx.torch``'s layers pass their tensors'
        ``data_ptr()``: no numpy views, no checks twice).  Functions with free
        scalar or MX arguments, or with results, take :meth:`__call__`."""
        if not self._unchecked:
            raise MXArgTypeError(f"{self.name}: call_unchecked takes free buffers only")
        if len(buffers) != len(self._descs):
            raise MXArgTypeError(f"{self.name}: expected {len(self._descs)} buffer(s), got {len(buffers)}")
        with self._lock:
            for i, (address, shape) in enumerate(buffers):
                self._point(i, address, shape)
            self._fn(self._array)

    def _point(self, i: int, address: int, shape: tuple[int, ...]) -> None:
        """Point free buffer ``i``'s descriptor at ``address`` with ``shape``
        (C-contiguous); the shape and strides are written only when they
        changed (a layer in decode calls with the same shapes every time)."""
        d = self._descs[i]
        d.allocated = d.aligned = address
        if self._shapes[i] != shape:
            d.offset = 0
            d.shape[:] = shape
            d.strides[:] = _c_strides(shape)
        self._shapes[i] = shape  # (on_shapes' calls compare by identity)

    def on_shapes(self, *shapes: tuple[int, ...]) -> Callable[..., None]:
        """:meth:`call_unchecked` with the free buffers' shapes fixed: the
        returned function takes one address per free buffer.  The same
        contract (C-contiguous buffers of the parameters' dtypes, made and
        checked by the caller, alive during the call); the shapes are checked
        here once.  ``Linear.call_into`` keeps one per row count, which saves
        the per-call tuples and loops (about 2 us of a layer's call)."""
        if not self._unchecked:
            raise MXArgTypeError(f"{self.name}: on_shapes takes free buffers only")
        if len(shapes) != len(self._descs):
            raise MXArgTypeError(f"{self.name}: expected {len(self._descs)} shape(s), got {len(shapes)}")
        shapes = tuple(tuple(int(n) for n in s) for s in shapes)
        for p, s in zip(self._params, shapes, strict=True):
            bad = len(s) != len(p.shape) or any(
                n < 0 or d not in (None, n) for d, n in zip(p.shape, s, strict=False)
            )
            if bad:
                raise MXValueError(f"{self.name}: shape {s} does not fit parameter {p}")
        lock, fn, array, point, last = self._lock, self._fn, self._array, self._point, self._shapes
        descs = self._descs
        if len(shapes) == 2:  # x and the output: the layers' case, unrolled
            (d0, d1), (s0, s1) = descs, shapes

            def call2(a0: int, a1: int) -> None:
                with lock:
                    if last[0] is s0 and last[1] is s1:
                        d0.allocated = d0.aligned = a0
                        d1.allocated = d1.aligned = a1
                    else:
                        point(0, a0, s0)
                        point(1, a1, s1)
                    fn(array)

            return call2

        def call(*addresses: int) -> None:
            with lock:
                for i, (a, s) in enumerate(zip(addresses, shapes, strict=True)):
                    point(i, a, s)
                fn(array)

        return call


@functools.lru_cache(maxsize=256)
def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a C-contiguous array of ``shape``."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _check_names(sig: Signature, names) -> list[str] | None:
    """``Runner.bind``'s ``names``: None, or one string per argument."""
    if names is None:
        return None
    if isinstance(names, str) or not hasattr(names, "__iter__"):
        raise MXArgTypeError(f"names: expected a list of argument names, got {names!r}")
    names = list(names)
    if len(names) != len(sig.args) or not all(isinstance(n, str) for n in names):
        raise MXArgTypeError(
            f"names: expected {len(sig.args)} argument name(s) (str) for {sig.name}, got {names!r}"
        )
    return names


def _flat_labels(sig: Signature, names: list[str] | None) -> list[str | None]:
    """What messages call each flat argument: the caller's name of its
    argument (an mx argument's parts suffixed like the signature's, e.g.
    ``"<name> codes"``), or None (``name: argument i ('%argI')``)."""
    if names is None:
        return [None] * len(sig.flat_args)
    labels: list[str | None] = []
    for p, name in zip(sig.args, names, strict=True):
        parts = p.parts if isinstance(p, MXParam) else (p,)
        labels += [name + q.name[len(p.name) :] for q in parts]
    return labels
