"""The README written into each bundle: copy-paste lines for the three usual launchers.

The investigator is often not the person who owns the deployment, so the
README says exactly what to add (one read-only volume, one environment
variable, one writable log directory) and how to turn the probes off again.
"""

from __future__ import annotations

from ..paste import code_block, code_span, here, quote, yaml_str
from .spec import ProbeSpec, TargetSpec

MOUNT = "/opt/recon-probe"


def render_readme(name: str, spec: ProbeSpec) -> str:
    """Markdown text for ``README.md``; ``name`` is the bundle folder's name.

    The folder's name and the log folder go into the lines through :mod:`recon.paste`
    (quoted; one with a control character is refused).
    """
    logs = spec.log_dir
    return "\n".join([_overview(name, spec), _docker_run(name, logs), _docker_compose(name, logs),
                      _kubernetes(name, logs), _AFTERWARDS])


def _target_line(t: TargetSpec) -> str:
    """One list item per target, so the owner sees what each process will log."""
    return (f"- `{t.qualname}`" + (f" ({t.kind}{t.signature or ''})" if t.kind else "")
            + f": logs {', '.join(t.log) or 'calls only'}"
            + (f"; self.{', self.'.join(t.self_attrs)}" if t.self_attrs else "")
            + (f"; {', '.join(f'{k} = {v}' for k, v in t.exprs.items())}" if t.exprs else "")
            + (f"; copies patched in {', '.join(t.copies)}" if t.copies else ""))


def _overview(name: str, spec: ProbeSpec) -> str:
    """What the bundle does, to which targets, and what it writes where."""
    targets = "\n".join(_target_line(t) for t in spec.targets)
    checked = (f"Targets checked against snapshot `{spec.snapshot['name']}` "
               f"({spec.snapshot['package']} {spec.snapshot['version']}).\n"
               if spec.snapshot else "Targets were not checked against a snapshot.\n")
    sampling = f"first {spec.first} calls" + (f", then every {spec.every}th" if spec.every else "")
    return f"""# recon probe bundle {code_span(name)}

Mount this folder read-only into the engine's container and put it on
`PYTHONPATH`: Python then imports its `sitecustomize.py` in every process
(API server, spawned and forked workers), which runs the image's own
`sitecustomize` first and then instruments the targets below in place (their
code objects; the function objects stay the same, no frame is added).
Builtins and C functions are left alone (`skipped` in `VERIFY`). Nothing else
changes: same image, same command line.

{checked}
{targets}

Per process and target: {sampling}; each process writes its own
`probe-<pid>-<start time>.jsonl` (at most {spec.max_bytes} bytes) in {code_span(spec.log_dir)},
starting with a `VERIFY` record (pid, argv, Python, environment variables
{', '.join(spec.env) or '(none requested)'}, target status); a forked process, with its
first record. A started process with no file never loaded the bundle, unless the
folder already held {spec.max_files} files (the cap: `recon probe read` counts the
processes past it). Nothing is ever written to stderr: if the log
directory is not writable (or fills up), records are dropped. The files here
are readable by any user (0644): the engine may run unprivileged.
"""


def _docker_run(name: str, logs: str) -> str:
    """The ``docker run`` flags to add, for engines started by hand."""
    bundle, logs = here(name, "the bundle folder's name"), quote(logs, "the log folder")
    block = code_block(["docker run ... \\", f"  -v {bundle}:{MOUNT}:ro \\",
                        f'  -v "$PWD/probe-logs":{logs} \\', f"  -e PYTHONPATH={MOUNT} \\",
                        "  IMAGE COMMAND..."])
    return f"""## docker run
{block}
If the image already sets `PYTHONPATH`, keep its value after `{MOUNT}:`
(`docker image inspect -f '{{{{.Config.Env}}}}' IMAGE`).
"""


def _docker_compose(name: str, logs: str) -> str:
    """The compose service keys to add, for engines run from a compose file."""
    bundle = yaml_str(f"./{name}:{MOUNT}:ro", "the bundle folder's name")
    logs = yaml_str(f"./probe-logs:{logs}", "the log folder")
    return "## docker compose\n" + code_block([
        "services:", "  engine:", "    volumes:", f"      - {bundle}", f"      - {logs}",
        "    environment:", f"      PYTHONPATH: {MOUNT}"], "yaml") + "\n"


def _kubernetes(name: str, logs: str) -> str:
    """The ConfigMap and pod spec fields to add, for engines deployed on Kubernetes."""
    create = "kubectl create configmap recon-probe " + quote(f"--from-file={name}/",
                                                            "the bundle folder's name")
    logs = yaml_str(logs, "the log folder")
    return f"""## Kubernetes
{code_block([create])}
```yaml
spec:
  containers:
    - name: engine
      env:
        - name: PYTHONPATH
          value: {MOUNT}
      volumeMounts:
        - {{name: recon-probe, mountPath: {MOUNT}, readOnly: true}}
        - {{name: recon-probe-logs, mountPath: {logs}}}
  volumes:
    - {{name: recon-probe, configMap: {{name: recon-probe}}}}
    - {{name: recon-probe-logs, emptyDir: {{}}}}
```
"""


#: how to read the logs and undo the change; the same for every bundle
_AFTERWARDS = """## Afterwards
```
recon probe read probe-logs/          # per process, per target; --json, --markdown
```
- `RECON_PROBE_DISABLE=1` turns the probes off without removing the mount;
  `RECON_PROBE_LOG_DIR=/path` moves the logs.
- `python -I`, `-E` and `-S` ignore `PYTHONPATH` or `site`: such processes are
  not probed (and write no `VERIFY` record).
- Inside `torch.compile` tracing the probes fold away without logging; during
  CUDA graph capture they log metadata (shapes, dtypes) only.
"""
