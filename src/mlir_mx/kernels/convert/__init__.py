"""The conversion kernels (quantize and dequantize): :mod:`.emitter` (the spec,
the module, the loops both kernels share), :mod:`.encode` (the per-register
numerics of quantization), :mod:`.quantize` and :mod:`.dequantize`."""
