"""Case -> CompiledCase with the weights `compile.compile_case` gives, in milliseconds, uncached.

Why: a Tracr compile costs 3-10 s, nearly all of it haiku initialising parameters that
`tracr.compiler.assemble` then overwrites with zeros and the craft model's matrices. `zoo generate`
compiles hundreds of random programs to decide which to keep, so it runs Tracr's own passes up to
the craft model and fills the parameter dict exactly as `assemble_craft_model` does, without haiku.
tests/test_rasp_programs/test_generate.py checks the weights equal `compile_case`'s on built-in and generated cases.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import numpy as np

from rasp_programs.case import BOS, PAD, Case
from rasp_programs.compile import (
    CompileError, CompiledCase, _all_expressions, _canonical_label, _expression_labels,
)
from rasp_programs.convert import assembled_to_hooked
from rasp_programs.encoding import Encoding
from rasp_programs.graph import high_level_graph


def quick_compile(case: Case) -> CompiledCase:
    """compile_case(case) without its cache and without haiku (same config and state dict)."""
    start = time.perf_counter()
    program = case.program
    assembled, output_is_categorical = _assemble(program, case)
    names = {expr.label: expr.name for expr in _all_expressions(program)}
    labels = [_canonical_label(label, names) for label in assembled.residual_labels]
    in_map = assembled.input_encoder.encoding_map
    input_vocab = tuple(sorted(in_map, key=in_map.get))
    if case.task_kind == "classification":
        if not output_is_categorical:
            raise CompileError(f"case {case.id}: a classification case needs a categorical output")
        out_map = assembled.output_encoder.encoding_map
        output_vocab = tuple(sorted(out_map, key=out_map.get))
        columns = [labels.index(f"{program.name}:{value}") for value in output_vocab]
    else:
        if output_is_categorical:
            raise CompileError(f"case {case.id}: a regression case needs a numerical output")
        output_vocab, columns = None, [labels.index(program.name)]
    encoding = Encoding(input_vocab=input_vocab, output_vocab=output_vocab,
                        max_seq_len=case.max_seq_len, task_kind=case.task_kind)
    config, state_dict = assembled_to_hooked(assembled, case, columns)
    graph = high_level_graph(state_dict, config, labels, _expression_labels(case))
    return CompiledCase(case=case, state_dict=state_dict, config=config, encoding=encoding,
                        residual_labels=tuple(labels), graph=graph,
                        seconds=time.perf_counter() - start, from_cache=False)


def _assemble(program: Any, case: Case) -> tuple[SimpleNamespace, bool]:
    """The passes of tracr's compile_rasp_to_model (same order and arguments), then the
    parameters of assemble_craft_model; returns an object `assembled_to_hooked` reads."""
    from tracr.compiler import basis_inference, craft_graph_to_model, expr_to_craft_graph, nodes
    from tracr.compiler import rasp_to_graph, validating
    from tracr.craft import bases
    from tracr.rasp import rasp
    from tracr.transformer import encoder

    try:
        unsupported = validating.static_validate(program)
        if unsupported:
            raise NotImplementedError("; ".join(f"{u.expr.name}: {u.reason}" for u in unsupported))
        extracted = rasp_to_graph.extract_rasp_graph(program)
        graph, sources, sink = extracted.graph, extracted.sources, extracted.sink
        basis_inference.infer_bases(graph, sink, set(case.vocab), case.max_seq_len)
        expr_to_craft_graph.add_craft_components_to_rasp_graph(
            graph, bos_dir=bases.BasisDirection(rasp.tokens.label, BOS), mlp_exactness=100)
        craft_model = craft_graph_to_model.craft_graph_to_model(graph, sources)
        if rasp.tokens.label not in graph.nodes:  # as craft_model_to_transformer refuses it
            raise ValueError("the program does not read rasp.tokens")
    except (NotImplementedError, ValueError, KeyError, AssertionError, TypeError) as exc:
        raise CompileError(f"Tracr cannot compile case {case.id}: {exc}") from exc

    # craft_model_to_transformer: input, position and output spaces
    tokens_space = bases.VectorSpaceWithBasis.from_values(
        rasp.tokens.label, graph.nodes[rasp.tokens.label][nodes.VALUE_SET].union({BOS, PAD}))
    indices_space = bases.VectorSpaceWithBasis.from_values(rasp.indices.label, range(case.max_seq_len))
    categorical = rasp.is_categorical(sink[nodes.EXPR])
    output_space = bases.VectorSpaceWithBasis(sink[nodes.OUTPUT_BASIS])
    assembled = _assemble_params(craft_model, tokens_space, indices_space, output_space)
    assembled.input_encoder = encoder.CategoricalEncoder(
        basis=tokens_space.basis, enforce_bos=True, bos_token=BOS, pad_token=PAD,
        max_seq_len=case.max_seq_len + 1)
    if categorical:
        assembled.output_encoder = encoder.CategoricalEncoder(
            basis=output_space.basis, enforce_bos=False, bos_token=None, pad_token=None)
    return assembled, categorical


def _assemble_params(craft_model: Any, tokens_space: Any, indices_space: Any, output_space: Any) -> SimpleNamespace:
    """tracr.compiler.assemble.assemble_craft_model's parameters, float32, without haiku."""
    import einops
    from tracr.compiler.assemble import _get_model_config_and_module_names
    from tracr.craft import bases, transformers, vectorspace_fns

    config, module_names = _get_model_config_and_module_names(craft_model)
    residual = bases.join_vector_spaces(craft_model.residual_space, tokens_space, indices_space, output_space)
    d = residual.num_dims
    project = lambda space: vectorspace_fns.project(residual, space).matrix  # noqa: E731

    tokens_to_res = vectorspace_fns.project(tokens_space, residual)
    one_dir = bases.BasisDirection("one")
    if one_dir in residual:  # every token also writes the constant `one` direction
        one_to_res = vectorspace_fns.Linear.from_action(
            tokens_space, residual, lambda x: residual.vector_from_basis_direction(one_dir))
        tokens_to_res = vectorspace_fns.Linear.combine_in_parallel([tokens_to_res, one_to_res])
    pos = np.concatenate([np.zeros((1, d)), vectorspace_fns.project(indices_space, residual).matrix], axis=0)

    hk_size, mlp_size = config.num_heads * config.key_size, config.mlp_hidden_size
    params: dict[str, dict[str, np.ndarray]] = {
        "token_embed": {"embeddings": tokens_to_res.matrix}, "pos_embed": {"embeddings": pos}}
    for layer in range(config.num_layers):
        attn, mlp = f"transformer/layer_{layer}/attn", f"transformer/layer_{layer}/mlp"
        for name in ("query", "key", "value"):
            params[f"{attn}/{name}"] = {"w": np.zeros((d, hk_size)), "b": np.zeros(hk_size)}
        params[f"{attn}/linear"] = {"w": np.zeros((hk_size, d)), "b": np.zeros(d)}
        params[f"{mlp}/linear_1"] = {"w": np.zeros((d, mlp_size)), "b": np.zeros(mlp_size)}
        params[f"{mlp}/linear_2"] = {"w": np.zeros((mlp_size, d)), "b": np.zeros(d)}

    for module_name, module in zip(module_names, craft_model.blocks):
        if isinstance(module, transformers.MLP):
            hidden = module.fst.output_space.num_dims
            params[f"{module_name}/linear_1"]["w"][:, :hidden] = project(module.fst.input_space) @ module.fst.matrix
            params[f"{module_name}/linear_2"]["w"][:hidden, :] = module.snd.matrix @ project(module.snd.output_space).T
            continue
        query, key, value, linear = [], [], [], []
        for head in module.as_multi().heads():
            k, v = head.w_qk.matrix.shape[1], head.w_ov.matrix.shape[1]
            q_mat, k_mat = np.zeros((d, config.key_size)), np.zeros((d, config.key_size))
            v_mat, o_mat = np.zeros((d, config.key_size)), np.zeros((config.key_size, d))
            q_mat[:, :k] = project(head.w_qk.left_space) @ head.w_qk.matrix
            k_mat[:, :k] = project(head.w_qk.right_space)
            v_mat[:, :v] = project(head.w_ov.input_space) @ head.w_ov.matrix
            o_mat[:v, :] = project(head.w_ov.output_space).T
            for acc, mat in ((query, q_mat), (key, k_mat), (value, v_mat), (linear, o_mat)):
                acc.append(mat)
        for _ in range(config.num_heads - module.as_multi().num_heads):  # unused head slots: zeros
            for acc in (query, key, value, linear):
                acc.append(np.zeros_like(acc[0]))
        for name, mats in (("query", query), ("key", key), ("value", value)):
            params[f"{module_name}/{name}"]["w"][:, :] = einops.rearrange(mats, "h i o -> i (h o)")
        params[f"{module_name}/linear"]["w"][:, :] = einops.rearrange(linear, "h i o -> (h i) o")

    # haiku stores float32 (jnp.array of float64 rounds to nearest, as astype does)
    params = {m: {p: np.asarray(v, dtype=np.float32) for p, v in ps.items()} for m, ps in params.items()}
    return SimpleNamespace(model_config=config, params=params,
                           residual_labels=[str(b) for b in residual.basis],
                           input_encoder=None, output_encoder=None)
