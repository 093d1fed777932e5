"""The one compiled piece: the monitor's per-step kernel (everything else is in pyproject.toml).

It is optional: without a C compiler the install still succeeds and the
monitor uses its numpy path, which records the same statistics more slowly.
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class BuildExt(build_ext):
    def build_extensions(self) -> None:
        if self.compiler.compiler_type == "unix":  # gcc or clang: let the sums vectorize
            for ext in self.extensions:
                ext.extra_compile_args += ["-O3", "-fopenmp-simd"]
        super().build_extensions()


setup(
    ext_modules=[Extension("faultbench._stepstats", ["faultbench/_stepstats.c"], optional=True)],
    cmdclass={"build_ext": BuildExt},
)
