"""Build hook: copy the top-level ``conf/`` and ``datasets/sample/`` into the wheel.

The metadata lives in pyproject.toml. The repository keeps the configs and the bundled sample at
the top level (their source of truth); a wheel carries copies under ``rag_experiments/bundled/``
so an installed ``rag-exp`` finds them (rag_experiments/locations.py). Editable installs skip the
copy: they read the checkout itself. The sdist carries both folders (MANIFEST.in), so a wheel
built from the sdist gets them too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
BUNDLED = {"conf": "conf", "datasets/sample": "datasets/sample"}  # source -> under bundled/
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc")


class BuildPyWithBundle(build_py):
    """``build_py`` that also copies the configs and the sample into the package."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        target = Path(self.build_lib) / "rag_experiments" / "bundled"
        for source, dest in BUNDLED.items():
            if not (HERE / source).is_dir():
                raise FileNotFoundError(f"{HERE / source} is missing: cannot bundle it")
            shutil.rmtree(target / dest, ignore_errors=True)
            shutil.copytree(HERE / source, target / dest, ignore=IGNORE)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = list(super().get_outputs(include_bytecode))
        if self.editable_mode:
            return outputs
        target = Path(self.build_lib) / "rag_experiments" / "bundled"
        return outputs + [str(p) for p in target.rglob("*") if p.is_file()]


setup(cmdclass={"build_py": BuildPyWithBundle})
