"""Found by `python -m mlir_mx_testing.differential --seed 2026 --batches 8`
(commit 063734b, the merge of main's compiled quantize): program p0_0 has
no matmul (dequantize / quantize_block / fold_scale of an FP4 (4, 4, 2)
tensor, block 4 along axis 1), and its quantize results differ from the
oracle in every variant compiled for 2 threads (the f32 matmul schedules'
variants included: `kernels-decode-2t`, `runner-default` on 2 cores), never
at 1 thread.  So not the dot kernels (issue 17); reported to the lead.
Cause, found 2026-12-03: LLVM's x86 backend widened the quantize kernels'
one-lane masked tail stores (llvm-project #179489), worked around by
``mx-legalize-masked-stores``; before it, 1 of 3 runs of this probe at
``a4e60d9`` printed a mismatch, after it 0 of 5.
Run: python bench/probes/repro_quantize_axis1_2threads.py  (prints the mismatches)"""
import random

import numpy as np

import mlir_mx_testing.differential as d

rng = random.Random("differential:2026:0")
nrng = np.random.default_rng(rng.randrange(2**32))
programs = [d.random_program(rng, f"p0_{i}") for i in range(6)]
p = programs[0]
inputs = {p.name: [d.random_inputs(p, nrng) for _ in range(3)]}
print(p.text())
d.VARIANTS[:] = [v for v in d.VARIANTS if v.name in ("blocked", "kernels-decode-1t", "kernels-decode-2t")]
report = d.check([p], inputs)
print(len(report.mismatches), "mismatches")
for m in report.mismatches:
    print(" ", m)
