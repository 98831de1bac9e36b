"""mx-demo's kernels step times numpy at the thread counts ours run at (its
BLAS held there by threadpoolctl) and says so; without threadpoolctl it says
that numpy ran at its BLAS's default instead.  A tiny shape, not the demo's."""

import builtins

import numpy as np

from mlir_mx.tools import mx_demo


def _tiny(monkeypatch):
    monkeypatch.setattr(mx_demo, "KERNEL_SHAPES", ((1, 64, 64),))


def test_numpy_is_timed_at_our_thread_counts_and_says_so(monkeypatch, capsys):
    from threadpoolctl import threadpool_info

    _tiny(monkeypatch)
    seen = []

    def fake_time(fn, reps=5):
        fn()
        seen.append({p["user_api"]: p["num_threads"] for p in threadpool_info()}.get("blas"))
        return 1e-3

    monkeypatch.setattr(mx_demo, "_time", fake_time)
    assert mx_demo._kernels_demo(np.random.default_rng(0))
    out = capsys.readouterr().out
    line = [x for x in out.splitlines() if x.startswith("   1x64x64:")][0]
    assert "1 and 2 threads bit-identical" in line
    assert "1.000 / 1.000 ms (1 / 2 threads), numpy f32 1.000 / 1.000 ms (its BLAS held to " \
        "the same thread counts by threadpoolctl)" in line
    # ours at 1 and 2, then numpy: its BLAS at 1, then 2 threads (where numpy has a BLAS pool)
    if seen[-1] is not None:
        assert seen[-2:] == [1, 2]


def test_without_threadpoolctl_the_demo_says_numpy_ran_at_its_default(monkeypatch, capsys):
    real_import = builtins.__import__

    def no_threadpoolctl(name, *args, **kwargs):
        if name == "threadpoolctl":
            raise ImportError("No module named 'threadpoolctl'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_threadpoolctl)
    times, how = mx_demo._numpy_times(lambda: None, (1, 2))
    assert len(times) == 1
    assert how == "at its BLAS's default threads, not ours: threadpoolctl is not installed"


def test_quick_demo_passes_every_check(capsys):
    """``mx-demo --quick`` (the aarch64 job's cut-down demo): every step's
    checks, on fewer formats and smaller shapes; the CPU's features named in
    this architecture's terms (``host.features_summary``)."""
    from mlir_mx.host import features_summary

    assert mx_demo.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "--quick: cut down" in out and out.rstrip().endswith("all checks passed")
    assert [x.split()[0] for x in out.splitlines() if "codes+scales bit-exact" in x] == list(
        mx_demo.QUICK_FORMATS
    )
    summary = features_summary()
    assert summary != "none" and f"CPU features: {summary}\n" in out
    for m, n, k in mx_demo.QUICK_KERNEL_SHAPES:
        assert f"   {m}x{n}x{k}: OK vs exact; 1 and 2 threads bit-identical;" in out
    assert "M = 17: OK vs exact; rows of M = 1 and 8 bit-identical to M = 17" in out
