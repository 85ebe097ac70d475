"""vllm-mamba-align-column: the running-state column a release computes for a resumed prefix in mamba ``align`` mode.

Field story: with prefix caching on, vLLM switches the
mamba cache of a hybrid model to ``align`` mode. When a request resumes a
cached prefix of N tokens, ``MambaHybridModelState.add_request`` seeds the
request's running mamba state at column ``(N - 1) // <divisor>`` of its
block-table row. The divisor must be the *mamba* block size (the attention
block size raised by page alignment, e.g. 1152); dividing by a smaller block
size (16) gave column ~6335 in a row ~88-240 wide, and the fused align
pre-copy read a garbage block id (CUDA illegal memory access, Xid 13/31).

This recipe runs the release's own ``add_request`` (byte-exact, in a
sandboxed child) for the prefix lengths asked, and the release's own
``MambaSpec.max_num_blocks_per_req`` for the row width of the mamba group's
block table, and flags a column outside the row. Releases read different
``cache_config`` fields (vLLM 0.29-0.31: ``block_size``, the minimum over the
prefix-cacheable KV cache groups; 0.32+: ``mamba_block_size``), so the same
inputs give different columns; ``--set compare=pip:vllm==0.31.0`` runs a
second release side by side.

Inputs: ``--set prefix_tokens=101376`` (or a list); the two block sizes the
engine holds when the request arrives, from ``--set mamba_block_size=`` /
``--mamba-block-size`` and ``--set cache_block_size=`` (what
``cache_config.block_size`` ends up as after the KV cache groups are built:
the smallest block size over the prefix-cacheable groups, e.g. 16 when a
drafter group keeps 16-token blocks). Without them, both come from the
vllm-hybrid-page-align recipe on the same config and flags (the attention
block size after alignment; align mode sets the mamba block size equal to it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ...errors import ReconError
from ...slicing import Call, Py, run_calls
from ...snapshots.model import Snapshot
from ..base import Finding, NotApplicable, Recipe, RecipeContext, RecipeResult, Table
from ..flags import ServeFlags
from ..options import opt_int
from ..registry import register
from ..vllm_common import (
    BASE_STUBS,
    helper_file,
    params_of,
    ran_provenance,
    source_of,
    speculative_tokens,
    stub_notes,
)

NAME = "vllm-mamba-align-column"
STATE = "vllm.v1.worker.gpu.model_states.mamba_hybrid:MambaHybridModelState"
ADD = f"{STATE}.add_request"
_DIVISION = re.compile(r"\(\s*new_req_data\.num_computed_tokens\s*-\s*1\s*\)\s*//\s*([\w.]+)")


@dataclass
class Setup:
    """The numbers the engine holds when a request resumes (same for every release compared)."""

    prefixes: list[int]
    mamba_block_size: int
    cache_block_size: int
    max_model_len: int
    k: int
    sources: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class ReleaseAnswer:
    release: str
    divisor_expr: str
    divisor_field: str
    divisor_value: int | None
    columns: dict[int, int]
    row_width: int
    provenance: list[Any]
    notes: list[str]


def _prefixes(ctx: RecipeContext) -> list[int] | None:
    raw = ctx.options.get("prefix_tokens")
    if raw is None:
        return None
    items = raw if isinstance(raw, list) else [raw]
    out: list[int] = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int) or item < 1:
            raise ReconError(f"--set prefix_tokens: positive integers expected, got {raw!r}")
        out.append(item)
    return out


def _from_page_align(ctx: RecipeContext) -> dict[str, Any]:
    """Block sizes after the release's page alignment (the vllm-hybrid-page-align recipe)."""
    from .. import get, run_recipe

    try:
        get("vllm-hybrid-page-align")
    except ReconError:
        return {}
    if ctx.config is None:
        return {}
    values = dict(ctx.flags.values)
    values["enable_prefix_caching"] = True  # align mode is what this recipe is about
    flags = ServeFlags(values=values, ignored=[], raw=list(ctx.flags.raw))
    options = {k: v for k, v in ctx.options.items()
               if k not in ("prefix_tokens", "compare", "cache_block_size", "mamba_block_size",
                            "max_model_len")}
    try:
        # recon's reading of the flags: this recipe forces prefix caching on
        res = run_recipe("vllm-hybrid-page-align", ctx.snapshot, config=ctx.config, flags=flags,
                         options={**options, "mode": "slice"})
    except ReconError as err:
        # a release whose alignment reads what slicing mode does not model (0.34.0's
        # use_flashinfer_replayssm): the release decides in engine mode, prefix caching asked
        # for on its own command line
        return _from_engine_page_align(ctx, options, err)
    if not res.applicable:
        raise NotApplicable(f"vllm-hybrid-page-align says: {res.reason}")
    if res.values.get("hybrid attention/mamba model") is False:
        raise NotApplicable("the model is not a hybrid attention/mamba model: it has no mamba "
                            "state columns")
    return res.values


