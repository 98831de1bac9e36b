"""Register mlir-mx's transformers quantizer (:mod:`.transformers_quantizer`) when
transformers' quantizers are imported, without importing transformers itself:
``import mlir_mx.torch`` calls :func:`register_on_import`, which registers at
once when ``transformers.quantizers.auto`` is already imported, else installs a
one-shot import hook that registers right after it is (transformers imports it
with its model classes, before any ``from_pretrained``)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

__all__ = ["register_on_import"]

NAME = "transformers.quantizers.auto"
QUANTIZER = "mlir_mx.torch.transformers_quantizer"


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Registers right after ``transformers.quantizers.auto`` is imported (once)."""

    def find_spec(self, name, path, target=None):
        if name != NAME:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None:
            self.loader, spec.loader = spec.loader, self
        return spec

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        register()


def register() -> None:
    module = sys.modules.get(QUANTIZER)
    if module is not None and not hasattr(module, "register"):
        return  # it is being imported (and imported transformers' quantizers): it registers at its end
    from .transformers_quantizer import register as now

    now()


def register_on_import() -> None:
    """Register now if transformers' quantizers are imported, else when they are."""
    if NAME in sys.modules:
        register()
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())
