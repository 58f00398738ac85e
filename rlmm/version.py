"""rlmm's version as installed (the distribution's metadata): what ``rlmm --version``, ``GetStatus.version`` and
the ``rlmm_build_info`` metric say."""

from __future__ import annotations

from functools import cache
from importlib.metadata import version


@cache
def rlmm_version() -> str:
    return version("rlmm")
