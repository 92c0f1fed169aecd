"""Stand-in for `spack.package`: records directives, offers the helpers hpctrain's recipe uses.

Offline tests only; see ../README.md for what this does not check.
"""

import contextlib
import os
import shutil

__all__ = [
    "RECORDS",
    "Executable",
    "conflicts",
    "depends_on",
    "join_path",
    "license",
    "maintainers",
    "on_package_attributes",
    "requires",
    "run_after",
    "variant",
    "version",
    "when",
    "which",
    "working_dir",
]

#: Every directive call, in order: (directive name, args, kwargs, enclosing `with when(...)`).
RECORDS = []
_WHEN_STACK = []


def _record(name, *args, **kwargs):
    RECORDS.append((name, args, kwargs, tuple(_WHEN_STACK)))


def version(*args, **kwargs):
    _record("version", *args, **kwargs)


def variant(*args, **kwargs):
    _record("variant", *args, **kwargs)


def depends_on(*args, **kwargs):
    _record("depends_on", *args, **kwargs)


def conflicts(*args, **kwargs):
    _record("conflicts", *args, **kwargs)


def requires(*args, **kwargs):
    _record("requires", *args, **kwargs)


def maintainers(*args, **kwargs):
    _record("maintainers", *args, **kwargs)


def license(*args, **kwargs):
    _record("license", *args, **kwargs)


@contextlib.contextmanager
def when(condition):
    _WHEN_STACK.append(condition)
    try:
        yield
    finally:
        _WHEN_STACK.pop()


def run_after(phase, when=None):
    def decorate(fn):
        fn.run_after = phase
        return fn

    return decorate


def on_package_attributes(**attrs):
    def decorate(fn):
        fn.on_package_attributes = attrs
        return fn

    return decorate


def join_path(*parts):
    return os.path.join(*parts)


class Executable:
    """Records calls instead of running anything (tests inspect CALLS)."""

    CALLS = []

    def __init__(self, path):
        self.path = path

    def __call__(self, *args, **kwargs):
        Executable.CALLS.append((self.path,) + tuple(args))


def which(name):
    path = shutil.which(name)
    return Executable(path) if path else None


@contextlib.contextmanager
def working_dir(path, create=False):
    yield path
