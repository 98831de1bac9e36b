"""Load the machine code of a compiled module into the process, without LLVM.

The compile cache (:mod:`mlir_mx.execution.disk_cache`) keeps the object file
that upstream's ``ExecutionEngine`` generated (``dump_to_object_file``); a
later process maps it here instead of running LLVM's code generation again.
Neither the MLIR Python bindings nor their C API can load an object into an
engine (22.1.8: ``ExecutionEngine`` has ``dump_to_object_file``,
``raw_lookup``, ``raw_register_runtime``; ``libMLIR-C`` exports no
``LLVMOrc*`` function), so this module is the linker: a few dozen lines,
because the JIT's objects are simple.  FIXME(upstream): an
``ExecutionEngine`` that loads an object file (ORC's ``addObjectFile``,
not exposed by the MLIR C API or bindings; no upstream issue found) would
replace it.

What it takes: an ELF64 little-endian relocatable object for x86-64, as LLJIT
emits it on Linux: the large code model, so code reaches data and external
functions through 64-bit absolute or PC-relative relocations
(``R_X86_64_64``, ``R_X86_64_PC64``; ``R_X86_64_PC32``/``PLT32``/``32``/``32S``
are accepted when they fit), no GOT, no PLT, no thread-local storage, no
constructors.  Anything else raises :class:`~mlir_mx.errors.ObjectError`, and the caller
compiles instead (:func:`machine_code_supported` says False on other hosts:
the cache then keeps only the lowered module).  ``.eh_frame`` is not loaded
(no C++ exception crosses kernel code; a debugger's backtrace stops there).

Undefined symbols resolve with
:func:`~mlir_mx.execution.libraries.symbol_address`, as the engine's do:
``mlirAsyncRuntime*`` in upstream's async runtime (the one instance the
JIT-compiled kernels use), anything else in the process (libc), then in
the runtime libraries (``CompileOptions.libraries``, opened locally, only
for a name the process lacks).
Code is mapped
writable, relocated, then made read-and-execute (never both writable and
executable).
"""

from __future__ import annotations

import ctypes
import mmap
import platform
import struct
import sys

from mlir_mx.errors import ObjectError
from mlir_mx.execution.libraries import symbol_address

__all__ = ["LoadedObject", "load_object", "machine_code_supported"]


def machine_code_supported() -> bool:
    """Whether this host's JIT objects can be loaded here (x86-64 Linux)."""
    return sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

_PAGE = mmap.PAGESIZE
_SHF_WRITE, _SHF_ALLOC, _SHF_EXEC, _SHF_TLS = 0x1, 0x2, 0x4, 0x400
_SHT_NOBITS, _SHT_RELA, _SHT_REL, _SHT_SYMTAB = 8, 4, 9, 2
_SHN_UNDEF, _SHN_ABS, _SHN_COMMON = 0, 0xFFF1, 0xFFF2
_STB_WEAK = 2
_R_64, _R_PC32, _R_PLT32, _R_32, _R_32S, _R_PC64 = 1, 2, 4, 10, 11, 24
#: Sections that would need a run-time step this loader does not take.
_REFUSED = (".init_array", ".fini_array", ".ctors", ".dtors", ".preinit_array", ".tdata", ".tbss")


