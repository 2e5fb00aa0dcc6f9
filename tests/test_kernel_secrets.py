"""What a kernel can import, and whether a task's seed can be derived (answers must not leak to
the code being judged).

Before the fix the jail mounted the whole venv (``import reasoning_gym`` worked in a cell) and
reasoning tasks were generated with ``seed * 1000 + difficulty``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from envgym.tools.python_kernel import KernelConfig, SyncKernelPool
from envgym.tools.python_kernel.packages import KERNEL_PACKAGES, site_entries

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def pool() -> Iterator[SyncKernelPool]:
    with SyncKernelPool(KernelConfig(timeout_s=30), warm=0, max_kernels=2) as p:
        yield p


def test_generator_packages_and_the_project_are_not_importable_in_a_kernel(
    pool: SyncKernelPool,
) -> None:
    with pool.acquire() as s:
        for module in (
            "reasoning_gym",
            "envs",
            "envgym",
            "envgym.tools.python_kernel",
            "cellpylib",
            "torch",
        ):
            result = s.execute(f"import {module}")
            assert result.status == "error", (module, result.text)
            assert (
                result.text.splitlines()[-1]
                == f"ModuleNotFoundError: No module named '{module.split('.')[0]}'"
            )
        # Not through the metadata either, nor by walking the venv's directory.
        listing = s.execute(
            "import importlib.metadata as md, os, sysconfig\n"
            "names = {d.metadata['Name'].lower() for d in md.distributions()}\n"
            "site = sysconfig.get_paths()['purelib']\n"
            "print('reasoning-gym' in names or 'reasoning_gym' in names, 'reasoning_gym' in os.listdir(site))"
        )
        assert listing.text == "False False\n"


def test_the_documented_stack_is_importable(pool: SyncKernelPool) -> None:
    with pool.acquire() as s:
        result = s.execute(
            "import numpy, pandas, sympy, matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
            "print(int(numpy.arange(4).sum()), len(pandas.DataFrame({'a': [1, 2]})), sympy.factor('x**2-1'))"
        )
        assert result.text == "6 2 (x - 1)*(x + 1)\n"


def test_the_view_holds_only_the_closure_of_the_kernel_packages() -> None:
    names = site_entries(KERNEL_PACKAGES)
    assert {"ipykernel", "numpy", "pandas", "sympy", "matplotlib", "zmq"} <= set(names)
    assert not {
        n
        for n in names
        if n.lower().startswith(("reasoning_gym", "torch", "envgym", "__editable__"))
    }
