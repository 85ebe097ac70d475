"""Device side: `vllm serve` (API server process + EngineCore), dummy weights, no tokenizer.

argv: CASE MODEL_DIR PORT LOGFILE [EXTRA CLI ARGS...]
Starts the server in its own process group with stdout/stderr to LOGFILE, waits for
"Application startup complete", sends one /v1/completions request with token ids, prints the
answer, then stops the whole group (SIGINT, then SIGKILL after 20 s).
"""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request


def main() -> None:
    case, model, port, logfile = sys.argv[1:5]
    extra = sys.argv[5:]
    args = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", model,
            "--load-format", "dummy", "--skip-tokenizer-init", "--max-model-len", "4096",
            "--port", port, "--served-model-name", "m"]
    if "qwen3next" in model:
        args += ["--gdn-prefill-backend", "triton"]
    args += extra
    with open(logfile, "w") as log:
        log.write(f"CASE {case} command {' '.join(args[1:])}\n")
        log.flush()
        t0 = time.time()
        p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        ok = False
        while p.poll() is None and time.time() - t0 < float(os.environ.get("SERVE_WAIT", "400")):
            time.sleep(1)
            with open(logfile, errors="replace") as r:
                if "Application startup complete" in r.read():
                    ok = True
                    break
        t1 = time.time()
        if ok:
            body = json.dumps({"model": "m", "prompt": [1, 2, 3, 4, 5, 6, 7, 8], "max_tokens": 8,
                               "temperature": 0.0, "ignore_eos": True,
                           "return_token_ids": True}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            try:
                ans = urllib.request.urlopen(req, timeout=60).read().decode()
            except Exception as e:  # noqa: BLE001 - reported, not fatal
                ans = f"request failed: {type(e).__name__}: {e}"
            log.write(f"\nOUT {case} {ans}\n")
            log.flush()
        time.sleep(1)
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGINT)
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        log.write(f"\nTIMING {case} startup {t1 - t0:.1f}s ready={ok} rc={p.returncode}\n")
    print(f"{case} ready={ok} startup {t1 - t0:.1f}s rc={p.returncode}")


if __name__ == "__main__":
    main()
