"""``mx-to-linalg``: lower the mx dialect to linalg on tensors (the 1:N split).

:mod:`.split` is the pass (every ``!mx.tensor`` value split into its
mantissa and scale tensors through signatures, calls, returns and branches),
:mod:`.lowerings` the lowerings of the four mx ops it calls (built with
:mod:`.helpers`), :mod:`.storage` the packed FP4/FP6 codes at function
boundaries (``subbyte-storage=packed``).
"""

from mlir_mx.passes.mx_to_linalg.split import MATMUL_LOWERINGS, mx_to_linalg

__all__ = ["mx_to_linalg", "MATMUL_LOWERINGS"]
