"""Shared fixtures for the model tests."""

import pytest

from mlir_mx.passes import registry


@pytest.fixture(scope="session")
def mx_to_linalg():
    """The mx-to-linalg pass; the model needs it, so its absence is a failure, not a skip."""
    spec = registry.lookup("mx-to-linalg")
    assert spec is not None, "mx-to-linalg is not registered: the mx variants cannot be modelled"
    return spec
