"""vllm-dflash-layers: how a release reads a DFlash draft config, layer by layer.

Whether each draft layer attends causally, its sliding window, whether the
draft needs a non-causal-capable attention backend, and which target layers
feed the draft their hidden states are decided by small functions of
``vllm/model_executor/models/qwen3_dflash.py`` (``_resolve_layer_attention``,
``dflash_has_any_non_causal``, ``_get_dflash_fc_input_size``) and
``get_eagle3_aux_layers_from_config``. This recipe
runs them on the draft's ``config.json`` in one sandboxed child.

The seed's two pitfalls, handled:

* annotations such as ``config: Qwen3Config`` are evaluated when a ``def``
  runs; recon's slice compiles with lazy annotations, so they need no
  transformers (the report lists every outside name the run touched);
* ``get_current_vllm_config`` is only called for drafts that mix sliding and
  full attention layers. It is first *forbidden*, which proves the branch is
  not taken for the config; only when it is reached does the recipe rerun
  with ``use_v2_model_runner`` from ``--set v2_model_runner=true|false``
  (default false, vLLM's V1 runner) and say so.

Releases: ``qwen3_dflash.py`` first ships in vLLM 0.20.0; the config-level
layer functions arrive in 0.25/0.26 and the DFlash branch of
``get_eagle3_aux_layers_from_config`` in 0.26. Earlier releases get the parts
they have, and ``not applicable`` when they have none. ``--set
target_layers=N`` (or ``num_target_layers`` in the draft config) checks every
target layer id against the target model's depth.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import ReconError
from ...slicing import Call, Py, RunFailed, run_calls
from ..base import Finding, NotApplicable, Recipe, RecipeContext, RecipeResult, Table
from ..hybrid_common import functions_named, provenance_of
from ..options import opt_int
from ..registry import register

NAME = "vllm-dflash-layers"
MODULE = "vllm.model_executor.models.qwen3_dflash"
V2_STUB = "get_current_vllm_config"


def _fn(ctx: RecipeContext, name: str) -> str | None:
    """``qwen3_dflash:name`` when this release defines it."""
    qual = f"{MODULE}:{name}"
    return qual if qual in ctx.index.functions else None


def _run(ctx: RecipeContext, calls: list[Call], cfg: dict[str, Any],
         v2: bool | None) -> list[Any]:
    """One child; ``v2=None`` forbids ``get_current_vllm_config`` (proof it is not needed)."""
    kwargs: dict[str, Any] = {"config": cfg, "timeout": 60}
    if v2 is None:
        kwargs["forbid"] = [V2_STUB]
    else:
        kwargs["stubs"] = {V2_STUB: f"lambda: ns(use_v2_model_runner={v2!r})"}
    return run_calls(ctx.snapshot, calls, **kwargs)


def _bool_option(ctx: RecipeContext, key: str, default: bool) -> bool:
    """A boolean ``--set`` option, strictly parsed."""
    value = ctx.options.get(key, default)
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("1", "true", "yes"):
        return True
    if str(value).lower() in ("0", "false", "no"):
        return False
    raise ReconError(f"--set {key}: expected true or false, got {value!r}")


@dataclass
class _Funcs:
    """The config-level DFlash functions this release has (None where it lacks one)."""

    resolve: str | None  # _resolve_layer_attention: (window, causal) per layer
    causal_fn: str | None  # _dflash_layer_causal: causal per layer (older releases)
    any_fn: str | None
    fc_fn: str | None
    aux_fn: str | None
    aux_reads_dflash: bool  # get_eagle3_aux_layers_from_config has a DFlash branch

    @property
    def per_layer(self) -> str | None:
        """The per-layer function to run, the newer one first."""
        return self.resolve or self.causal_fn


def run(ctx: RecipeContext) -> RecipeResult:
    """Run whichever of the layer, aux-layer and fc functions this release has."""
    if MODULE not in ctx.index.modules:
        raise NotApplicable("no vllm/model_executor/models/qwen3_dflash.py: this release has no "
                            "DFlash draft model (it first ships in vLLM 0.20.0)")
    cfg = ctx.require_config()
    n_layers = cfg.get("num_hidden_layers")
    if not isinstance(n_layers, int) or n_layers <= 0:
        raise ReconError("the draft config has no num_hidden_layers")
    f = _functions(ctx)
    res = RecipeResult(NAME, ctx.snapshot.name, ctx.release)
    results = _run_forbidding(ctx, _calls(f, n_layers), cfg, res, f)
    res.inputs = {"num_hidden_layers": n_layers,
                  "dflash_config": cfg.get("dflash_config"), "layer_types": cfg.get("layer_types")}
    causal = _layer_table(res, f, results, n_layers)
    aux = _answers(res, f, results, n_layers if f.per_layer else 0, causal, n_layers)
    _target_layers(ctx, cfg, res, aux)
    touched = sorted({t.name.split(".")[0] for r in results for t in r.stub_touches
                      if t.kind == "outside"})
    res.notes.append("outside packages touched by the run: " + (", ".join(touched) or "none")
                     + " (annotations are lazy in the slice, so `config: Qwen3Config` needs no "
                       "transformers)")
    res.provenance = provenance_of(ctx, [q for q in (f.resolve, f.causal_fn, f.any_fn,
                                                    f.aux_fn if f.aux_reads_dflash else None,
                                                    f.fc_fn if f.aux_reads_dflash else None) if q])
    return res


def _functions(ctx: RecipeContext) -> _Funcs:
    """Find the functions; not applicable when the release has none of them."""
    aux_fn = next(iter(functions_named(ctx, "get_eagle3_aux_layers_from_config")), None)
    f = _Funcs(resolve=_fn(ctx, "_resolve_layer_attention"),
               causal_fn=_fn(ctx, "_dflash_layer_causal"),
               any_fn=_fn(ctx, "dflash_has_any_non_causal"),
               fc_fn=_fn(ctx, "_get_dflash_fc_input_size"), aux_fn=aux_fn,
               aux_reads_dflash=aux_fn is not None and "dflash_config" in ctx.index.source(aux_fn))
    if not (f.resolve or f.causal_fn or f.any_fn or f.aux_reads_dflash):
        raise NotApplicable("qwen3_dflash.py has no config-level functions in this release: "
                            "draft layers are built inside DFlashQwen3Model.__init__ and the "
                            "target layers are read inline by the model runner")
    return f


def _calls(f: _Funcs, n_layers: int) -> list[Call]:
    """Per-layer calls, then any-non-causal, aux layers and fc size (read back in this order)."""
    calls: list[Call] = []
    if f.per_layer:
        calls += [Call(f.per_layer, args={"layer_idx": i}) for i in range(n_layers)]
    if f.any_fn:
        calls.append(Call(f.any_fn))
    spec = "ns(draft_model_config=ns(hf_config=config))"
    if f.aux_fn is not None and f.aux_reads_dflash:
        calls.append(Call(f.aux_fn, args={"spec_config": Py(spec)}))
    if f.fc_fn and f.aux_reads_dflash:
        calls.append(Call(f.fc_fn, args={"vllm_config": Py(f"ns(speculative_config={spec})")}))
    return calls


def _run_forbidding(ctx: RecipeContext, calls: list[Call], cfg: dict[str, Any], res: RecipeResult,
               f: _Funcs) -> list[Any]:
    """Run with the runner question forbidden; rerun with an assumed runner only if reached."""
    v2: bool | None = None
    try:
        results = _run(ctx, calls, cfg, None)
    except RunFailed as err:
        if f"forbidden stub {V2_STUB}" not in str(err) and V2_STUB not in str(err):
            raise RunFailed(f"{NAME}: {err}", results=err.results, detail=err.detail) from err  # its exit code
        v2 = _bool_option(ctx, "v2_model_runner", False)
        site = str(err).split(" reached at ")[-1].split(":")[0:2]
        res.findings.append(Finding("info", "the config mixes sliding and full attention layers: "
                                            "the release asks get_current_vllm_config()."
                                            f"use_v2_model_runner (at {':'.join(site)}); assumed "
                                            f"{v2} (--set v2_model_runner=true|false)"))
        try:
            results = _run(ctx, calls, cfg, v2)
        except RunFailed as err2:
            raise RunFailed(f"{NAME}: {err2}", results=err2.results, detail=err2.detail) from err2  # its exit code
    if v2 is None and f.per_layer:
        res.findings.append(Finding("ok", "get_current_vllm_config was forbidden and never reached: "
                                          "the layer resolution does not depend on the runner"))
    return results


def _layer_table(res: RecipeResult, f: _Funcs, results: list[Any], n_layers: int) -> list[bool]:
    """The per-layer answers as a table; returns each answered layer's causality."""
    causal: list[bool] = []
    if not f.per_layer:
        res.findings.append(Finding("info", "per-layer causality and windows are not resolved by a "
                                            "config-level function in this release"))
        return causal
    rows = []
    layer_results = results[:n_layers]
    for i, r in enumerate(layer_results):
        if r.error is not None:
            rows.append([i, "-", "-", f"the release raises {r.error.type}: {r.error.message}"])
            continue
        if f.resolve:
            window, is_causal = r.value
        else:
            window, is_causal = "n/a in this release", r.value
        causal.append(bool(is_causal))
        rows.append([i, "causal" if is_causal else "non-causal",
                     window if window is not None else "none (full attention)", ""])
    res.tables.append(Table("draft layers", ["layer", "attention", "sliding window", "note"], rows))
    errors = [r.error for r in layer_results if r.error is not None]
    if errors:
        res.findings.append(Finding("error", f"the release rejects this draft config: "
                                             f"{errors[0].type}: {errors[0].message}"))
    return causal


