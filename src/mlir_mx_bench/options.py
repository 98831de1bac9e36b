"""mx-bench's option values: element format specs, integer lists and thread
counts, each checked with a message naming the option."""

from __future__ import annotations

from mlir_mx.tools.driver import UsageError

__all__ = ["element_spec", "positive_ints", "thread_counts"]


def element_spec(spec: str) -> str:
    """``F`` or ``A:B``, each an MX element format, normalized."""
    from mlir_mx.numerics import element_format
    from mlir_mx.numerics.formats import E4M3_SCALED

    if spec.lower() in E4M3_SCALED:  # nvfp4: --quantize's rows take it (quantize_rows.py)
        return spec.lower()
    parts = [element_format(p).name for p in spec.split(":")]
    if len(parts) > 2:
        raise ValueError(f"--formats: expected F or A:B, got '{spec}'")
    return ":".join(parts) if len(parts) == 2 and parts[0] != parts[1] else parts[-1]


def positive_ints(text: str, what: str, typed: str | None = None) -> list[int]:
    """Comma-separated positive integers; ``typed``: the value as the user typed
    it, quoted in the message (``text`` may be a rewritten form of it)."""
    try:
        vals = [int(x) for x in text.split(",")]
    except ValueError:
        raise UsageError(
            f"{what}: expected comma-separated integers, got '{typed or text}'"
        ) from None
    if any(v < 1 for v in vals):
        raise UsageError(f"{what}: values must be positive, got '{typed or text}'")
    return vals


def thread_counts(text: str | None) -> list[int]:
    """``--threads``: each count checked (host.check_threads); default 1 and all cores."""
    from mlir_mx.errors import MXError
    from mlir_mx.host import check_threads, default_thread_counts

    if text is None:
        return list(default_thread_counts())
    try:
        return [check_threads(v, "--threads") for v in positive_ints(text, "--threads")]
    except UsageError:
        raise
    except MXError as err:
        raise UsageError(f"{err}") from None
