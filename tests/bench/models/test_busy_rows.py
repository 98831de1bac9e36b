"""``mx-bench --model --busy spin,self`` (``mlir_mx_bench.models.busy``): the
option, the rows' labels and targets, and the loads really started beside a
row (a row process that only records its environment: cheap)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mlir_mx_bench.cli import main
from mlir_mx_bench.models.busy import (
    SPIN_COMMAND,
    busy_spec,
    busy_targets,
    parse_busy,
    run_busy_row,
)
from mlir_mx_bench.models.llama.run import ModelOptions, _spec, targets

#: a row process that only records the environment it ran in
RECORDER = "mlir_mx_bench.models.workers"


def test_busy_kinds_are_parsed_and_checked(capsys):
    assert parse_busy(None) == [] and parse_busy("spin") == ["spin"]
    assert parse_busy("self, spin") == ["self", "spin"]
    assert main(["--model", "--busy", "idle"]) == 2
    assert "--busy: expected some of spin,self, got 'idle'" in capsys.readouterr().err
    assert main(["--model", "--busy", "spin,spin"]) == 2
    assert main(["--shapes", "--busy", "spin"]) == 2  # --model's option only
    assert "--busy" in capsys.readouterr().err


def test_busy_rows_are_labelled(tmp_path):
    opts = ModelOptions(threads=[2], busy=["spin"])
    plain = _spec(opts, tmp_path, "ours MXFP4", "mx", "f4E2M1FN", 2)
    busy = busy_spec(plain, "spin")
    assert busy["row"] == "ours MXFP4 [busy spin]" and busy["base_row"] == "ours MXFP4"
    assert busy["busy"] == "spin" and busy["name"] != plain["name"] and "busy" not in plain
    assert opts.as_dict()["busy"] == ["spin"]  # recorded with the options


def _row(threads, tps, busy="spin"):
    return {"spec": {"row": f"ours MXFP4 [busy {busy}]", "threads": threads, "kind": "mx",
                     "busy": busy, "base_row": "ours MXFP4", "env": None},
            "decode_tokens_per_s": tps, "prefill_ms": 1.0}  # fmt: skip


def test_a_busy_row_at_two_threads_is_held_to_its_one_thread_speed():
    rows = [_row(1, 10.0), _row(2, 8.0), _row(1, 5.0, "self"), _row(2, 6.0, "self")]
    by = {(r["spec"]["row"], r["spec"]["threads"]): r for r in rows}
    got = busy_targets(rows, 2, by)
    assert [(t["value"], t["met"]) for t in got] == [(0.8, False), (1.2, True)]
    assert got[0]["figure"] == "decode tokens/s, ours MXFP4 [busy spin]: 2 threads / 1 thread"
    assert busy_targets(rows, 1, by) == []
    assert any(t["figure"] == got[1]["figure"] for t in targets(rows))  # in the run's targets


def test_busy_times_are_held_as_speeds():
    """A gpt-oss run's busy rows are held on the MoE blocks' times: the ratio is
    the 1-thread time over the 2-thread one; a figure the row lacks is left out."""
    rows = [_row(1, 10.0), _row(2, 8.0)]
    rows[0].update(moe_prefill_ms=100.0, moe_decode_ms=4.0)
    rows[1].update(moe_prefill_ms=80.0)
    by = {(r["spec"]["row"], r["spec"]["threads"]): r for r in rows}
    figures = (("moe_prefill_ms", "MoE prefill speed", False), ("moe_decode_ms", "MoE decode", False))
    got = busy_targets(rows, 2, by, figures)
    assert [(t["figure"], t["value"], t["met"]) for t in got] == [
        ("MoE prefill speed, ours MXFP4 [busy spin]: 2 threads / 1 thread", 1.25, True)
    ]
    rows[1]["moe_decode_ms"] = 5.0
    assert [t["value"] for t in busy_targets(rows, 2, by, figures)] == [1.25, 0.8]
    del by[("ours MXFP4 [busy spin]", 1)]  # the 1-thread row failed: no ratio, not dropped
    assert [(t["value"], t["met"]) for t in busy_targets(rows, 2, by, figures)] == [(None, None)] * 2


def _spinners() -> list[int]:
    """Our child processes running :data:`SPIN_COMMAND`."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and cmd[-2:-1] == [SPIN_COMMAND[-1].encode()]:
            found.append(int(d.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_the_loads_run_beside_the_row_and_stop_after_it(tmp_path, monkeypatch):
    import mlir_mx_bench.models.busy as busy

    seen = []
    real = busy.run_worker

    def watched(*args):  # the spinner is running while the row runs
        seen.append(_spinners())
        return real(*args)

    monkeypatch.setattr(busy, "run_worker", watched)
    spec = busy_spec({"name": "r", "row": "ours", "out": str(tmp_path)}, "spin")
    rec = run_busy_row(RECORDER, spec, tmp_path)
    assert "error" not in rec and len(seen[0]) == 1 and _spinners() == []
    twin = busy_spec({"name": "t", "row": "ours", "out": str(tmp_path)}, "self")
    rec = run_busy_row(RECORDER, twin, tmp_path)
    # the second copy ran the same spec under its own name, and its figures are kept
    assert (tmp_path / "t-busy-self-twin.json").exists()
    assert rec["twin"] == {"prefill_ms": None, "decode_tokens_per_s": None}


def test_an_env_rows_second_copy_runs_with_its_setting(tmp_path):
    spec = {"name": "e", "row": "ours [MLIR_MX_TEAM=pool]", "out": str(tmp_path),
            "env": {"MLIR_MX_TEAM": "pool"}}  # fmt: skip
    rec = run_busy_row(RECORDER, busy_spec(spec, "self"), tmp_path)
    twin = json.loads((tmp_path / "e-busy-self-twin.json").read_text())
    for r in (rec, twin):  # the row and its copy both ran with the --env-row's variable
        assert r["environment"]["variables"].get("MLIR_MX_TEAM") == "pool"
