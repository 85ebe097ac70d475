"""sglang-server-args: what the SGLang server will actually run with, and what decided each value.

SGLang resolves much of its configuration at start-up: the chunked prefill
size, page size and ``mem_fraction_static`` from the GPU's memory, the CUDA
graph batch sizes, whether the overlap scheduler stays on (hybrid mamba models
turn it off in some releases), speculative defaults for EAGLE/NEXTN/DFLASH and
the mamba cache switches. This recipe hands the command line, as typed, and the
model's ``config.json`` to the release itself (SGLang engine mode,
:mod:`recon.engine.sglang`) on a declared GPU, and shows the key values with
the flag, default or function of the release that decided each.

Options (``--set``): ``gpu`` (a board of ``recon/engine/gpus.py`` or a compute
capability such as ``sm90``; default h100, said so), ``gpu_count`` (default 8),
``draft_config`` (the draft model's ``config.json`` for
``--speculative-draft-model-path``; engine mode loads nothing from the network).
"""

from __future__ import annotations

from typing import Any

from ...engine.sglang import ServerArgsFacts
from ..base import Finding, Provenance, Recipe, RecipeContext, RecipeResult, Table
from ..registry import register
from ..sglang_common import facts_for, lookup

NAME = "sglang-server-args"

#: the questions the recipe answers: a name, then the places a release keeps the answer
#: (a field, or a path into a field's resolved value), first one present wins
KEY_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("chunked_prefill_size", ("chunked_prefill_size",)),
    ("page_size", ("page_size",)),
    ("mem_fraction_static", ("mem_fraction_static",)),
    ("cuda_graph_max_bs", ("cuda_graph_max_bs", "cuda_graph_config.decode.max_bs")),
    ("cuda_graph_bs", ("cuda_graph_bs", "cuda_graph_config.decode.bs")),
    ("max_running_requests", ("max_running_requests",)),
    ("disable_overlap_schedule", ("disable_overlap_schedule",)),
    ("attention_backend", ("attention_backend",)),
)
#: field-name parts of the speculative and mamba switches, shown as the release names them
GROUPS = (("speculative", ("speculative_",)), ("mamba", ("mamba", "linear_attn")))
#: speculative fields shown even when the release left them unset
SPEC_CORE = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
             "speculative_num_draft_tokens", "speculative_dflash_block_size")

def decided(facts: ServerArgsFacts, field: str) -> tuple[str, str]:
    """Who decided a field's value, and where (``file:line``), in words for the table."""
    change = facts.changed.get(field)
    if change is None:
        return "the default", ""
    how = change.get("changed_by", [])
    by = change.get("decided_by") or {}
    where = f"{by['file']}:{by['line']}" if by.get("file") else ""
    if "resolution" in how and by:
        lead = "your flag, then " if "flag" in how else ""
        return f"{lead}{by['by']}", where
    if "resolution" in how:
        return "the release's resolution", ""
    return "your flag", ""


def _rows(facts: ServerArgsFacts
          ) -> tuple[list[list[Any]], dict[str, Any], dict[str, str], list[str]]:
    """Table rows, values, who decided each, and the names this release lacks (KEY_FIELDS)."""
    rows: list[list[Any]] = []
    values: dict[str, Any] = {}
    deciders: dict[str, str] = {}
    missing: list[str] = []
    for name, paths in KEY_FIELDS:
        found = [(p, *lookup(facts.server_args, p)) for p in paths]
        present = [(p, v) for p, ok, v in found if ok]
        chosen = next(((p, v) for p, v in present if v is not None), present[0] if present
                      else None)
        if chosen is None:
            missing.append(name)
            continue
        path, value = chosen
        who, where = decided(facts, path.split(".")[0])
        values[name] = value
        deciders[name] = who
        rows.append([path, value, _default(facts, path, value), who, where])
    return rows, values, deciders, missing


def _default(facts: ServerArgsFacts, path: str, value: Any) -> Any:
    """The default of a field (or of a path into one): an unchanged field's value is its default."""
    head, _, rest = path.partition(".")
    change = facts.changed.get(head)
    if change is None:
        return value
    if not rest:
        return change.get("default")
    return lookup({head: change.get("default")}, path)[1]


def _group_rows(facts: ServerArgsFacts) -> list[list[Any]]:
    """The speculative and mamba fields this release has, as it named and resolved them."""
    rows = []
    for group, parts in GROUPS:
        for field, value in facts.server_args.items():
            if not any(p in field for p in parts) or field.startswith("_"):
                continue
            if group == "speculative" and field not in SPEC_CORE and field not in facts.changed:
                continue
            who, where = decided(facts, field)
            rows.append([group, field, value, who, where])
    return rows


def run(ctx: RecipeContext) -> RecipeResult:
    """Resolve the release's ServerArgs for the command line and show the key values."""
    facts, said = facts_for(ctx)
    rows, values, deciders, missing = _rows(facts)
    res = RecipeResult(NAME, ctx.snapshot.name, ctx.release, values=dict(values))
    res.values["decided_by"] = deciders
    res.values["resolution"] = facts.resolution
    res.inputs = {"command": ctx.command, "config": ctx.config_path or "given",
                  "gpu": facts.gpu.key, "gpu_count": facts.gpu_count}
    res.tables.append(Table("resolved values", ["field", "value", "default",
                                                "decided by", "where"], rows))
    res.tables.append(Table("speculative and mamba fields", ["group", "field", "value",
                                                             "decided by", "where"],
                            _group_rows(facts)))
    res.findings += _findings(facts, missing, ctx.release)
    res.findings += [Finding("info", "assumed " + line) for line in [*facts.assumptions, *said]]
    res.provenance = _provenance(facts)
    res.ran = facts.ran
    res.notes.append(_replaced_note(facts))
    return res


