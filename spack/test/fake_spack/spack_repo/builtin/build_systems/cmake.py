"""Stand-in for Spack's CMakePackage: `define`/`define_from_variant` as Spack formats them.

Offline tests only; see ../../../README.md.
"""

import collections.abc


def define(cmake_var, value):
    if isinstance(value, bool):
        kind, value = "BOOL", "ON" if value else "OFF"
    else:
        kind = "STRING"
        if isinstance(value, collections.abc.Sequence) and not isinstance(value, str):
            value = ";".join(str(v) for v in value)
        else:
            value = str(value)
    return f"-D{cmake_var}:{kind}={value}"


class CMakePackage:
    """The package object a test builds: a spec, run_tests, dependency packages, builder."""

    def __init__(self, spec, run_tests=False, dependency_packages=None, build_directory="."):
        self.spec = spec
        self.run_tests = run_tests
        self._deps = dependency_packages or {}
        self.builder = type("Builder", (), {"build_directory": build_directory})()

    def __getitem__(self, name):
        return self._deps[name]

    def define(self, cmake_var, value):
        return define(cmake_var, value)

    def define_from_variant(self, cmake_var, variant=None):
        variant = variant or cmake_var.lower()
        if variant not in self.spec.variants:
            raise KeyError(f'"{variant}" is not a variant of the test spec')
        return define(cmake_var, self.spec.variants[variant])
