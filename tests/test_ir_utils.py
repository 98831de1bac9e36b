"""mlir_mx.ir_utils.top_level_ops: the symbols' level without a walk of every op."""

from __future__ import annotations

from mlir import ir

from mlir_mx.ir_utils import collect, top_level_ops

TEXT = """
llvm.func @a() {
  llvm.return
}
module @inner {
  llvm.func @b()
}
llvm.func @c()
"""


def test_top_level_ops_are_the_module_bodies_and_nested_modules():
    with ir.Context():
        m = ir.Module.parse(TEXT)
        names = [o.name for o in top_level_ops(m)]
        assert names == ["llvm.func", "builtin.module", "llvm.func", "llvm.func"]
        # the same llvm.func ops a walk of every op finds, in the same order
        walked = collect(m, lambda o: o.name == "llvm.func", ir.WalkOrder.PRE_ORDER)
        tops = [o for o in top_level_ops(m) if o.name == "llvm.func"]
        assert [str(o.attributes["sym_name"]) for o in tops] == [
            str(o.attributes["sym_name"]) for o in walked
        ]
        fn = tops[0]
        assert [o.name for o in top_level_ops(fn)] == ["llvm.func"]  # not a module: itself
