import importlib
import os

import pytest


@pytest.fixture(scope="session")
def reference():
    def load(module: str):
        if os.environ.get("FS_REQUIRE_REFERENCE") == "1":
            return importlib.import_module(module)
        return pytest.importorskip(module, reason=f"{module} is the reference here; run `nox -s parity`")

    return load
