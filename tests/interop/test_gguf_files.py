"""GGUF files that are malformed, and writes that fail: never a leak, a blowup or lost data.

Round 2 reproducers:

* ``f7_gguf_memory_blowup``: a 448-byte file whose metadata type STRING became
  ARRAY declared 1.5e10 elements; the reader built them one by one (GBs of RSS).
* ``f5_gguf_indexerror``: truncated files and huge lengths leaked ``IndexError``.
* ``f10_write_gguf_truncates_on_error``: a failed ``write_gguf`` left the file it
  was replacing truncated; a (0, 64) tensor was written but could not be read.

Every malformed file is now a ``ValueError: <path>: not a readable GGUF file
(...)`` before anything is allocated, and ``write_gguf`` validates first and
renames a complete temporary file over the target.  The seeded mutation fuzzer
of the same rules is ``mlir_mx_testing.gguf_fuzz`` (tests/testing/).
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from mlir_mx import oracle
from mlir_mx.interop.gguf import read_gguf, write_gguf
from mlir_mx.interop.gguf_format import check_tensor, parse_gguf

gguf = pytest.importorskip("gguf", reason="GGUF interop needs the gguf package (mlir-mx[gguf])")

NOT_READABLE = "not a readable GGUF file"


def _weight(shape=(8, 64), seed=0):
    return oracle.quantize(
        np.random.default_rng(seed).standard_normal(shape).astype(np.float32), "f4E2M1FN", 32
    )


@pytest.fixture
def good(tmp_path):
    """A small well-formed file: two tensors, a string and an int in the metadata."""
    path = tmp_path / "good.gguf"
    write_gguf(path, {"blk.0.w": _weight(), "blk.1.w": _weight((4, 32), 1)},
               metadata={"general.name": "t", "n": 7})  # fmt: skip
    return path


def _refused(path, what=""):
    with pytest.raises(ValueError, match=NOT_READABLE) as info:
        read_gguf(path)
    assert str(info.value).startswith(f"{path}: {NOT_READABLE} (") and what in str(info.value)
    return str(info.value)


def test_a_string_retyped_as_an_array_is_refused_fast_in_little_memory(tmp_path, good):
    """STRING -> ARRAY on a metadata type, in a child capped at 1 GiB: refused
    at once. The read itself is timed in the child (not the interpreter's
    start and imports): under 2 s even on a loaded 2-core machine (it takes
    milliseconds; the old reader ran for minutes), and no more than 32 MiB of
    peak memory."""
    b = bytearray(good.read_bytes())
    i = b.index(b"general.name") + len(b"general.name")
    assert struct.unpack_from("<I", b, i)[0] == 8  # STRING
    struct.pack_into("<I", b, i, 9)  # ARRAY
    bad = tmp_path / "f7.gguf"
    bad.write_bytes(b)
    child = textwrap.dedent(
        f"""
        import resource, time
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from mlir_mx.interop.gguf import read_gguf
        import gguf  # imported before the clock starts, as read_gguf imports it
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.monotonic()
        try:
            read_gguf({str(bad)!r})
        except ValueError as e:
            print(e)
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss
        print(f"{{time.monotonic() - t0:.6f}} {{grown}}")
        """
    )
    p = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    message, timing = p.stdout.rstrip("\n").rsplit("\n", 1)
    assert message.startswith(f"{bad}: {NOT_READABLE} (metadata 'general.name'"), p.stdout
    assert "elements" in message
    seconds, grown_kib = timing.split()
    assert float(seconds) < 2.0, p.stdout
    assert int(grown_kib) < 32 * 1024, p.stdout


def test_huge_lengths_and_counts_are_refused(tmp_path, good):
    data = good.read_bytes()
    for offset, what in [(24, "the key of metadata entry 0"), (8, "tensor infos"),
                         (16, "metadata entries")]:  # fmt: skip
        b = bytearray(data)
        b[offset : offset + 8] = struct.pack("<Q", 2**62)
        bad = tmp_path / f"huge-{offset}.gguf"
        bad.write_bytes(b)
        _refused(bad, what)


def test_every_truncation_into_the_data_is_refused(tmp_path, good):
    """Every prefix of a good file that cuts into its data is refused; one that
    only drops the padding after the last tensor reads the same tensors."""
    data = good.read_bytes()
    end = max(t.start + t.nbytes for t in parse_gguf(data, gguf.GGML_QUANT_SIZES))
    assert len(data) - 32 < end <= len(data)
    full = read_gguf(good)
    bad = tmp_path / "t.gguf"
    for n in range(len(data)):
        bad.write_bytes(data[:n])
        if n < end:
            _refused(bad)
        else:
            got = read_gguf(bad)
            assert all(got[k].bitwise_equal(v) for k, v in full.items())


def test_every_metadata_and_tensor_type_value(tmp_path, good):
    """Each value-type and tensor-type field set to every small value and to 2**32 - 1:
    read, or refused the documented way, and in agreement with gguf's own reader."""
    data = good.read_bytes()
    vtype = data.index(b"general.name") + len(b"general.name")
    name1 = data.index(b"blk.1.w")
    ttype = name1 + len(b"blk.1.w") + 4 + 2 * 8  # after the rank and the two dims
    assert struct.unpack_from("<I", data, ttype)[0] == int(gguf.GGMLQuantizationType.MXFP4)
    bad = tmp_path / "types.gguf"
    for field in (vtype, ttype):
        for v in [*range(45), 2**32 - 1]:
            b = bytearray(data)
            struct.pack_into("<I", b, field, v)
            bad.write_bytes(b)
            try:
                read_gguf(bad)
            except ValueError as e:
                assert str(e).startswith(f"{bad}: {NOT_READABLE} (")
                continue
            gguf.GGUFReader(bad)  # what we accept, gguf reads


