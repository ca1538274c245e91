"""Packaging for kraftlake.

The product's pins live in requirements.txt only (spark-submit.sh installs exactly those into .venv;
the tests' own are in requirements-test.txt). install_requires is derived from it minus the benchmark
chart's matplotlib (the extra ``bench``), so a `pip install .` on a cluster image installs what the
jobs run on.
"""

import re
import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
BENCH_ONLY = {"matplotlib"}


def _requirement_name(line: str) -> str:
    return re.split(r"[\s<>=!~;\[@]", line, maxsplit=1)[0].strip().lower().replace("_", "-")


def requirements(bench: bool) -> list[str]:
    """requirements.txt's pins: the benchmark's alone (``bench``) or all the others."""
    pins = []
    for raw in (HERE / "requirements.txt").read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line and (_requirement_name(line) in BENCH_ONLY) == bench:
            pins.append(line)
    return pins


class BuildWithSchemas(build_py):
    """Ship schemas/ inside the package as kraftlake/_schemas: an installed kraftlake has no repo
    around it, and ``kraftlake.metadata.schemas.schema_dir`` falls back to that copy."""

    def run(self) -> None:
        super().run()
        shutil.copytree(HERE / "schemas", Path(self.build_lib) / "kraftlake" / "_schemas", dirs_exist_ok=True)


def version() -> str:
    text = (HERE / "lib" / "kraftlake" / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', text, re.M)
    if not match:
        raise RuntimeError("no __version__ in lib/kraftlake/__init__.py")
    return match.group(1)


setup(
    name="kraftlake",
    version=version(),
    description="The Kafka KRaft controller's metadata state machine as a Spark Structured Streaming job over Delta tables",
    package_dir={"": "lib"},
    packages=find_packages("lib"),
    package_data={"kraftlake": ["*.properties"]},
    include_package_data=True,
    python_requires=">=3.10",
    install_requires=requirements(bench=False),
    extras_require={"bench": requirements(bench=True)},
    cmdclass={"build_py": BuildWithSchemas},
)
