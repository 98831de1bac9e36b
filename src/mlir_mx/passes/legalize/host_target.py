"""``mx-host-target``: compile every function for this CPU class, no more.

The last step of ``memref-to-llvm`` (so of every shipped lowering).  Upstream's
``ExecutionEngine`` generates code for the host CPU with all of its features,
whatever the kernels were chosen for: with ``MLIR_MX_CPU_FEATURES`` masking
AVX-512, the generic vector code still came out as AVX-512 (``zmm``
registers), unlike on a real AVX2 CPU.  This pass gives every defined
``llvm.func`` the ``target_features`` of the CPU the kernels were chosen for
(:func:`mlir_mx.host.host_features`, masks applied; LLVM's names,
:func:`mlir_mx.cpu_features.llvm_target_features`): every mapped feature
``+`` where present and ``-`` where absent, so LLVM emits no instruction the
class lacks.  A function that already has ``target_features`` keeps them.

Before that it checks what would otherwise abort the process in LLVM's
backend, and fails with a diagnostic instead:

* a target intrinsic of another architecture (``llvm.x86.*`` for
  ``arch=aarch64``: a kernel generated with x86 features compiled for
  another target);
* a target intrinsic whose features the target lacks
  (:data:`mlir_mx.cpu_features.INTRINSICS`);
* an x86 target without FMA or F16C (:func:`mlir_mx.host.check_host`:
  ``llvm.fmuladd`` would round twice, f16 conversions would call a
  function the JIT cannot find).

Options: ``arch`` (``host``, ``x86_64``, ``aarch64``) and ``features``
(``host``: this machine's; ``none``; or cpuinfo names, comma-separated) name
another target, e.g. for cross-compiling the lowered IR with ``llc``;
``cpu`` sets ``target_cpu`` too (e.g. ``apple-m1``; empty: the engine's,
i.e. the host's, which then also tunes the code).
"""

from __future__ import annotations

from mlir import ir

from mlir_mx import cpu_features
from mlir_mx.errors import MXUnsupportedHostError
from mlir_mx.host import check_host, host_arch, host_features
from mlir_mx.ir_utils import collect, top_level_ops
from mlir_mx.passes.registry import Option, PassError, register_pass

__all__ = ["host_target", "target_of"]


def target_of(arch: str, features: str) -> tuple[str, frozenset[str]]:
    """The (architecture, closed cpuinfo features) the options name."""
    arch = host_arch() if arch == "host" else arch
    if features == "host":
        feats = host_features() if arch == host_arch() else frozenset()
    elif features == "none":
        feats = frozenset()
    else:
        feats = frozenset(features.replace(",", " ").split())
    return arch, cpu_features.close_features(feats, arch)


def _check_intrinsics(op: ir.Operation, arch: str, feats: frozenset[str]) -> None:
    have = feats | cpu_features.BASELINE.get(arch, frozenset())
    for call in collect(op, lambda o: o.name == "llvm.call_intrinsic"):
        name = ir.StringAttr(call.attributes["intrin"]).value
        owner = cpu_features.intrinsic_arch(name)
        if owner is not None and owner != arch:
            raise PassError(
                f"intrinsic {name} is an {owner} instruction: this code was generated for "
                f"{owner} CPU features and cannot be compiled for {arch} (generate it with "
                f"that target's features, e.g. MLIR_MX_CPU_FEATURES=none)",
                call.location,
            )
        alts = cpu_features.intrinsic_features(name)
        if alts and not any(all(f in have for f in alt) for alt in alts):
            need = " or ".join("+".join(alt) for alt in alts)
            raise PassError(
                f"intrinsic {name} needs {need}, which the target CPU lacks "
                f"(features: {' '.join(sorted(feats)) or 'none'})",
                call.location,
            )


@register_pass(
    "mx-host-target",
    "Give every llvm.func the target features of the CPU the kernels were chosen for "
    "(the host, masks applied); refuse intrinsics that target lacks",
    options=[
        Option("arch", str, "host", "Target architecture.", ("host", *cpu_features.ARCHES)),
        Option("features", str, "host", "'host', 'none' or cpuinfo feature names."),
        Option("cpu", str, "", "target_cpu to set (empty: leave the engine's)."),
    ],
)
def host_target(op: ir.Operation, *, arch: str, features: str, cpu: str) -> None:
    """See the module docstring."""
    arch, feats = target_of(arch, features)
    if arch in cpu_features.REQUIRED:
        try:
            check_host(arch, feats)
        except MXUnsupportedHostError as err:
            raise PassError(err.message) from None
    _check_intrinsics(op, arch, feats)
    attr = None
    flags = cpu_features.llvm_target_features(feats, arch)
    if flags:
        quoted = ", ".join(f'"{f}"' for f in flags)
        attr = ir.Attribute.parse(f"#llvm.target_features<[{quoted}]>", op.context)
    for fn in (o for o in top_level_ops(op) if o.name == "llvm.func"):
        if not len(fn.regions[0].blocks) or "target_features" in fn.attributes:
            continue  # a declaration, or features chosen by whoever wrote it
        if attr is not None:
            fn.attributes["target_features"] = attr
        if cpu:
            fn.attributes["target_cpu"] = ir.StringAttr.get(cpu, op.context)
