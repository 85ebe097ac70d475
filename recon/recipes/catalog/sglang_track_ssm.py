"""sglang-track-ssm: which chunk of ``h`` each prefilling sequence snapshots, and is it in range.

With prefix caching on a gated-delta-net model, SGLang's
``_init_track_ssm_indices`` (``sglang/srt/layers/attention/
hybrid_linear_attn_backend.py``) decides, per tracked sequence of a prefill
batch, whether its state is copied from the kernel's final state (length on a
chunk boundary) or from the intermediate state ``h`` at the last chunk
boundary, and at which row of ``h``. An investigator of a real crash misread the
dimensions of ``h`` three times; this recipe runs the release's own function
with real CPU torch on the batch's numbers and checks every index against the
row count of ``h`` that the release's ``prepare_chunk_offsets`` gives for the
same batch (``h`` is ``(1, NT, H, V, K)``, squeezed to ``(NT, ...)`` where it is
indexed).

Batch options (``--set``): ``extend_lens=[4957,127]`` (default: a real two-sequence batch),
``prefix_lens=[0,0]``, ``track=[true,true]`` (the track mask), ``track_lens``
(``mamba_track_seqlens``, default prefix + extend), ``cache_slots`` /
``track_slots`` (the mamba pool slots of the running and the tracked states,
default ``0..B-1`` and ``B..2B-1``), ``slots=N`` (pool size, to check
destinations), ``chunk_size=N`` (else the config's ``mamba_chunk_size`` or the
release's default, read by the release's own code).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from ...errors import ReconError
from ...slicing import Call, Py, RunFailed, RunResult, run_calls
from ..base import Finding, NotApplicable, Recipe, RecipeContext, RecipeResult, Table, count
from ..hybrid_common import child_events, child_helpers, find_method, functions_named, provenance_of
from ..options import opt_bools, opt_int, opt_ints
from ..registry import register
from ..sglang_common import facts_for

NAME = "sglang-track-ssm"
METHOD = "_init_track_ssm_indices"
#: a real batch from an investigation (two new sequences of 4957 and 127 tokens), used when --set extend_lens is absent
FIELD_BATCH = (4957, 127)

_CHILD = r'''
def batch(cpu_plan):
    b = PARAMS["batch"]
    cpu = dict(mamba_prefill_track_mask_cpu=None, mamba_track_seqlens_cpu=None,
               extend_seq_lens_cpu=None, extend_prefix_lens_cpu=None)
    if cpu_plan:
        cpu = dict(mamba_prefill_track_mask_cpu=list(b["track"]),
                   mamba_track_seqlens_cpu=list(b["track_lens"]),
                   extend_seq_lens_cpu=list(b["extend"]), extend_prefix_lens_cpu=list(b["prefix"]))
    return ns(forward_mode=ns(is_extend=lambda: True, is_target_verify=lambda: False,
                              is_decode=lambda: False),
              batch_size=len(b["extend"]),
              mamba_track_mask=torch.tensor(b["track"], dtype=torch.bool),
              extend_seq_lens=torch.tensor(b["extend"]),
              mamba_track_indices=torch.tensor(b["track_slots"]),
              mamba_track_seqlens=torch.tensor(b["track_lens"]),
              extend_prefix_lens=torch.tensor(b["prefix"]), **cpu)


def text_config():
    return config.get_text_config() if config is not None else HFConfig({})


_SERVER_ARGS = None


def server_args():
    """Stands for get_global_server_args(): the release's ServerArgs, reading this config."""
    global _SERVER_ARGS
    if _SERVER_ARGS is None:
        p = PARAMS
        _SERVER_ARGS = instance(p["server_args_cls"],
                                get_model_config=lambda: ns(hf_config=text_config()))
        if p["chunk_override"] is not None:
            _SERVER_ARGS._mamba_cache_chunk_size = p["chunk_override"]
    return _SERVER_ARGS
