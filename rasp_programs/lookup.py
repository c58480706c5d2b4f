"""A case id -> its `Case`: an InterpBench number ("33"), a generated name (`gen-0-3`) or, for
programs a researcher brings, `package.module:function` naming a function that returns a `Case`.
Every command looks cases up the same way, here.
"""

from __future__ import annotations

import dataclasses
import importlib

from eval.core.spec import import_spec
from rasp_programs.case import Case, CaseError


def builtin_case_ids() -> list[str]:
    """InterpBench numbers of the built-in cases, in numeric order."""
    from rasp_programs.catalogue import BUILTIN_FACTORIES

    return sorted(BUILTIN_FACTORIES, key=int)


def get_case(case_id: str | int) -> Case:
    """The case named by an InterpBench number, a generated name (`gen-0-3`, see
    rasp_programs.generate) or `package.module:function`."""
    from rasp_programs.catalogue import BUILTIN_FACTORIES

    key = str(case_id)
    if ":" in key:
        return _load_outside_case(key)
    if key.startswith("gen-"):  # a generated case: rebuilt from its name, refused if not kept
        from rasp_programs.generate_check import checked_case

        return checked_case(key)
    if key not in BUILTIN_FACTORIES:
        from rasp_programs.catalogue import MAIN_CASE_IDS

        more = len(BUILTIN_FACTORIES) - len(MAIN_CASE_IDS)  # the full list is `zoo list`, not one error line
        raise CaseError(
            f"unknown case {key!r}; known cases: {', '.join(MAIN_CASE_IDS)} and {more} more from InterpBench's "
            "Appendix H (`zoo list`), gen-SEED-INDEX from `zoo generate`, or package.module:function for your own"
        )
    module_name, func_name = BUILTIN_FACTORIES[key].split(":")
    return getattr(importlib.import_module(module_name), func_name)()


def _load_outside_case(spec: str) -> Case:
    try:
        factory = import_spec(spec, "case")
    except ValueError as exc:
        raise CaseError(str(exc)) from None
    try:
        case = factory()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit included: a factory must not end the command silently
        raise CaseError(f"case {spec!r}: {spec.partition(':')[2]}() raised {type(exc).__name__}"
                        f"{': ' + str(exc).splitlines()[0][:120] if str(exc) else ''}") from None
    if not isinstance(case, Case):
        raise CaseError(f"case {spec!r}: {spec.partition(':')[2]}() returned {type(case).__name__}, not a Case")
    if case.id != spec:
        case = dataclasses.replace(case, id=spec)
    return case
