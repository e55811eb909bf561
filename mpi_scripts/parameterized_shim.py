"""The part of the ``parameterized`` package Horovod's test files use (``@parameterized.expand(cases)``), for
mpi_scripts/horovod_suite.sh on machines without it (nothing is downloaded here). Copied next to the test
file as ``parameterized.py`` only when ``import parameterized`` fails.

``expand(cases)`` puts one test method per case into the class being defined, named ``<name>_<index>``
(the package's naming), each calling the decorated function with the case's items as positional arguments;
the decorated name itself is left as None, so pytest collects the expanded methods only.
"""
import functools
import sys


class parameterized:  # noqa: N801 (the package's name)
    @staticmethod
    def expand(cases):
        def decorate(function):
            namespace = sys._getframe(1).f_locals  # the class body being executed, as the package does
            for index, case in enumerate(cases):
                args = tuple(case) if isinstance(case, (list, tuple)) else (case,)

                def method(self, _args=args):
                    return function(self, *_args)

                method = functools.wraps(function)(method)
                method.__name__ = method.__qualname__ = f"{function.__name__}_{index}"
                namespace[method.__name__] = method
            return None
        return decorate
