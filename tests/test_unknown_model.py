"""A model type the release's libraries do not know (issue 39: "An error for a model the release
does not know keeps transformers' 'pip install --upgrade transformers' advice, and one took 4m34s").

The user cannot act on a library's advice to upgrade itself: the environment is the release's
own. What they can act on is the model type recon read from their config.json and the two ways
out (the model's own configuration module, or a later release). Asking the release-day
libraries again builds a second environment for minutes; an older transformers does not know a
newer model either, so nothing more is built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from recon.paths import cache_dir
from recon.snapshots.model import Snapshot


def test_an_unknown_model_type_is_named_without_a_libraries_upgrade_advice(
        tmp_path: Path, vllm_latest: Snapshot) -> None:
    model_type = "frobnicator-from-the-future"
    config = {"architectures": ["FrobnicatorForCausalLM"], "model_type": model_type,
              "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8,
              "vocab_size": 32000}
    (tmp_path / "config.json").write_text(json.dumps(config))
    envs = cache_dir() / "envs"
    before = {p.name for p in envs.iterdir()} if envs.is_dir() else set()
    env = {**os.environ, "RECON_ENGINE_SERVER": "0"}
    proc = subprocess.run(
        [sys.executable, "-m", "recon", "engine-config", str(vllm_latest.root),
         "--config", str(tmp_path / "config.json"), "--flags", "vllm serve org/frob"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900, check=False)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("recon: error:")]
    assert proc.returncode != 0 and len(errors) == 1, proc.stderr[-2000:]
    assert "pip install" not in proc.stderr, errors[0]
    assert repr(model_type) in errors[0] and "--trust-remote-code" in errors[0], errors[0]
    after = {p.name for p in envs.iterdir()} if envs.is_dir() else set()
    # the release's own environment may be built on first use; no release-day one besides it
    assert len(after - before) <= 1, sorted(after - before)
    assert "release day" not in proc.stderr and "Traceback" not in proc.stderr