def test_other_refusals(tmp_path, good):
    data = good.read_bytes()
    cases = {
        "bad magic": b"GGUX" + data[4:],
        "version": data[:4] + struct.pack("<I", 1) + data[8:],
        "empty file": b"",
        "alignment": None,
    }
    for what, content in cases.items():
        if content is None:  # general.alignment as a string
            p = tmp_path / "al.gguf"
            w = gguf.GGUFWriter(p, "x")
            w.add_string("general.alignment", "32")
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.close()
            _refused(p, "general.alignment")
            continue
        p = tmp_path / "x.gguf"
        p.write_bytes(content)
        _refused(p, "" if what == "empty file" else what.split()[-1])
    _refused(tmp_path)  # a folder
    with pytest.raises(FileNotFoundError):
        read_gguf(tmp_path / "missing.gguf")


def _write_fails(path, tensors, md, err, match):
    before = path.read_bytes()
    with pytest.raises(err, match=match):
        write_gguf(path, tensors, metadata=md)
    assert path.read_bytes() == before  # the old file, untouched
    assert sorted(os.listdir(path.parent)) == [path.name]  # no temporary file left


def test_a_refused_write_leaves_the_old_file_and_empty_tensors_read_back(tmp_path):
    """(a) a metadata int outside int64, and every other refusal, leave the old
    file as it was; (b) a (0, 64) tensor beside a good one reads back."""
    path = tmp_path / "f10.gguf"
    good = _weight((4, 64))
    write_gguf(path, {"w": good})
    _write_fails(path, {"w": good}, {"k": 2**70}, ValueError, r"'k' = \d+ does not fit in int64")
    _write_fails(path, {"w": good}, {"k": "\ud800"}, ValueError, "UTF-8")
    _write_fails(path, {"w": good}, {"general.alignment": 64}, ValueError, "set by write_gguf")
    _write_fails(path, {"w": good}, {"k": [1]}, TypeError, "'k' has a list")
    _write_fails(path, {"x" * 64: good}, {}, ValueError, "longer than 63 bytes")
    _write_fails(path, {"w": good, "v": _weight((1, 1, 1, 1, 32))}, {}, ValueError, "1 to 4")
    nan = good.scales.copy()
    nan[0, 0] = np.uint8(255).view(nan.dtype)
    bad = type(good)(good.codes, nan, good.element, good.block_size, good.axis)
    _write_fails(path, {"w": good, "b": bad}, {}, ValueError, "scale byte 255")
    assert list(read_gguf(path)) == ["w"]
    empty = oracle.quantize(np.zeros((0, 64), np.float32), "f4E2M1FN", 32)
    write_gguf(path, {"w": good, "e": empty})
    back = read_gguf(path)
    assert back["w"].bitwise_equal(good) and back["e"].bitwise_equal(empty)
    assert back["e"].shape == (0, 64)
    write_gguf(path, {"e": empty})  # alone
    assert read_gguf(path)["e"].shape == (0, 64)


