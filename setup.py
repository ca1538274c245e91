"""Packaging for kraftlake.

The pins live in requirements.txt only (the entry scripts install exactly those into .venv);
this file derives install_requires from it, minus what only the tests and reports need, so a
`pip install .` on a cluster image does not drag in pytest or matplotlib.
"""

import re
import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
TEST_ONLY = {"pytest", "chispa", "hypothesis", "matplotlib"}


def _requirement_name(line: str) -> str:
    return re.split(r"[\s<>=!~;\[@]", line, maxsplit=1)[0].strip().lower().replace("_", "-")


def runtime_requirements() -> list[str]:
    requirements = []
    for raw in (HERE / "requirements.txt").read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line and _requirement_name(line) not in TEST_ONLY:
            requirements.append(line)
    return requirements


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
    install_requires=runtime_requirements(),
    cmdclass={"build_py": BuildWithSchemas},
)