def _from_engine_page_align(ctx: RecipeContext, options: dict[str, Any],
                            why: ReconError) -> dict[str, Any]:
    """The block sizes from vllm-hybrid-page-align in engine mode, under slicing mode's names."""
    from .. import run_recipe

    raw = [str(w) for w in ctx.flags.raw]
    if not raw:
        raise why
    res = run_recipe("vllm-hybrid-page-align", ctx.snapshot, config=ctx.config,
                     flags=[*raw, "--enable-prefix-caching"], options=options)
    if not res.applicable:
        raise NotApplicable(f"vllm-hybrid-page-align says: {res.reason}")
    attn = res.values.get("attention_block_size")
    if attn is None:
        raise why
    return {"attention block size (tokens)": attn,
            "mamba block size": res.values.get("mamba_block_size") or attn}


def _setup(ctx: RecipeContext) -> Setup:
    asked = _prefixes(ctx)
    k, _method = speculative_tokens(ctx)
    notes: list[str] = []
    sources: dict[str, str] = {}
    mamba = opt_int(ctx.options, "mamba_block_size") or ctx.flags.get("mamba_block_size")
    cache_block = opt_int(ctx.options, "cache_block_size")
    if mamba is not None:
        sources["mamba_block_size"] = "--mamba-block-size / --set mamba_block_size"
    if cache_block is not None:
        sources["cache_block_size"] = "--set cache_block_size"
    if mamba is None or cache_block is None:
        aligned = _from_page_align(ctx)
        attn = aligned.get("attention block size (tokens)")
        if mamba is None:
            mamba = aligned.get("mamba block size") or attn
            if mamba is not None:
                sources["mamba_block_size"] = f"vllm-hybrid-page-align on {ctx.release}"
        if cache_block is None and attn is not None:
            cache_block = attn
            sources["cache_block_size"] = (f"the attention block size after alignment "
                                           f"(vllm-hybrid-page-align on {ctx.release})")
            notes.append("cache_config.block_size assumed equal to the attention block size: "
                         "the engine lowers it to the smallest block size of any "
                         "prefix-cacheable KV cache group (a drafter or indexer group with "
                         "smaller blocks); --set cache_block_size=16 models that")
    if mamba is None or cache_block is None:
        raise ReconError("give the block sizes: --set mamba_block_size=1152 cache_block_size=16 "
                         "(or --config with a hybrid model so vllm-hybrid-page-align can derive them)")
    max_len = opt_int(ctx.options, "max_model_len") or ctx.flags.get("max_model_len")
    if max_len is None:
        cfg = ctx.config or {}
        max_len = cfg.get("max_position_embeddings") or (cfg.get("text_config") or {}).get(
            "max_position_embeddings")
        if max_len is None:
            raise ReconError("give --max-model-len (the block-table row width depends on it)")
        sources["max_model_len"] = "config.json max_position_embeddings (no --max-model-len)"
    else:
        sources["max_model_len"] = "--max-model-len"
    if not (ctx.flags.get("enable_prefix_caching") or ctx.flags.get("mamba_cache_mode") == "align"):
        notes.append("your flags turn on neither --enable-prefix-caching nor --mamba-cache-mode "
                     "align; this recipe models align mode (whether the release turns prefix "
                     "caching on by default for this model is not checked here)")
    prefixes = asked
    if prefixes is None:
        prefixes = sorted({int(mamba) + 1, int(max_len) // 2, int(max_len) - 1})
        notes.append(f"no --set prefix_tokens: a sweep {prefixes} (one block and a bit, half and "
                     "all of --max-model-len); the field case is --set prefix_tokens=101376")
    return Setup(prefixes=prefixes, mamba_block_size=int(mamba), cache_block_size=int(cache_block),
                 max_model_len=int(max_len), k=k, sources=sources, notes=notes)


def _what_is_there(ctx: RecipeContext) -> str:
    """For NotApplicable: what the release has instead of the V2 model state."""
    align = ctx.functions_with_text(r"mamba_cache_mode")
    if not align:
        return "this release has no mamba 'align' cache mode at all (no code reads mamba_cache_mode)"
    cols = [q for q in ctx.functions_with_text(r"num_computed_tokens\s*-\s*1\s*\)\s*//")][:4]
    where = "; ".join(ctx.index.functions[q].location for q in cols)
    return ("no MambaHybridModelState.add_request (the V2 model runner's mamba state) in this "
            "release" + (f"; align-mode columns are computed in {', '.join(cols)} ({where})"
                         if cols else ""))


def _divisor(ctx: RecipeContext) -> tuple[str, str]:
    """(expression the release divides by, the cache_config field it comes from)."""
    text = source_of(ctx, ADD)
    m = _DIVISION.search(text)
    if m is None:
        return "?", "?"
    expr = m.group(1)
    if expr.startswith("self.cache_config."):
        return expr, expr.rpartition(".")[2]
    assign = re.search(rf"{re.escape(expr)}\s*=\s*self\.cache_config\.(\w+)", text)
    if assign:
        return expr, assign.group(1)
    return expr, "?"


def answer(ctx: RecipeContext, setup: Setup) -> ReleaseAnswer:
    """Run this release's add_request and the mamba row width (one child)."""
    if ADD not in ctx.index.functions:
        raise NotApplicable(_what_is_there(ctx))
    spec_q = next((q for q in ctx.index.functions
                   if q.endswith(":MambaSpec.max_num_blocks_per_req")), None)
    if spec_q is None:
        raise NotApplicable("MambaSpec has no max_num_blocks_per_req in this release")
    divisor_expr, divisor_field = _divisor(ctx)
    cache = (f"ns(block_size={setup.cache_block_size}, mamba_block_size={setup.mamba_block_size}, "
             "mamba_cache_mode='align', use_kda_recoverssm=False)")
    calls: list[Call] = []
    for n in setup.prefixes:
        calls.append(Call(ADD, args={"req_index": 0, "new_req_data": Py(
            f"ns(num_computed_tokens={n}, prefill_token_ids=None, mm_features=[], "
            "req_id='r0', prompt_embeds=None)")},
            self_attrs={"cache_config": Py(cache), "_align_mode": True, "recoverssm": None,
                        "rope_state": None, "prompt_embeds_state": None,
                        "num_accepted_tokens_gpu": Py("Cells([0])"),
                        "_mamba_state_idx_gpu": Py("Cells([-1])")}))
    width_args: dict[str, Any] = {"vllm_config": Py(f"ns(cache_config={cache}, parallel_config=ns("
                                                    "decode_context_parallel_size=1, "
                                                    "prefill_context_parallel_size=1))")}
    names = params_of(ctx, spec_q)
    width_args[names[1] if len(names) > 1 else "max_len"] = setup.max_model_len
    calls.append(Call(spec_q, args=width_args,
                      self_attrs={"block_size": setup.mamba_block_size,
                                  "num_speculative_blocks": setup.k}))
    with helper_file() as helpers:
        results = run_calls(ctx.snapshot, calls, stub_file=helpers, timeout=60,
                            stubs={**BASE_STUBS, "in_wsl": "lambda: False"})
    columns: dict[int, int] = {}
    for n, r in zip(setup.prefixes, results, strict=False):
        if r.error is not None:
            raise ReconError(f"{ADD.rpartition(':')[2]} raised {r.error.line()} for a prefix of {n}")
        row = r.self_after.get("_mamba_state_idx_gpu")
        if not isinstance(row, list) or not row:
            raise ReconError(f"{ADD.rpartition(':')[2]} did not set a running-state column "
                             "(is align mode modelled right for this release?)")
        columns[n] = int(row[0])
    width = results[-1]
    if width.error is not None:
        raise ReconError(f"{spec_q.rpartition(':')[2]} raised {width.error.line()}")
    value = {"block_size": setup.cache_block_size,
             "mamba_block_size": setup.mamba_block_size}.get(divisor_field)
    return ReleaseAnswer(release=ctx.release, divisor_expr=divisor_expr,
                         divisor_field=divisor_field, divisor_value=value, columns=columns,
                         row_width=int(width.value), provenance=ran_provenance(ctx, results),
                         notes=stub_notes(results))


def _compare(ctx: RecipeContext, setup: Setup) -> ReleaseAnswer | None:
    source = ctx.options.get("compare")
    if not source:
        return None
    from ...snapshots.cache import ensure_snapshot
    from ..base import RecipeContext as Ctx

    snap = source if isinstance(source, Snapshot) else ensure_snapshot(str(source))
    other = Ctx(snap, ctx.config, ctx.flags, config_path=ctx.config_path, options=ctx.options)
    try:
        got = answer(other, setup)
    except NotApplicable as err:
        raise ReconError(f"--set compare={source}: not applicable to {other.release}: {err}") from err
    for p in got.provenance:  # the same qualnames as the main release: say whose they are
        p.qualname = f"{p.qualname} ({other.release})"
    return got


def run(ctx: RecipeContext) -> RecipeResult:
    """The running-state column for each prefix, in this release and an optional second one."""
    if ADD not in ctx.index.functions:
        raise NotApplicable(_what_is_there(ctx))
    setup = _setup(ctx)
    main = answer(ctx, setup)
    other = _compare(ctx, setup)
    res = RecipeResult(NAME, ctx.snapshot.name, ctx.release)
    res.inputs = {"prefix_tokens": setup.prefixes, "cache_config.mamba_block_size":
                  setup.mamba_block_size, "cache_config.block_size": setup.cache_block_size,
                  "max_model_len": setup.max_model_len, "num_speculative_tokens": setup.k}
    answers = [main] + ([other] if other else [])
    _values(res, setup, main, answers)
    res.tables.append(_column_table(setup, answers))
    _findings(res, setup, main, other, answers)
    res.notes += [f"{k} from {v}" for k, v in setup.sources.items()]
    res.notes += setup.notes
    res.notes.append("row width: MambaSpec.max_num_blocks_per_req in align mode (the V2 runner "
                     "sizes the mamba group's block table with it; no token alignment for mamba "
                     "groups)")
    res.notes += sorted({n for a in answers for n in a.notes})
    res.provenance = main.provenance + (other.provenance if other else [])
    return res


def _values(res: RecipeResult, setup: Setup, main: ReleaseAnswer,
            answers: list[ReleaseAnswer]) -> None:
    """Each release's divisor and row width (and its column when one prefix was asked)."""
    for a in answers:
        tag = "" if a is main else f" ({a.release})"
        res.values[f"divisor{tag}"] = (
            f"{a.divisor_expr} = {a.divisor_value}" if a.divisor_expr.endswith(
                f"cache_config.{a.divisor_field}")
            else f"{a.divisor_expr} (= cache_config.{a.divisor_field}) = {a.divisor_value}")
        res.values[f"mamba block-table row width{tag}"] = a.row_width
        if len(setup.prefixes) == 1:
            res.values[f"running-state column{tag}"] = a.columns[setup.prefixes[0]]


def _column_table(setup: Setup, answers: list[ReleaseAnswer]) -> Table:
    """One row per prefix: each release's column, divisor, row width and verdict."""
    rows = []
    for n in setup.prefixes:
        row: list[Any] = [n]
        for a in answers:
            col = a.columns[n]
            row += [col, a.divisor_value, a.row_width,
                    "OUT OF RANGE" if not 0 <= col < a.row_width else "in range"]
        rows.append(row)
    cols = ["prefix tokens N"]
    for a in answers:
        cols += [f"column ({a.release})", "divisor", "row width", "verdict"]
    return Table("running mamba state column = (N - 1) // divisor, against the mamba "
                 "group's block-table row", cols, rows)


def _findings(res: RecipeResult, setup: Setup, main: ReleaseAnswer, other: ReleaseAnswer | None,
              answers: list[ReleaseAnswer]) -> None:
    """A column outside its row is an error; then whether the two releases agree."""
    for a in answers:
        for n, col in a.columns.items():
            if not 0 <= col < a.row_width:
                res.findings.append(Finding(
                    "error", f"{a.release}: a resumed prefix of {n} tokens seeds the running state "
                             f"at column {col} of a {a.row_width}-wide block-table row (divisor "
                             f"{a.divisor_expr} = {a.divisor_value}): the align pre-copy reads "
                             "past the row, a garbage block id (seen as a CUDA illegal memory "
                             "access, Xid 13/31)"))
            else:
                res.findings.append(Finding("ok", f"{a.release}: prefix {n} -> column {col} of "
                                                  f"{a.row_width} (in range)"))
    if other is not None:
        differ = [n for n in setup.prefixes if main.columns[n] != other.columns[n]]
        if differ:
            res.findings.append(Finding(
                "info", f"{main.release} and {other.release} disagree for N={differ}: they divide "
                        f"by cache_config.{main.divisor_field} and cache_config."
                        f"{other.divisor_field}"))
        else:
            res.findings.append(Finding("info", f"{main.release} and {other.release} agree on these "
                                                "inputs (cache_config.block_size == "
                                                "mamba_block_size hides the difference)"
                                        if main.divisor_field != other.divisor_field else
                                        f"{main.release} and {other.release} agree"))
    elif setup.cache_block_size == setup.mamba_block_size:
        res.notes.append("cache_config.block_size == mamba_block_size here, so releases that "
                         "divide by either field agree; --set cache_block_size=16 shows where "
                         "they part")


def summary(res: RecipeResult) -> str | None:
    """Where a resumed prefix seeds the running mamba state, against its block-table row, per
    release compared."""
    table = next((t for t in res.tables if t.title.startswith("running mamba state column")), None)
    if table is None or not table.rows:
        return None
    said = [_release_sentence(table, j) for j in range((len(table.columns) - 1) // 4)]
    out = "; ".join(said)
    return out[0].upper() + out[1:] + "."


def _release_sentence(table: Table, j: int) -> str:
    """One release's columns (the table's j-th group of four) in words."""
    release = table.columns[1 + 4 * j].removeprefix("column (").removesuffix(")")
    width = table.rows[0][3 + 4 * j]
    bad = [(r[0], r[1 + 4 * j]) for r in table.rows if r[4 + 4 * j] != "in range"]
    if len(table.rows) == 1:
        n, col = table.rows[0][0], table.rows[0][1 + 4 * j]
        where = ("inside it" if not bad else
                 "past it: the align pre-copy reads a garbage block id (a CUDA illegal memory access)")
        return (f"in {release} a resumed prefix of {n:,} tokens seeds the running mamba state at "
                f"column {col} of a {width}-wide block-table row, {where}")
    if not bad:
        cols = [r[1 + 4 * j] for r in table.rows]
        return (f"in {release} all {len(table.rows)} prefixes (up to {table.rows[-1][0]:,} tokens) "
                f"seed the running mamba state inside the {width}-wide block-table row (columns "
                f"{min(cols)} to {max(cols)})")
    return (f"in {release} {len(bad)} of {len(table.rows)} prefixes seed the running mamba state "
            f"past the {width}-wide block-table row (a prefix of {bad[0][0]:,} tokens: column "
            f"{bad[0][1]}), a CUDA illegal memory access")


register(Recipe(
    name=NAME,
    engine="vllm",
    title="Running mamba-state column of a resumed prefix in align mode, against the block-table row",
    why=("With prefix caching, hybrid models run the mamba cache in 'align' mode; a release that "
         "divides the resumed prefix by the attention block size (16) instead of the mamba block "
         "size (1152) seeds the state at column ~6335 of a row ~240 wide and the GPU reads a "
         "garbage block id (a CUDA illegal memory access). Options: --set prefix_tokens=N, "
         "mamba_block_size=, cache_block_size=, compare=pip:vllm==0.31.0."),
    reads_flags=["enable_prefix_caching", "mamba_block_size", "mamba_cache_mode", "max_model_len",
                 "speculative_config", "tensor_parallel_size", "block_size", "dtype",
                 "kv_cache_dtype", "mamba_ssm_cache_dtype"],
    reads_config=["(through vllm-hybrid-page-align) the model's mamba state and attention keys",
                  "max_position_embeddings"],
    run=run,
    example=("--config example:qwen3-next-80b-a3b-instruct --flags 'vllm serve "
             "Qwen/Qwen3-Next-80B-A3B-Instruct --enable-prefix-caching --max-model-len 262144' "
             "--set prefix_tokens=101376 --set cache_block_size=16 --set compare=pip:vllm==0.31.0"),
    demos=[
        ("qwen3-next-80b-a3b-instruct.json",
         "vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct --tensor-parallel-size 4 "
         "--enable-prefix-caching --max-model-len 262144 "
         "--speculative-config '{\"method\":\"mtp\",\"num_speculative_tokens\":3}'"),
    ],
    needs=("torch",),
    summarize=summary,
))