'''


def _names_returned(ctx: RecipeContext, qualname: str) -> list[str] | None:
    """Variable names of the returned tuple (``to_device(x)`` / ``x.to(...)`` -> ``x``)."""
    fn = ctx.index.function_ast(qualname)
    if fn is None:
        return None
    rets = [n for n in ast.walk(fn) if isinstance(n, ast.Return) and isinstance(n.value, ast.Tuple)]
    if not rets:
        return None
    names = []
    for elt in rets[-1].value.elts:  # type: ignore[union-attr]
        node = elt
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            node = node.args[0]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            node = node.func.value
        names.append(node.id if isinstance(node, ast.Name) else ast.unparse(elt))
    return names


def _gdn_class(ctx: RecipeContext) -> tuple[str, str]:
    """(GDN backend class, the definition of the method it runs)."""
    owners = [q.rpartition(".")[0] for q in functions_named(ctx, f"MambaAttnBackendBase.{METHOD}")]
    if not owners:
        owners = [q.rpartition(".")[0] for q in ctx.index.functions
                  if q.endswith(f".{METHOD}") and "hybrid_linear_attn_backend" in q]
    if not owners:
        raise NotApplicable(f"no {METHOD} in this release (SGLang tracks mamba states for prefix "
                            "caching from 0.5.6 or so)")
    gdn = sorted(q for q in ctx.index.classes if q.endswith(":GDNAttnBackend"))
    for cls in gdn + owners:
        method = find_method(ctx, cls, METHOD)
        if method is not None:
            return cls, method
    raise NotApplicable(f"no class of this release runs {METHOD}")


def _batch(ctx: RecipeContext) -> dict[str, list[Any]]:
    """The prefill batch from ``--set`` (defaults: FIELD_BATCH, all tracked)."""
    extend = opt_ints(ctx.options, "extend_lens") or list(FIELD_BATCH)
    n = len(extend)
    prefix = opt_ints(ctx.options, "prefix_lens") or [0] * n
    track = opt_bools(ctx.options, "track") or [True] * n
    track_lens = opt_ints(ctx.options, "track_lens") or [p + e for p, e in zip(prefix, extend,
                                                                               strict=True)]
    cache_slots = opt_ints(ctx.options, "cache_slots") or list(range(n))
    track_slots = opt_ints(ctx.options, "track_slots") or list(range(n, 2 * n))
    for key, value in (("prefix_lens", prefix), ("track", track), ("track_lens", track_lens),
                       ("cache_slots", cache_slots), ("track_slots", track_slots)):
        if len(value) != n:
            raise ReconError(f"--set {key}: {len(value)} values for a batch of {n} sequences")
    if any(e <= 0 for e in extend):
        raise ReconError("--set extend_lens: every sequence of a prefill batch extends by >= 1 token")
    return {"extend": extend, "prefix": prefix, "track": track, "track_lens": track_lens,
            "cache_slots": cache_slots, "track_slots": track_slots}


@dataclass
class _Track:
    """The release's tracking method, the batch and the options of one run."""

    cls: str
    method: str
    batch: dict[str, list[Any]]
    chunk_override: int | None
    slots: int | None
    offsets_fn: str | None  # prepare_chunk_offsets: the rows of h
    cpu_fn: str | None  # the CPU-metadata twin of the method
    has_chunk_prop: bool
    names: list[str]  # of the returned tuple


@dataclass
class _Calls:
    """The child's calls and the stubs and PARAMS they run with."""

    calls: list[Call]
    params: dict[str, Any]
    stubs: dict[str, str]
    page: Any
    server_prop: str | None  # 0.5.1x: ServerArgs.mamba_cache_chunk_size, run last


@dataclass
class _ReadBack:
    """What the tracking returned, with the chunk size it used and the locals it left."""

    results: list[RunResult]
    local_vals: dict[str, Any]
    chunk: int
    out: dict[str, Any]


def run(ctx: RecipeContext) -> RecipeResult:
    """Run the release's tracking (both paths when it has two) and its chunk-offset helper."""
    t = _track(ctx)
    built = _build_calls(ctx, t)
    rb = _read_back(t, *_run_tracking(ctx, t, built))
    offsets = _chunk_offsets(ctx, t, rb.chunk, built.stubs)
    nt = offsets[-1] if offsets else None
    res = RecipeResult(NAME, ctx.snapshot.name, ctx.release)
    b = t.batch
    res.inputs = {"extend_lens": b["extend"], "prefix_lens": b["prefix"], "track": b["track"],
                  "track_lens": b["track_lens"], "cache_slots": b["cache_slots"],
                  "track_slots": b["track_slots"]}
    v = res.values
    v["backend class"] = t.cls
    v["chunk size"] = rb.chunk
    v["chunk rows of h (NT)"] = nt if nt is not None else "unknown (no prepare_chunk_offsets)"
    if offsets is not None:
        v["chunk offsets per sequence"] = offsets
    for key in t.names:
        v[key] = rb.out.get(key)
    rows, verdicts = _per_sequence(t, rb, nt)
    res.tables.append(Table("per sequence", ["seq", "extend", "prefix", "tracked", "state from",
                                             "src index", "dst slot", "verdict"], rows))
    if rb.local_vals:
        res.tables.append(Table(f"locals of {ctx.index.functions[t.method].name} at return",
                                ["name", "value"],
                                [[k, val] for k, val in rb.local_vals.items()
                                 if not k.startswith("_")]))
    res.findings += [Finding(level, text) for level, text in verdicts]
    res.findings += chunk_findings(ctx, b["extend"])
    _findings_and_notes(ctx, t, built, rb, res)
    return res


def _track(ctx: RecipeContext) -> _Track:
    """Find the method and its helpers, and read the batch and options."""
    cls, method = _gdn_class(ctx)
    b = _batch(ctx)
    chunk_override = opt_int(ctx.options, "chunk_size")
    slots = opt_int(ctx.options, "slots")
    return _Track(cls=cls, method=method, batch=b, chunk_override=chunk_override, slots=slots,
                  offsets_fn=next(iter(functions_named(ctx, "prepare_chunk_offsets")), None),
                  cpu_fn=find_method(ctx, cls, f"{METHOD}_from_cpu"),
                  has_chunk_prop=find_method(ctx, cls, "mamba_chunk_size") is not None,
                  names=_names_returned(ctx, method) or [])


def resolved(ctx: RecipeContext) -> dict[str, Any]:
    """The release's own resolved ServerArgs for the command line given (none: empty).

    The page size and the chunked prefill size a server runs with are what the
    release resolves from the whole command line (SGLang engine mode), not the
    flags as typed.
    """
    if ctx.command is None or ctx.config is None:
        return {}
    facts, _ = facts_for(ctx)
    return facts.server_args


def chunk_findings(ctx: RecipeContext, extend: list[int]) -> list[Finding]:
    """A prefill forward takes at most ``chunked_prefill_size`` new tokens: say so for this batch."""
    limit = resolved(ctx).get("chunked_prefill_size")
    if not isinstance(limit, int) or limit <= 0:
        return []
    total = sum(extend)
    if total > limit:
        return [Finding("warn", f"this batch extends {total} tokens in one forward; the server "
                                f"resolves chunked_prefill_size to {limit} for your command line, "
                                "so its scheduler would not form it (split the lengths into "
                                "forwards of at most that many new tokens)")]
    return [Finding("ok", f"the batch's {total} new tokens fit one prefill forward "
                          f"(chunked_prefill_size {limit}, resolved by the release)")]


def _build_calls(ctx: RecipeContext, t: _Track) -> _Calls:
    """The tracking call (and its CPU twin), plus what a 0.5.1x release reads its chunk from."""
    b = t.batch
    self_attrs: dict[str, Any] = {"device": "cpu"}
    if t.has_chunk_prop:
        self_attrs["_mamba_chunk_size"] = t.chunk_override
        self_attrs["_model_runner"] = Py("ns(model_config=ns(hf_text_config=text_config()))")
    module = ctx.index.functions[t.method].module
    probe = Py(f"emit_globals({module!r}, ['FLA_CHUNK_SIZE', 'CHUNK_SIZE'], "
               f"watch_locals({ctx.index.functions[t.method].name!r}, batch(False)))")
    calls = [Call(f"{t.cls}.{METHOD}", self_attrs=self_attrs,
                  args={"mamba_cache_indices": Py(f"torch.tensor({b['cache_slots']!r})"),
                        "forward_batch": probe})]
    if t.cpu_fn is not None:
        calls.append(Call(f"{t.cls}.{METHOD}", self_attrs=self_attrs,
                          args={"mamba_cache_indices": Py(f"torch.tensor({b['cache_slots']!r})"),
                                "forward_batch": Py("batch(True)")}))
    params: dict[str, Any] = {"batch": b, "chunk_override": t.chunk_override,
                              "server_args_cls": None}
    stubs = {"triton.cdiv": "lambda a, b: (a + b - 1) // b"}  # triton's definition: ceil division
    page = resolved(ctx).get("page_size") or ctx.flags.get("page_size") or 1
    server_prop = None
    if "mamba_cache_chunk_size" in ctx.index.source(t.method):
        # 0.5.1x: the chunk comes from ServerArgs.mamba_cache_chunk_size (config + --page-size);
        # the release's property runs on a ServerArgs instance that reads this config
        server_prop = next(iter(functions_named(ctx, "ServerArgs.mamba_cache_chunk_size")), None)
        if server_prop is None:
            raise NotApplicable("this release reads get_global_server_args().mamba_cache_chunk_size "
                                "but has no ServerArgs.mamba_cache_chunk_size")
        params["server_args_cls"] = server_prop.rpartition(".")[0]
        stubs["get_global_server_args"] = "server_args"
        stubs["resolved_view"] = f"lambda args: ns(page_size={int(page)})"
        # this last call only puts the property into the slice (the target reaches it through
        # the stubbed get_global_server_args); listed last so that the slicer's budget, which
        # server_args.py's imports exhaust, is spent on the target first
        calls.append(Call(server_prop, self_attrs={
            "get_model_config": Py("lambda: ns(hf_config=text_config())")}))
    return _Calls(calls=calls, params=params, stubs=stubs, page=page, server_prop=server_prop)


def _run_tracking(ctx: RecipeContext, t: _Track,
                  built: _Calls) -> tuple[list[RunResult], int | None]:
    """One child; the tracking calls' results (checked) and the ServerArgs chunk, if run."""
    with child_helpers(built.params, _CHILD) as helpers:
        try:
            results = run_calls(ctx.snapshot, built.calls, config=ctx.config, stubs=built.stubs,
                                stub_file=helpers, real=["torch"], timeout=120)
        except RunFailed as err:
            raise RunFailed(f"{NAME}: {err}", results=err.results, detail=err.detail) from err  # its exit code
    server_chunk = None
    if built.server_prop is not None:
        server_chunk = results[-1].self_after.get("_mamba_cache_chunk_size")
        results = results[:-1]
    for r in results:
        if r.error is not None:
            raise ReconError(f"{NAME}: {r.target} raised {r.error.line()}")
        if r.value_type == "stub":
            raise ReconError(f"{NAME}: {r.target} is not in the slice (the slicer's budget ran "
                             "out before it); nothing of the release ran")
    return results, server_chunk


def _read_back(t: _Track, results: list[RunResult], server_chunk: int | None) -> _ReadBack:
    """The chunk size the release used (wherever this release keeps it) and the named outputs."""
    events = child_events(results[0].stdout)
    local_vals: dict[str, Any] = next((e["values"] for e in events if e["kind"] == "locals"), {})
    globs: dict[str, Any] = next((e["values"] for e in events if e["kind"] == "globals"), {})
    chunk = local_vals.get("state_chunk_size")  # the release's mamba_chunk_size property
    if chunk is None:  # 0.5.1x: ServerArgs.mamba_cache_chunk_size
        chunk = local_vals.get("mamba_cache_chunk_size", server_chunk)
    if chunk is None:  # older releases: the FLA kernel's chunk-size constant
        chunk = globs.get("FLA_CHUNK_SIZE") or globs.get("CHUNK_SIZE")
    if not isinstance(chunk, int):
        raise ReconError(f"{NAME}: could not read the chunk size this release used")
    if t.chunk_override is not None and chunk != t.chunk_override:
        raise NotApplicable(f"the chunk size is the kernel constant {chunk} in this release; "
                            f"--set chunk_size={t.chunk_override} cannot apply")
    out = dict(zip(t.names, results[0].value, strict=False)) if t.names else {}
    if not out:
        raise ReconError(f"{NAME}: cannot name the values {t.method} returns")
    return _ReadBack(results=results, local_vals=local_vals, chunk=chunk, out=out)


def _chunk_offsets(ctx: RecipeContext, t: _Track, chunk: int,
                   stubs: dict[str, str]) -> list[int] | None:
    """The rows of h, by the release's own chunk-offset helper, for the same batch."""
    cu = [0]
    for e in t.batch["extend"]:
        cu.append(cu[-1] + e)
    offsets: list[int] | None = None
    if t.offsets_fn is not None:
        with child_helpers({}) as helpers:
            got = run_calls(ctx.snapshot, [Call(t.offsets_fn, args={
                "cu_seqlens": Py(f"torch.tensor({cu!r})"), "chunk_size": chunk})],
                stubs={"triton.cdiv": stubs["triton.cdiv"]}, stub_file=helpers, real=["torch"],
                timeout=60)[0]
        if got.error is None and isinstance(got.value, list):
            offsets = got.value
    return offsets


def _per_sequence(t: _Track, rb: _ReadBack,
                  nt: int | None) -> tuple[list[list[Any]], list[tuple[str, str]]]:
    """Per-sequence rows from the release's outputs, and a verdict on each index."""
    b, out, chunk, slots = t.batch, rb.out, rb.chunk, t.slots
    h_src = out.get("track_ssm_h_src") or []
    h_dst = out.get("track_ssm_h_dst") or []
    final_src = out.get("track_ssm_final_src") or []
    final_dst = out.get("track_ssm_final_dst") or []
    unaligned = out.get("tracked_seqs")
    tracked = [i for i, tr in enumerate(b["track"]) if tr]
    if unaligned is None:  # older releases: unaligned = tracked with length % chunk != 0
        unaligned = [i for i in tracked if len(h_src) == len(tracked) or
                     (b["track_lens"][i] - b["prefix"][i]) % chunk]
    h_of = dict(zip(unaligned, zip(h_src, h_dst, strict=False), strict=False))
    aligned = [i for i in tracked if i not in h_of]
    final_of = dict(zip(aligned, zip(final_src, final_dst, strict=False), strict=False))
    rows = []
    verdicts: list[tuple[str, str]] = []
    for i, ext in enumerate(b["extend"]):
        if not b["track"][i]:
            rows.append([i, ext, b["prefix"][i], False, "-", "-", "-", "not tracked"])
            continue
        if i in h_of:
            src, dst = h_of[i]
            ok = nt is None or 0 <= src < nt
            why = (f"h row {src} {'<' if ok else '>='} NT {nt}" if nt is not None else
                   "NT unknown")
            rows.append([i, ext, b["prefix"][i], True, "h", src, dst, why])
            verdicts.append(("ok" if ok else "error", f"seq {i}: h_src {src} "
                             + (f"in range (NT = {nt})" if ok else f"OUT OF RANGE (NT = {nt})")))
        elif i in final_of:
            src, dst = final_of[i]
            rows.append([i, ext, b["prefix"][i], True, "final state", src, dst,
                         "length on a chunk boundary"])
        if slots is not None:
            verdicts += _slot_verdicts(i, slots, h_of, final_of)
    return rows, verdicts


def _slot_verdicts(i: int, slots: int, h_of: dict[int, Any],
                   final_of: dict[int, Any]) -> list[tuple[str, str]]:
    """Sequence ``i``'s destination (and final-state source) slot against the pool size."""
    src, dst = h_of.get(i) or final_of.get(i) or (None, None)
    checks = [("destination slot", dst)]
    if i in final_of:
        checks.append(("final-state source slot", src))
    verdicts = []
    for what, idx in checks:
        good = idx is not None and 0 <= idx < slots
        verdicts.append(("ok" if good else "error",
                         f"seq {i}: {what} {idx} {'<' if good else '>='} pool size {slots}"))
    return verdicts


def _findings_and_notes(ctx: RecipeContext, t: _Track, built: _Calls, rb: _ReadBack,
                        res: RecipeResult) -> None:
    """Unchecked slots, the CPU path's agreement, provenance and the run's assumptions."""
    if t.slots is None:
        res.findings.append(Finding("info", "destination slots not checked: --set slots=N gives "
                                            "the mamba pool size"))
    results = rb.results
    if len(results) > 1:
        agree = results[1].value[:6] == results[0].value[:6]
        res.findings.append(Finding("ok" if agree else "warn",
                                    f"the release's CPU-metadata path ({METHOD}_from_cpu) "
                                    + ("agrees" if agree else "DISAGREES") + " on "
                                    + ", ".join(t.names[:6])))
    server_prop = built.server_prop
    if server_prop is not None:
        res.notes.append(f"chunk size from the release's {server_prop} with --page-size "
                         f"{built.page}")
    res.provenance = provenance_of(ctx, [t.method] + ([server_prop] if server_prop else [])
                                   + ([t.cpu_fn] if t.cpu_fn else [])
                                   + ([t.offsets_fn] if t.offsets_fn else []))
    if "extend_lens" not in ctx.options:
        res.notes.append(f"no --set extend_lens: the batch {list(FIELD_BATCH)} (two new "
                         "sequences) was used")
    res.notes.append("h holds one row per chunk of every sequence's new tokens (NT rows; the "
                     "kernel allocates (1, NT, H, V, K) and the tracking code indexes the "
                     "squeezed (NT, H, V, K) view)")
    if t.offsets_fn:
        res.notes.append("triton.cdiv (used by prepare_chunk_offsets) is stubbed with its "
                         "definition, ceil division")


def summary(res: RecipeResult) -> str | None:
    """Whether every tracked index of the batch stays inside what it indexes."""
    rows = next((t.rows for t in res.tables if t.title == "per sequence"), [])
    if not rows:
        return None
    bad = [f.text for f in res.findings if f.level == "error" and f.text.startswith("seq ")]
    where = (f"NT = {res.values.get('chunk rows of h (NT)')} chunk rows of h, chunk size "
             f"{res.values.get('chunk size')}")
    if bad:
        what = "tracked index is" if len(bad) == 1 else "tracked indices are"
        return f"{len(bad)} {what} out of range in this batch ({where}): {bad[0]}."
    tracked = sum(1 for r in rows if r[3])
    return (f"Every tracked index of this batch is in range: {tracked} of its "
            f"{count(len(rows), 'sequence')} tracked ({where}).")


register(Recipe(
    name=NAME,
    engine="sglang",
    title="h/final source and destination indices of SGLang's mamba state tracking for a prefill batch",
    why=("SGLang snapshots gated-delta-net states for prefix caching from chunk rows of h; "
         "an investigator misread h's dimensions three times. Runs the release's "
         "_init_track_ssm_indices on CPU torch and checks each index against NT. Options: "
         "--set extend_lens=[..] prefix_lens track track_lens cache_slots track_slots slots "
         "chunk_size."),
    reads_flags=["page_size"],
    reads_config=["mamba_chunk_size (else the release's default)"],
    run=run,
    example="--config example:qwen3-next-80b-a3b-instruct "
            "--set extend_lens=[4957,127]",
    demos=[("qwen3-next-80b-a3b-instruct.json",
            "python -m sglang.launch_server --model-path Qwen/Qwen3-Next-80B-A3B-Instruct --tp 4")],
    needs=("torch",),
    summarize=summary,
))
