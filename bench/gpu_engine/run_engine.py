"""Device side: one REAL vLLM engine (offline LLM path), dummy weights, no tokenizer.

argv: CASE MODEL_DIR JSON_KWARGS
Prints vLLM's own log (this process + EngineCore) to stdout/stderr, the exact LLM kwargs
(a CASE line), the generated token ids (OUT/OUT2 lines) and a TIMING line.
"""
import json
import sys
import time


def main() -> None:
    case, model = sys.argv[1], sys.argv[2]
    extra = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    kw = dict(model=model, load_format="dummy", skip_tokenizer_init=True, max_model_len=4096)
    if "qwen3next" in model:
        # FlashInfer is not carried; on Hopper the release would pick it for GDN prefill
        kw["gdn_prefill_backend"] = "triton"
    kw.update(extra)
    print(f"CASE {case} LLM kwargs {json.dumps(kw, sort_keys=True)}", flush=True)
    t0 = time.time()
    llm = LLM(**kw)
    t1 = time.time()
    prompts = [TokensPrompt(prompt_token_ids=[1, 2, 3, 4, 5, 6, 7, 8]),
               TokensPrompt(prompt_token_ids=list(range(1000, 1300))),
               TokensPrompt(prompt_token_ids=list(range(20000, 21100)))]
    sp = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True, detokenize=False)
    for tag in ("OUT", "OUT2"):  # the second round repeats the prompts (prefix-cache hits when on)
        for o in llm.generate(prompts, sp, use_tqdm=False):
            print(f"{tag} {case} prompt_len={len(o.prompt_token_ids)} "
                  f"tokens={list(o.outputs[0].token_ids)}", flush=True)
    t2 = time.time()
    print(f"TIMING {case} init {t1 - t0:.1f}s generate {t2 - t1:.1f}s", flush=True)


if __name__ == "__main__":
    main()