class _Elf:
    """The parts of an ELF64 relocatable object the loader reads (bounds checked)."""

    def __init__(self, data: bytes):
        self.data = data
        if len(data) < 64 or data[:4] != b"\x7fELF":
            raise ObjectError("not an ELF file")
        if data[4] != 2 or data[5] != 1:
            raise ObjectError("not a 64-bit little-endian ELF file")
        etype, machine = struct.unpack_from("<HH", data, 16)
        if etype != 1 or machine != 62:
            raise ObjectError(f"not an x86-64 relocatable object (type {etype}, machine {machine})")
        (shoff,) = struct.unpack_from("<Q", data, 40)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 58)
        if shentsize != 64 or shoff + 64 * shnum > len(data) or shstrndx >= shnum:
            raise ObjectError("section headers out of bounds")
        self.sections = [
            struct.unpack_from("<IIQQQQIIQQ", data, shoff + 64 * i) for i in range(shnum)
        ]
        for _name, stype, _f, _a, off, size, *_ in self.sections:
            if stype != _SHT_NOBITS and off + size > len(data):
                raise ObjectError("a section lies outside the file")
        self.names = [self.string(shstrndx, s[0]) for s in self.sections]

    def bytes_of(self, i: int) -> bytes:
        s = self.sections[i]
        return self.data[s[4] : s[4] + s[5]]

    def string(self, table: int, offset: int) -> str:
        if not 0 <= table < len(self.sections):
            raise ObjectError("a string table index out of bounds")
        strtab = self.bytes_of(table)
        end = strtab.find(b"\0", offset)
        if offset >= len(strtab) or end < 0:
            raise ObjectError("a name out of bounds")
        return strtab[offset:end].decode("utf-8", "replace")

    def symbols(self) -> list[tuple[str, int, int, int]]:
        """``(name, binding, section index, value)`` of each symbol."""
        tabs = [i for i, s in enumerate(self.sections) if s[1] == _SHT_SYMTAB]
        if len(tabs) != 1:
            raise ObjectError(f"{len(tabs)} symbol tables (expected one)")
        i = tabs[0]
        raw, link = self.bytes_of(i), self.sections[i][6]
        out = []
        for at in range(0, len(raw) - len(raw) % 24, 24):
            name, info, _other, shndx, value, _size = struct.unpack_from("<IBBHQQ", raw, at)
            out.append((self.string(link, name) if name else "", info >> 4, shndx, value))
        return out


