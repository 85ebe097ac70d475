"""Turn the log's own argument line back into a serve command line.

When the user gives no ``--flags``, the engine already said what it was started
with: vLLM's ``non-default args: {...}`` (argparse dest names, non-defaults
only) or SGLang's ``server_args=...`` (every field). Rebuilding an argv from it
and handing that to :func:`recon.recipes.parse_flags` means the recipes see
the flags through the one parser they always use, with its one flag table.
"""

from __future__ import annotations

import json
from typing import Any

#: argparse destinations that are not flags of their own
_SKIP = {"model_tag", "subparser", "dispatch_function", "func", "__raw__", "api_server_count"}


def args_to_argv(args: dict[str, Any], engine: str | None) -> list[str]:
    """``{'model': 'm', 'tensor_parallel_size': 2}`` -> ``['vllm', 'serve', 'm', '--tensor-parallel-size', '2']``."""
    if engine == "sglang":
        argv = ["python", "-m", "sglang.launch_server"]
    else:
        model = args.get("model") or args.get("model_tag")
        argv = ["vllm", "serve"] + ([str(model)] if model else [])
    for key, value in args.items():
        if key in _SKIP or value is None or (engine != "sglang" and key == "model"):
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            if value:
                argv.append(flag)
            elif engine != "sglang":  # vLLM lists only non-defaults: False was asked for
                argv.append("--no-" + key.replace("_", "-"))
            continue
        if isinstance(value, dict):
            argv += [flag, json.dumps(value, default=str)]
        elif isinstance(value, (list, tuple)):
            if value:
                argv += [flag, *[str(v) for v in value]]
        else:
            argv += [flag, str(value)]
    return argv
