"""The dot kernels: exact block partials on the CPU's dot units.

:mod:`.units` which unit serves a pair and B's VNNI records, :mod:`.prep` A's
dot words and the in-kernel quantization of f32 activations, :mod:`.kernel` the
schedule and microkernel, :mod:`.codes` B expanded per call from its codes,
:mod:`.sweep` decode from codes, :mod:`.isa` the instructions per CPU (AVX-512, or
256-bit halves with AVX-VNNI or AVX2)."""