def _answers(res: RecipeResult, f: _Funcs, results: list[Any], pos: int, causal: list[bool],
             n_layers: int) -> list[int] | None:
    """Any layer non-causal, the aux layers and the fc size, read from ``pos`` on; returns aux."""
    v = res.values
    if f.any_fn:
        r = results[pos]
        pos += 1
        v["any layer non-causal"] = r.value if r.error is None else f"raises {r.error.line()}"
    elif causal and len(causal) == n_layers:
        v["any layer non-causal"] = not all(causal)
        res.notes.append("'any layer non-causal' combines the per-layer answers (this release "
                         "has no dflash_has_any_non_causal)")
    if v.get("any layer non-causal") is True:
        res.findings.append(Finding("info", "the draft needs an attention backend that supports "
                                            "non-causal attention"))
    aux: list[int] | None = None
    if f.aux_reads_dflash:
        r = results[pos]
        pos += 1
        aux = list(r.value) if isinstance(r.value, list) else None
        v["aux hidden-state layers of the target"] = aux
    else:
        res.findings.append(Finding("info", "target layers: get_eagle3_aux_layers_from_config does "
                                            "not read DFlash configs in this release (the model "
                                            "runner reads dflash_config.target_layer_ids inline)"))
    if f.fc_fn and f.aux_reads_dflash:
        r = results[pos]
        v["fc input size (target hidden x aux layers)"] = r.value if r.error is None else \
            f"raises {r.error.line()}"
    return aux