class LoadedObject:
    """An object file mapped into the process: its global functions by name.

    ``raw_lookup(name)`` answers as ``ExecutionEngine.raw_lookup`` does (the
    packed wrapper ``_mlir_<name>``; 0 when absent), so the Runner calls it
    the same way.  The mapping lives as long as this object."""

    def __init__(self, data: bytes, libraries=()):
        elf = _Elf(data)
        for name in elf.names:
            if name in _REFUSED or name.startswith(
                (".init_array", ".fini_array", ".tdata", ".tbss")
            ):
                raise ObjectError(f"section {name} needs a run-time step the loader does not take")
        loaded = [
            i
            for i, s in enumerate(elf.sections)
            if s[2] & _SHF_ALLOC and elf.names[i] != ".eh_frame"
        ]
        if any(elf.sections[i][2] & _SHF_TLS for i in loaded):
            raise ObjectError("thread-local storage")
        # Three page-aligned groups: code (read, execute), constants (read), data (read, write).
        groups = ([], [], [])
        for i in loaded:
            flags = elf.sections[i][2]
            groups[0 if flags & _SHF_EXEC else 2 if flags & _SHF_WRITE else 1].append(i)
        place: dict[int, int] = {}  # section -> offset in the image
        bounds, size = [], 0
        for g in groups:
            start = size
            for i in g:
                align = max(elf.sections[i][8], 1)
                size = -(-size // align) * align
                place[i] = size
                size += elf.sections[i][5]
            size = -(-size // _PAGE) * _PAGE
            bounds.append((start, size))
        if size > len(data) + (64 << 20):  # no kernel has 64 MiB of zeroed data
            raise ObjectError(f"sections of {size} bytes in a {len(data)}-byte object")
        self.size = max(size, _PAGE)
        base = _libc.mmap(None, self.size, 3, 0x22, -1, 0)  # RW, MAP_PRIVATE | MAP_ANONYMOUS
        if base in (None, ctypes.c_void_p(-1).value):
            raise MemoryError(f"mmap of {self.size} bytes failed (errno {ctypes.get_errno()})")
        self.base = base
        try:
            image = bytearray(self.size)
            for i in loaded:
                if elf.sections[i][1] != _SHT_NOBITS:
                    image[place[i] : place[i] + elf.sections[i][5]] = elf.bytes_of(i)
            addresses = self._symbols(elf, place, libraries)
            for i, s in enumerate(elf.sections):
                if s[1] == _SHT_REL:
                    raise ObjectError("REL relocations (expected RELA)")
                if s[1] == _SHT_RELA and s[7] in place:
                    self._relocate(elf, i, place[s[7]], image, addresses[0])
            ctypes.memmove(base, bytes(image), self.size)
            for (lo, hi), prot in zip(bounds, (5, 1, 3), strict=True):  # RX, R, RW
                if hi > lo and _libc.mprotect(base + lo, hi - lo, prot) != 0:
                    raise MemoryError(f"mprotect failed (errno {ctypes.get_errno()})")
        except BaseException:
            _libc.munmap(base, self.size)
            self.base = None
            raise
        self.functions = addresses[1]

    def _symbols(self, elf: _Elf, place: dict[int, int], libraries):
        """``(address of each symbol by index, address of each global by name)``."""
        by_index, globals_ = [], {}
        for name, bind, shndx, value in elf.symbols():
            if shndx == _SHN_UNDEF:
                addr = symbol_address(name, libraries) if name else 0
                if addr is None and bind != _STB_WEAK:
                    raise ObjectError(f"undefined symbol {name!r} not found")
                by_index.append(addr or 0)
                continue
            if shndx == _SHN_ABS:
                addr = value
            elif shndx in place:
                addr = self.base + place[shndx] + value
            elif (
                shndx == _SHN_COMMON
                or shndx < len(elf.sections)
                and elf.sections[shndx][2] & _SHF_ALLOC
            ):
                raise ObjectError(f"symbol {name!r} in a section that is not loaded")
            else:
                addr = 0  # a symbol of a section not loaded (.eh_frame, notes): never relocated against
            by_index.append(addr)
            if bind != 0 and name:
                globals_[name] = addr
        return by_index, globals_

    def _relocate(self, elf: _Elf, i: int, at: int, image: bytearray, symbols: list[int]) -> None:
        raw = elf.bytes_of(i)
        target = elf.sections[elf.sections[i][7]]
        for off in range(0, len(raw) - len(raw) % 24, 24):
            r_offset, info, addend = struct.unpack_from("<QQq", raw, off)
            sym, kind = info >> 32, info & 0xFFFFFFFF
            if sym >= len(symbols):
                raise ObjectError("a relocation names no symbol")
            width = 8 if kind in (_R_64, _R_PC64) else 4
            if r_offset + width > target[5]:
                raise ObjectError("a relocation outside its section")
            p = self.base + at + r_offset
            s = symbols[sym] + addend
            if kind == _R_64:
                struct.pack_into("<Q", image, at + r_offset, s & (2**64 - 1))
            elif kind == _R_PC64:
                struct.pack_into("<Q", image, at + r_offset, (s - p) & (2**64 - 1))
            elif kind in (_R_PC32, _R_PLT32, _R_32, _R_32S):
                v = s - p if kind in (_R_PC32, _R_PLT32) else s
                lo, hi = (0, 2**32) if kind == _R_32 else (-(2**31), 2**31)
                if not lo <= v < hi:
                    raise ObjectError(f"a 32-bit relocation (type {kind}) out of range")
                struct.pack_into("<I", image, at + r_offset, v & 0xFFFFFFFF)
            else:
                raise ObjectError(f"relocation type {kind} is not supported")

    def raw_lookup(self, name: str) -> int:
        """The address of the packed wrapper ``_mlir_<name>`` (0: none), as
        ``ExecutionEngine.raw_lookup``."""
        return self.functions.get("_mlir_" + name, 0)

    def __del__(self):
        if getattr(self, "base", None):
            _libc.munmap(self.base, self.size)
            self.base = None


def load_object(data: bytes, libraries=()) -> LoadedObject:
    """Map the object file ``data``; its undefined symbols from ``libraries``
    (paths) and the process.  Raises :class:`~mlir_mx.errors.ObjectError` for an object it
    does not take."""
    try:
        return LoadedObject(data, libraries)
    except (IndexError, struct.error, UnicodeError, ValueError, OverflowError) as err:
        raise ObjectError(f"malformed object file ({type(err).__name__}: {err})") from None
