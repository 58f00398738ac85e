"""Compiles the hot path of rlmm's core at install time, with mypyc and Cython (everything else is in pyproject.toml).

RLMM_COMPILE=auto (the default) compiles when C and C++ compilers are found and says so when they are not;
RLMM_COMPILE=1 fails without them; RLMM_COMPILE=0 installs the interpreted core only. Both give the
same answers (tests/test_compiled_core.py); the compiled one applies records faster.
"""

import importlib.machinery
import importlib.util
import json
import os
import shlex
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).parent


def _compiled_module():
    spec = importlib.util.spec_from_file_location("rlmm_compiled", HERE / "rlmm" / "compiled.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def has_compilers() -> bool:
    """A C compiler for mypyc's modules and a C++ one for the native parts (rlmm/compiled.py's NATIVE_MODULES)."""
    for variable, default in (("CC", "cc"), ("CXX", "c++")):
        compiler = shlex.split(os.environ.get(variable) or sysconfig.get_config_var(variable) or default)
        if not compiler or shutil.which(compiler[0]) is None:
            return False
    return True


def remove_compiled(compiled) -> None:
    """Drop the modules an earlier compiling install left in this tree, so that the interpreted core runs."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        for path in [HERE / f"rlmm_core__mypyc{suffix}"] + [
            compiled.source_path(name).with_suffix(suffix) for name in compiled.CORE_MODULES
        ]:
            path.unlink(missing_ok=True)


class BuildExtRecordingSources(build_ext):
    """Records the compiled sources (``rlmm.compiled.source_record``) once their modules are built: a failed build
    leaves no record, so the modules of an earlier build are not taken for current (rlmm/compiled.py)."""

    digests: dict[str, dict[str, object]] = {}

    def run(self) -> None:
        super().run()
        if self.digests:
            _compiled_module().SOURCES_RECORD.write_text(json.dumps(self.digests, indent=1))


def ext_modules() -> list:
    compiled = _compiled_module()
    compiled.SOURCES_RECORD.unlink(missing_ok=True)
    mode = os.environ.get("RLMM_COMPILE", "auto")
    if mode not in ("auto", "0", "1"):
        sys.exit(f"RLMM_COMPILE={mode!r}: use auto, 1 or 0")
    if mode == "auto" and not has_compilers():
        print(
            "rlmm: no C or C++ compiler found, installing the interpreted core (RLMM_COMPILE=1 requires the "
            "compiled one)",
            file=sys.stderr,
        )
        mode = "0"
    if mode == "0":
        remove_compiled(compiled)
        return []
    from Cython.Build import cythonize
    from mypyc.build import mypycify

    BuildExtRecordingSources.digests = {name: compiled.source_record(name) for name in compiled.RECORDED_SOURCES}

    def relative(name: str) -> str:
        return str(compiled.source_path(name).relative_to(HERE.resolve()))

    return mypycify(
        [relative(name) for name in compiled.COMPILED_MODULES], opt_level="3", group_name="rlmm_core"
    ) + cythonize(
        [Extension(name, [relative(name)], extra_compile_args=["-O3"]) for name in compiled.NATIVE_MODULES],
        language_level=3,
        build_dir="build/cython",  # the generated C++ stays out of the source tree
        quiet=True,
    )


setup(ext_modules=ext_modules(), cmdclass={"build_ext": BuildExtRecordingSources})