def _target_layers(ctx: RecipeContext, cfg: dict[str, Any], res: RecipeResult,
                   aux: list[int] | None) -> None:
    """The draft's target layer ids against the target's depth, and against the aux layers."""
    v = res.values
    raw = (cfg.get("dflash_config") or {}).get("target_layer_ids")
    if raw is not None:
        v["dflash_config.target_layer_ids"] = raw
    depth = opt_int(ctx.options, "target_layers", cfg.get("num_target_layers"))
    if depth is not None:
        v["target model layers"] = depth
        if isinstance(raw, list):
            bad = [i for i in raw if not (isinstance(i, int) and 0 <= i < depth)]
            res.findings.append(Finding("error" if bad else "ok",
                                        f"target layer ids {bad} do not exist in a {depth}-layer "
                                        "target" if bad else
                                        f"every target layer id is a layer of the {depth}-layer target"))
    if aux is not None and isinstance(raw, list) and aux == [i + 1 for i in raw]:
        res.notes.append("aux ids = target_layer_ids + 1: the release captures the hidden state "
                         "entering layer id+1, i.e. leaving layer id")


def summary(res: RecipeResult) -> str | None:
    """The draft layers' attention (causal or not, windows) and the target layers feeding it."""
    rows = next((t.rows for t in res.tables if t.title == "draft layers"), [])
    refused = [r[3] for r in rows if r[3]]
    if refused:
        return f"The release rejects this draft config: {refused[0]}."
    v = res.values
    kinds = [r[1] for r in rows]
    windows = sorted({r[2] for r in rows if isinstance(r[2], int)})
    if kinds:
        shape = (f"all {len(kinds)} draft layers are {kinds[0]}" if len(set(kinds)) == 1 else
                 f"{kinds.count('non-causal')} of the {len(kinds)} draft layers are non-causal")
    elif isinstance(v.get("any layer non-causal"), bool):
        shape = "some draft layer is non-causal" if v["any layer non-causal"] else \
            "every draft layer is causal"
    else:
        return None
    shape += f" ({'sliding window' if len(windows) == 1 else 'windows'} {', '.join(map(str, windows))})" \
        if windows else ""
    ids, depth = v.get("dflash_config.target_layer_ids"), v.get("target model layers")
    if isinstance(ids, list):
        shape += f"; they read the hidden states of target layers {ids}"
        if isinstance(depth, int):
            bad = [i for i in ids if not (isinstance(i, int) and 0 <= i < depth)]
            shape += (f", of which {bad} do not exist in the {depth}-layer target" if bad else
                      f", all in the {depth}-layer target")
    return shape[0].upper() + shape[1:] + "."


register(Recipe(
    name=NAME,
    engine="vllm",
    title="DFlash draft layers: causal or not, sliding window, and the target layers feeding it",
    why=("A DFlash draft's attention mask and its aux hidden states are decided by small "
         "functions in qwen3_dflash.py; an investigator cut them out with ast and ran them on the "
         "draft's config.json to rule hypotheses in or out without a GPU. Options: --set "
         "target_layers=N, v2_model_runner=true|false."),
    reads_flags=[],
    reads_config=["num_hidden_layers", "layer_types", "sliding_window", "is_causal",
                  "dflash_config (causal, use_swa, swa_window_size, target_layer_ids)",
                  "num_target_layers"],
    run=run,
    example="--config example:qwen3-8b-dflash-b16",
    demos=[("qwen3-8b-dflash-b16.json", "vllm serve Qwen/Qwen3-8B --speculative-config "
            "'{\"method\": \"dflash\", \"model\": \"z-lab/Qwen3-8B-DFlash-b16\", "
            "\"num_speculative_tokens\": 15}'")],
    summarize=summary,
))
