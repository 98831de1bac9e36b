"""Testing machinery that ships with mlir-mx (the top layer: it drives everything).

* :mod:`~mlir_mx_testing.campaign`: runs numbered, seeded cases in a worker
  process, in-process there for speed, and turns a signal or a hang of the
  worker into a finding for the case that caused it.
* :mod:`~mlir_mx_testing.fuzz`: the IR mutation fuzzer of the tools.
* :mod:`~mlir_mx_testing.misuse`: the Runner API misuse sweep.
* :mod:`~mlir_mx_testing.differential`: random mx programs run through every
  pipeline and compared with the oracle and with each other.

``python -m mlir_mx_testing.fuzz --help`` runs the first two from the
command line (``docs/testing.md``).
"""
