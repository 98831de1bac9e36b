"""mlir-mx: OCP Microscaling (MX) block-scaled formats as a first-class MLIR dialect.

Stages, in the one direction data flows: ``dialect`` (the ``mx`` dialect and its
text syntax) -> ``patterns`` / ``passes`` -> ``pipelines`` -> ``execution``;
``numerics`` is the numpy oracle every test trusts; ``tools`` are thin CLIs.
"""

__version__ = "0.1.0"
