"""An entry's case.json -> a `Case`, without ever importing what the file names.

case.json is data. Its `id` is never resolved with the `package.module:function` loader (that would
run whatever module a publisher names: `sys:exit`, `os:abort`, ...). Instead:

- a built-in InterpBench number ("33") goes through the fixed registry of built-in cases
  (rasp_programs.catalogue.BUILTIN_FACTORIES: the project's own modules only), a generated name
  (`gen-0-3`) is rebuilt by rasp_programs.generate from the parsed name, and the file's task
  fields (vocabulary, lengths, causal flag, task kind, BOS / PAD) must equal the built-in case's;
- a planted model (`"family": "planted"`) is rebuilt from its name by the package `planted` (a fixed
  registry of the project's own models), and the task fields must equal the planted model's;
- any other id becomes a *data-only* case built from the file alone: vocabulary, lengths, task
  kind, the uniform sampler; it has no RASP program. Asking for its program (compiling it, its
  reference outputs, `zoo.evaluate(entry)`) raises one CaseError line that says so. Its model,
  circuit and sampler work; `zoo eval case pkg.mod:fn` evaluates it against the program only when
  the user names that program on the command line (their own, installed code).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from rasp_programs.case import BOS, PAD, Case, CaseError
from zoo.artifact import ArtifactError

OUTSIDE_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")
MAX_VOCAB = 65536
MAX_SEQ_LEN = 2047  # n_ctx - 1 at eval.core.model_config.MAX_CTX
MAX_TEXT = 20000
TASK_FIELDS = ("task_kind", "vocab", "max_seq_len", "min_seq_len", "causal", "bos", "pad")
"""What a built-in case's case.json must agree on (descriptions and notes may differ by version)."""


class NoProgram:
    """`build_program` of a data-only case: raises, saying why there is no program."""

    def __init__(self, case_id: str) -> None:
        self.case_id = case_id

    def __call__(self) -> Any:
        raise CaseError(
            f"case {self.case_id!r} came from an entry's case.json, which holds no program (an entry never "
            f"names code to import); to compile or evaluate it, install the package that defines it and "
            f"name it yourself, e.g. `zoo eval case {self.case_id}`")


def entry_name_for(case_id: str, family: str = "case") -> str:
    """The entry folder name a case id implies (rasp_programs.Case.entry_name's rule)."""
    return f"{family}-" + case_id.replace(":", "-")


def is_data_only(case: Case) -> bool:
    return isinstance(case.build_program, NoProgram)


def case_from_json(data: Mapping[str, Any], *, entry: str) -> Case:
    """The Case an entry's case.json describes (see the module docstring); ArtifactError if the
    file is malformed or contradicts the built-in case it names."""
    what = f"entry {entry}: case.json"
    case_id = data.get("id")
    if not isinstance(case_id, str):
        raise ArtifactError(f"{what}: id must be a string")
    _check_fields(data, what)
    from rasp_programs.catalogue import BUILTIN_FACTORIES

    family = data.get("family", "case")
    if family not in ("case", "planted"):
        raise ArtifactError(f"{what}: family must be case or planted")
    if family == "planted":
        return _planted_case(data, case_id, what)
    if case_id in BUILTIN_FACTORIES or case_id.startswith("gen-"):
        from rasp_programs.lookup import get_case
        from rasp_programs.generate import generated_case

        try:  # the fixed registry, or the generator rebuilding a gen- name (parsed, nothing imported)
            case = generated_case(case_id) if case_id.startswith("gen-") else get_case(case_id)
        except CaseError as exc:
            raise ArtifactError(f"{what}: {exc}") from None
        return _same_task(case, data, what, f"built-in case {case_id}")
    if not OUTSIDE_ID.fullmatch(case_id) or len(case_id) > 200:
        raise ArtifactError(f"{what}: id {_short(case_id)} is neither a built-in case number nor "
                            "package.module:function")
    try:
        return Case(
            id=case_id, name=_text(data, "name", what), description=_text(data, "description", what),
            task_kind=data["task_kind"], vocab=tuple(data["vocab"]), max_seq_len=data["max_seq_len"],
            min_seq_len=data["min_seq_len"], causal=data["causal"], build_program=NoProgram(case_id),
            notes=_text(data, "notes", what, required=False),
        )
    except CaseError as exc:
        raise ArtifactError(f"{what}: {exc}") from None


def _planted_case(data: Mapping[str, Any], case_id: str, what: str) -> Case:
    """The planted model's task, rebuilt from its name; its task fields must equal the file's."""
    from planted import get_planted

    try:
        case = get_planted(case_id).case
    except CaseError as exc:
        raise ArtifactError(f"{what}: {exc}") from None
    return _same_task(case, data, what, f"planted model {case_id}")


def _same_task(case: Case, data: Mapping[str, Any], what: str, whose: str) -> Case:
    """`case` if the file's task fields equal the rebuilt case's; else one line naming the field."""
    ours = case.metadata()
    for key in TASK_FIELDS:
        if canon(ours[key]) != canon(data[key]):
            raise ArtifactError(f"{what}: {key} differs from {whose}'s "
                                f"({_short(data[key])} vs {_short(ours[key])}); refused")
    return case


def _check_fields(data: Mapping[str, Any], what: str) -> None:
    if data.get("task_kind") not in ("classification", "regression"):
        raise ArtifactError(f"{what}: task_kind must be classification or regression")
    vocab = data.get("vocab")
    if not isinstance(vocab, list) or not 1 <= len(vocab) <= MAX_VOCAB:
        raise ArtifactError(f"{what}: vocab must be a list of 1 to {MAX_VOCAB} values")
    for value in vocab:
        if not is_scalar(value):
            raise ArtifactError(f"{what}: vocab holds {_short(value)}; values must be strings, numbers or booleans")
    if len({canon(v) for v in vocab}) != len(vocab):
        raise ArtifactError(f"{what}: vocab has duplicates")
    for key in ("max_seq_len", "min_seq_len"):
        value = data.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_SEQ_LEN:
            raise ArtifactError(f"{what}: {key} must be an integer in [1, {MAX_SEQ_LEN}]")
    if data["min_seq_len"] > data["max_seq_len"]:
        raise ArtifactError(f"{what}: min_seq_len exceeds max_seq_len")
    if not isinstance(data.get("causal"), bool):
        raise ArtifactError(f"{what}: causal must be true or false")
    if data.get("bos") != BOS or data.get("pad") != PAD:
        raise ArtifactError(f"{what}: bos / pad must be {BOS!r} / {PAD!r}")


def is_scalar(value: Any) -> bool:
    if isinstance(value, str):
        return 0 < len(value) <= 256
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, (int, bool))


def canon(value: Any) -> str:
    """A comparison key that tells 1, 1.0 and true apart (Python's == does not)."""
    return json.dumps(value, sort_keys=True)


def _text(data: Mapping[str, Any], key: str, what: str, *, required: bool = True) -> str:
    value = data.get(key, None if required else "")
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise ArtifactError(f"{what}: {key} must be a string of at most {MAX_TEXT} characters")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