def _findings(facts: ServerArgsFacts, missing: list[str], release: str) -> list[Finding]:
    out = []
    for name in missing:
        out.append(Finding("info", f"not applicable to {release}: its ServerArgs has no "
                                   f"{name} (looked for {', '.join(dict(KEY_FIELDS)[name])})"))
    overlap = facts.changed.get("disable_overlap_schedule")
    if overlap and overlap.get("value") is True and "resolution" in overlap["changed_by"]:
        by = overlap.get("decided_by") or {}
        out.append(Finding("warn", f"the overlap scheduler is OFF: {by.get('by', 'the release')}"
                                   f" turned it off"
                           + (f" ({by['file']}:{by['line']})" if by.get("file") else "")))
    if facts.server_args.get("max_running_requests") is None and \
            "max_running_requests" in facts.server_args:
        out.append(Finding("info", "max_running_requests is not resolved in ServerArgs (None): "
                                   "the scheduler sets it at start-up from the KV cache pool"))
    check = facts.launch_check
    if check.get("ok") is False:
        out.append(Finding("error", f"the release refuses to launch: {check.get('error')}"))
    elif check.get("ran"):
        out.append(Finding("ok", "the engine's launch check (check_server_args) passes"))
    for rec in facts.log:
        if rec.get("level") in ("WARNING", "INFO") and len(rec.get("message", "")) < 400 and \
                any(w in rec["message"] for w in ("isabl", "overlap", "mamba", "speculative",
                                                  "Overlap", "chunked", "backend")):
            out.append(Finding("info", "the release logged: " + rec["message"]))
    return out


def _provenance(facts: ServerArgsFacts) -> list[Provenance]:
    """The functions that decided the shown values, with their file and sha256."""
    names = {str((c.get("decided_by") or {}).get("by", "")).rsplit(".", 1)[-1]
             for c in facts.changed.values()}
    out = []
    for fn in facts.ran:
        if str(fn.get("qualname", "")).rsplit(".", 1)[-1] in names:
            out.append(Provenance(fn["qualname"], fn["file"], int(fn["first_line"]),
                                  str(fn.get("sha256") or "")))
    return out


def _replaced_note(facts: ServerArgsFacts) -> str:
    rep = facts.replaced
    parts = [f"device queries answered for {facts.gpu.name}: " + ", ".join(rep.get("device", []))]
    if rep.get("gpu_packages"):
        parts.append("GPU-only packages answered by recording stand-ins: "
                     + ", ".join(rep["gpu_packages"]))
    if rep.get("refused"):
        parts.append("refused (no process is started): " + ", ".join(rep["refused"]))
    return "engine mode: " + "; ".join(p for p in parts if p) + \
        f"; {len(facts.ran)} functions of the snapshot ran (--json lists them)"


#: how the summary names the key fields it reads, in its order
_SAID = (("chunked_prefill_size", "chunked prefill {} tokens"), ("page_size", "page size {}"),
         ("mem_fraction_static", "mem_fraction_static {}"),
         ("cuda_graph_max_bs", "decode CUDA graphs up to batch {}"),
         ("max_running_requests", "max_running_requests {}"),
         ("attention_backend", "attention backend {}"))


def summary(res: RecipeResult) -> str | None:
    """What the release resolves the command line to, and whether it would launch."""
    v = res.values
    refused = next((f.text for f in res.findings if f.level == "error"), None)
    said = [form.format(v[name]) for name, form in _SAID if v.get(name) is not None]
    if v.get("disable_overlap_schedule") is not None:
        said.append("overlap scheduler " + ("off" if v["disable_overlap_schedule"] else "on"))
    if not said and refused is None:
        return None
    out = "The release resolves your command line to " + ", ".join(said) if said else ""
    if refused is not None:
        return (out + "; but " if out else "") + refused + "."
    return out + "."


register(Recipe(
    name=NAME,
    engine="sglang",
    title="What the SGLang server resolves at start-up, and what decided each value",
    why=("SGLang changes many arguments at start-up from the GPU's memory and the model "
         "(hybrid mamba models turn the overlap scheduler off in some releases); the release "
         "itself resolves your command line here, on a declared GPU, and names the flag, "
         "default or function behind each value. Options: --set gpu=h200 gpu_count=8 "
         "draft_config=draft.json."),
    # every flag goes through the release's own parser; these are the ones the answer is about
    reads_flags=["tp_size", "page_size", "chunked_prefill_size", "mem_fraction_static",
                 "cuda_graph_max_bs", "max_running_requests", "disable_overlap_schedule",
                 "speculative_algorithm", "speculative_draft_model_path"],
    reads_config=["all of config.json, through the release's own model config"],
    run=run,
    example="--config example:qwen3-next-80b-a3b-instruct --flags \"python -m "
            "sglang.launch_server --model-path Qwen/Qwen3-Next-80B-A3B-Instruct --tp 4\"",
    demos=[("qwen3-next-80b-a3b-instruct.json",
            "python -m sglang.launch_server --model-path Qwen/Qwen3-Next-80B-A3B-Instruct --tp 4")],
    needs=("torch",),
    summarize=summary,
))
