"""Device side: what a REAL vLLM engine hashes into its compile cache key, part by part.

argv: OUT_JSON MODEL_DIR [JSON_KWARGS]
Runs ``LLM(model=MODEL_DIR, load_format="dummy", skip_tokenizer_init=True, max_model_len=4096,
**kwargs)`` with the engine core in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0, which the
release leaves out of its key), and records every call of ``VllmConfig.compute_hash``: the
result, each part's own ``compute_hash()``, and each part's fields as the release normalizes
them (``normalize_value``; a field it cannot normalize is its repr). Written to OUT_JSON.
"""
import json
import os
import sys

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"


def fields_of(part):
    from dataclasses import fields, is_dataclass

    from vllm.config.utils import normalize_value
    out = {}
    if not is_dataclass(part):
        return repr(part)[:2000]
    for f in fields(part):
        try:
            out[f.name] = normalize_value(getattr(part, f.name, None))
        except Exception as err:  # noqa: BLE001 - recorded
            out[f.name] = f"<{type(err).__name__}>"
    return out


def main() -> None:
    out_json, model = sys.argv[1], sys.argv[2]
    extra = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    import transformers
    from vllm.config.vllm import VllmConfig
    calls = []
    original = VllmConfig.compute_hash

    def compute_hash(self):
        result = original(self)
        parts = {}
        for name in sorted(self.__dataclass_fields__):
            method = getattr(getattr(self, name, None), "compute_hash", None)
            if callable(method):
                try:
                    parts[name] = {"hash": str(method()), "fields": fields_of(getattr(self, name))}
                except Exception as err:  # noqa: BLE001 - recorded
                    parts[name] = {"error": repr(err)}
        calls.append({"hash": result, "parts": parts})
        return result

    VllmConfig.compute_hash = compute_hash
    from vllm import LLM
    kw = dict(model=model, load_format="dummy", skip_tokenizer_init=True, max_model_len=4096)
    kw.update(extra)
    llm = LLM(**kw)
    with open(out_json, "w") as fh:
        json.dump({"transformers": transformers.__version__, "kwargs": kw, "calls": calls}, fh,
                  default=repr, indent=1)
    print("calls", [c["hash"] for c in calls], flush=True)
    del llm


if __name__ == "__main__":
    main()
