"""The f32 matmul kernels: :mod:`.stream` (decode and small batches) and
:mod:`.prefill` (B widened into f32 panels, a register-tiled microkernel)."""
