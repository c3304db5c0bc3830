"""Make tests/ importable (``from reference import ...``) regardless of how pytest is run."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


import pytest  # noqa: E402

import rlxc  # noqa: E402


@pytest.fixture(params=rlxc.cpu_info()["available_isas"])
def isa(request):
    """Run the test once per kernel ISA this machine can run (scalar always)."""
    before = rlxc.get_isa()
    rlxc.set_isa(request.param)
    yield request.param
    rlxc.set_isa(before)
