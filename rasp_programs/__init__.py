"""The case catalogue, Tracr compilation to HookedTransformer, and the high-level graph.

Heavy names (compile_case, CompiledCase) are imported on first use so that importing the
package for `zoo list` does not import jax or torch.
"""

from rasp_programs.case import BOS, PAD, Case, CaseError
from rasp_programs.lookup import builtin_case_ids, get_case

__all__ = ["BOS", "PAD", "Case", "CaseError", "CompiledCase", "builtin_case_ids", "compile_case", "get_case"]


def __getattr__(name: str):
    if name in ("compile_case", "CompiledCase"):
        from rasp_programs import compile as _compile

        return getattr(_compile, name)
    raise AttributeError(f"module 'rasp_programs' has no attribute {name!r}")
