"""Test-suite configuration: ``tests/`` is on ``sys.path`` (pytest inserts the
directory of a rootdir conftest), so test modules share helpers such as
:mod:`matmul_cases` by a plain import."""
