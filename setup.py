"""The optional compiled kernel of the hashing-v1 embedder; everything else is in
pyproject.toml.

``optional=True``: where no C compiler is found the install still succeeds, and the
embedder takes its numpy path (the same vectors, slower). Flags keep IEEE float
semantics: no fused multiply-add contraction, no fast-math.
"""

import sys

from setuptools import Extension, setup

_FLAGS = [] if sys.platform == "win32" else ["-O2", "-ffp-contract=off", "-fno-fast-math"]

setup(
    ext_modules=[
        Extension(
            "agentcore.plugins._hashing_kernel",
            sources=["agentcore/plugins/_hashing_kernel.c"],
            extra_compile_args=_FLAGS,
            optional=True,
        )
    ]
)
