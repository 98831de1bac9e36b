"""Our passes of ``memref-to-llvm``: what LLVM's lowering and backend need
from a module so that it compiles to what it says, on this CPU class.

* :mod:`.subbyte_vector_memory` ``mx-legalize-subbyte-vector-memory``: vector
  loads/stores of f4/f6 memrefs element by element;
* :mod:`.expand_narrow_floats` ``mx-expand-narrow-floats``: software
  conversions for f8/f6/f4/E8M0;
* :mod:`.i1_memrefs` ``mx-legalize-i1-memrefs``: booleans stored in ``i8``
  memrefs;
* :mod:`.masked_stores` ``mx-legalize-masked-stores``: masks LLVM's x86
  backend cannot fold;
* :mod:`.host_target` ``mx-host-target``: the target features of the CPU the
  kernels were chosen for, and the checks that would otherwise abort LLVM.
"""