@pytest.mark.parametrize(
    "shape,ok",
    [((0, 2**60), False), ((2**30, 0, 2**30), False), ((0, 0, 0, 2**60 + 32), False),
     ((0, 2**60 - 32), True), ((2**29, 0, 2**30), True), ((3, 0, 2**58), True)],
)  # fmt: skip
def test_the_writer_refuses_what_the_reader_refuses(tmp_path, shape, ok):
    """An empty MXFP4 tensor of 2^60 elements or more (zeros aside) was written,
    then refused by read_gguf ("dimensions [...] are too large"): the writer now
    applies the reader's own check of a tensor (gguf_format.check_tensor).  Just
    under the limit it is written, and reads back (ours and gguf's reader)."""
    path = tmp_path / "huge.gguf"
    good = _weight((4, 64))
    write_gguf(path, {"w": good})
    sshape = shape[:-1] + (shape[-1] // 32,)
    empty = type(good)(np.zeros(shape, np.uint8), np.zeros(sshape, np.uint8), "f4E2M1FN", 32)
    ne = list(reversed(shape))
    mxfp4 = int(gguf.GGMLQuantizationType.MXFP4)
    if not ok:
        with pytest.raises(ValueError, match="are too large"):
            check_tensor("e", ne, mxfp4, gguf.GGML_QUANT_SIZES)
        _write_fails(path, {"w": good, "e": empty}, {}, ValueError,
                     re.escape(f"tensors['e']: tensor 'e': dimensions {ne} are too large"))  # fmt: skip
        return
    assert check_tensor("e", ne, mxfp4, gguf.GGML_QUANT_SIZES) == 0  # no bytes
    write_gguf(path, {"w": good, "e": empty})
    back = read_gguf(path)
    assert back["e"].shape == shape and back["w"].bitwise_equal(good)
    (info,) = [t for t in gguf.GGUFReader(path).tensors if t.name == "e"]
    assert [int(d) for d in info.shape] == ne


def test_metadata_reads_back_empty_strings_included(tmp_path):
    """gguf's ``add_string`` drops an empty string (found by the writer mode of
    the GGUF fuzzer): every entry written must read back, with its type."""
    path = tmp_path / "md.gguf"
    md = {"s": "", "t": "\u00fc", "b": False, "i": 0, "j": -(2**63), "f": -0.0, "nan": float("nan")}
    write_gguf(path, {"w": _weight()}, metadata=md)
    fields = gguf.GGUFReader(path).fields
    types = {str: "STRING", bool: "BOOL", int: "INT64", float: "FLOAT64"}
    for key, value in md.items():
        f = fields[key]
        assert f.types == [gguf.GGUFValueType[types[type(value)]]], key
        raw = np.asarray(f.parts[f.data[0]]).tobytes()
        want = value.encode() if isinstance(value, str) else struct.pack(
            {bool: "<?", int: "<q", float: "<d"}[type(value)], value)  # fmt: skip
        assert raw == want, key


def test_a_write_that_fails_midway_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "mid.gguf"
    good = _weight((4, 64))
    write_gguf(path, {"w": good})

    def boom(self, *a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(gguf.GGUFWriter, "write_tensors_to_file", boom)
    _write_fails(path, {"w": _weight((4, 64), 5)}, {}, OSError, "No space left")


def _gguf_bytes(infos, data=b""):
    """A GGUF v3 file: no metadata, ``infos`` = [(name, ne, ggml type, offset)], then ``data``."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(infos), 0)
    for name, ne, ttype, offset in infos:
        raw = name.encode()
        out += struct.pack("<Q", len(raw)) + raw + struct.pack("<I", len(ne))
        out += b"".join(struct.pack("<Q", d) for d in ne) + struct.pack("<IQ", ttype, offset)
    return out + bytes(-len(out) % 32) + data


@pytest.mark.parametrize(
    "ne,what",
    [((), "first dimension 1 is not a multiple of its block (32)"),  # rank 0: ggml's ne0 = 1
     ((64, 2**62, 0), "are too large"), ((0, 2**63), "are too large"),
     ((32, 1, 1, 1, 1), "5 dimensions"), ((48,), "not a multiple")],
)  # fmt: skip
def test_dimensions_ggml_cannot_hold_are_refused(tmp_path, ne, what):
    """Found by the GGUF fuzzer: gguf's own reader fails on these (IndexError,
    'array is too big'); they are refused like every other malformed file."""
    p = tmp_path / "dims.gguf"
    p.write_bytes(_gguf_bytes([("w", ne, int(gguf.GGMLQuantizationType.MXFP4), 0)], bytes(64)))
    _refused(p, what)
    p.write_bytes(_gguf_bytes([("f", (), int(gguf.GGMLQuantizationType.F32), 0)], bytes(32)))
    assert read_gguf(p) == {}  # a rank-0 f32 tensor is fine (and skipped: not MXFP4)
    assert len(gguf.GGUFReader(p).tensors) == 1


def test_a_stale_temporary_of_a_killed_writer_is_removed_by_the_next_write(tmp_path):
    """Issue 29: ``write_gguf`` killed mid-write (kill -9) left its hidden
    temporary file behind; the next write to the same file removes it."""
    path = tmp_path / "w.gguf"
    stale = tmp_path / ".w.gguf.abc_1234.tmp"  # named as the writer names them
    stale.write_bytes(b"GGUF" + b"\0" * 60)  # what a killed writer leaves
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    write_gguf(path, {"w": x})
    assert os.listdir(tmp_path) == ["w.gguf"]
    assert read_gguf(path)["w"].shape == (4, 64)
