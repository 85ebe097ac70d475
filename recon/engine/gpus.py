"""The declared virtual GPUs: one data table, the only GPU facts recon itself states.

Engine mode answers the release's device queries (name, compute capability,
total memory, count) from this table, through a subclass of the release's own
platform class (see :mod:`recon.engine.child`), so every decision the release
takes from the device (batch defaults below 70 GiB, attention backend
priorities per compute capability, FP8 support, ...) is the release's own.

Memory is the board's total as ``nvidia-smi`` (``rocm-smi``; CUDA's
``totalGlobalMem`` where NVML has no figure) prints it, in MiB times 2**20, not
the marketing size: the release compares it with thresholds such as 70 GiB.
On NVIDIA data-center boards torch's ``total_memory`` is 0.3-0.7 GiB less
(an A100 80GB: 80.0 vs 79.25 GiB in a public 0.31.0 log), far from any
threshold; a GiB figure the engine prints from it can differ by that much.
The first board of each compute capability is the one ``--set gpu=smXY`` picks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from ..errors import ReconError

MIB = 1 << 20


@dataclass(frozen=True)
class GPU:
    """One board: what the release can ask about it."""

    key: str
    name: str  # the device name the driver reports (vLLM matches substrings such as "A100")
    major: int
    minor: int
    memory_bytes: int
    platform: str = "cuda"  # "cuda" or "rocm": which release platform class to subclass
    #: False where NVML cannot report the memory (unified-memory boards): the release's
    #: memory query raises there as on the real board, and its fallback branch runs
    memory_query: bool = True
    #: the architecture torch reports on ROCm (``gcnArchName``); releases branch on it
    arch: str = ""
    #: streaming multiprocessors (``multi_processor_count``; compute units on ROCm): kernels
    #: size their grids and workspaces by it (vLLM 0.26's sampler: one row per SM)
    sms: int = 0
    #: the total torch reports (``cudaMemGetInfo``), where a real engine log printed it; the
    #: worker's memory share is of this figure. 0: not known (the board's total is used, said)
    torch_total_bytes: int = 0

    def as_json(self) -> dict[str, object]:
        return asdict(self)


GPUS: dict[str, GPU] = {g.key: g for g in (
    GPU("h100", "NVIDIA H100 80GB HBM3", 9, 0, 81559 * MIB),
    GPU("h200", "NVIDIA H200", 9, 0, 143771 * MIB),
    GPU("a100-80", "NVIDIA A100-SXM4-80GB", 8, 0, 81920 * MIB),
    GPU("a100-40", "NVIDIA A100-SXM4-40GB", 8, 0, 40960 * MIB),
    GPU("l40s", "NVIDIA L40S", 8, 9, 46068 * MIB),
    GPU("rtx3090", "NVIDIA GeForce RTX 3090", 8, 6, 24576 * MIB),
    GPU("rtx4090", "NVIDIA GeForce RTX 4090", 8, 9, 24564 * MIB),
    GPU("rtx4090d", "NVIDIA GeForce RTX 4090 D", 8, 9, 24564 * MIB),
    GPU("rtx5090", "NVIDIA GeForce RTX 5090", 12, 0, 32607 * MIB),
    GPU("b200", "NVIDIA B200", 10, 0, 183359 * MIB),
    GPU("gb10", "NVIDIA GB10", 12, 1, 122572 * MIB, memory_query=False),
    GPU("mi300x", "AMD Instinct MI300X", 9, 4, 196592 * MIB, platform="rocm",
        arch="gfx942:sramecc+:xnack-"),
    # more boards people run vLLM and SGLang on (name, capability and memory as public
    # nvidia-smi / rocm-smi / deviceQuery output quotes them; sources in docs/engine-mode.md)
    GPU("t4", "Tesla T4", 7, 5, 15360 * MIB),
    GPU("v100-16", "Tesla V100-SXM2-16GB", 7, 0, 16384 * MIB),
    GPU("v100-32", "Tesla V100-SXM2-32GB", 7, 0, 32768 * MIB),
    GPU("a10g", "NVIDIA A10G", 8, 6, 23028 * MIB),
    GPU("a10", "NVIDIA A10", 8, 6, 23028 * MIB),
    GPU("a40", "NVIDIA A40", 8, 6, 46068 * MIB),
    GPU("rtx-a6000", "NVIDIA RTX A6000", 8, 6, 49140 * MIB),
    GPU("rtx3060", "NVIDIA GeForce RTX 3060", 8, 6, 12288 * MIB),
    GPU("rtx3080", "NVIDIA GeForce RTX 3080", 8, 6, 10240 * MIB),
    GPU("rtx3090ti", "NVIDIA GeForce RTX 3090 Ti", 8, 6, 24564 * MIB),
    GPU("orin", "Orin", 8, 7, 62841 * MIB, memory_query=False),
    GPU("l4", "NVIDIA L4", 8, 9, 23034 * MIB),
    GPU("l40", "NVIDIA L40", 8, 9, 46068 * MIB),
    GPU("rtx6000-ada", "NVIDIA RTX 6000 Ada Generation", 8, 9, 49140 * MIB),
    GPU("rtx4060ti", "NVIDIA GeForce RTX 4060 Ti", 8, 9, 16380 * MIB),
    GPU("rtx4070", "NVIDIA GeForce RTX 4070", 8, 9, 12282 * MIB),
    GPU("rtx4080", "NVIDIA GeForce RTX 4080", 8, 9, 16376 * MIB),
    GPU("h100-pcie", "NVIDIA H100 PCIe", 9, 0, 81559 * MIB),
    GPU("h100-nvl", "NVIDIA H100 NVL", 9, 0, 95830 * MIB),
    GPU("h800", "NVIDIA H800", 9, 0, 81559 * MIB),
    GPU("h20", "NVIDIA H20", 9, 0, 97871 * MIB),
    GPU("gh200", "NVIDIA GH200 480GB", 9, 0, 97871 * MIB),
    GPU("gh200-144g", "NVIDIA GH200 144G HBM3e", 9, 0, 146831 * MIB),
    GPU("gb200", "NVIDIA GB200", 10, 0, 189471 * MIB),
    GPU("b300", "NVIDIA B300 SXM6 AC", 10, 3, 275040 * MIB),
    GPU("thor", "NVIDIA Thor", 11, 0, 125772 * MIB, memory_query=False),
    GPU("rtx-pro-6000", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 12, 0,
        97887 * MIB),
    GPU("rtx5080", "NVIDIA GeForce RTX 5080", 12, 0, 16303 * MIB),
    GPU("mi250x", "AMD Instinct MI250X/MI250", 9, 0, 65520 * MIB, platform="rocm",
        arch="gfx90a:sramecc+:xnack-"),
    GPU("mi210", "AMD Instinct MI210", 9, 0, 65520 * MIB, platform="rocm",
        arch="gfx90a:sramecc+:xnack-"),
)}

#: streaming multiprocessors per board, as the vendors' specifications list them
SMS = {"h100": 132, "h200": 132, "a100-80": 108, "a100-40": 108, "l40s": 142, "rtx3090": 82,
       "rtx4090": 128, "rtx4090d": 114, "rtx5090": 170, "b200": 148, "gb10": 48, "mi300x": 304,
       "t4": 40, "v100-16": 80, "v100-32": 80, "a10g": 80, "a10": 72, "a40": 84,
       "rtx-a6000": 84, "rtx3060": 28, "rtx3080": 68, "rtx3090ti": 84, "orin": 16, "l4": 58,
       "l40": 142, "rtx6000-ada": 142, "rtx4060ti": 34, "rtx4070": 46, "rtx4080": 76,
       "h100-pcie": 114, "h100-nvl": 132, "h800": 132, "h20": 78, "gh200": 132,
       "gh200-144g": 132, "gb200": 152, "b300": 160, "thor": 20, "rtx-pro-6000": 188,
       "rtx5080": 84, "mi250x": 220, "mi210": 104}
#: torch's total memory where a real engine start-up printed it ("Free memory on device
#: (free/total GiB)"): the H200 runs in tests/data/logs/real, the H100 runs in
#: tests/data/logs/real-h100, the public A100 80GB 0.31.0 log
TORCH_TOTAL_GIB = {"h200": 139.8, "h100": 79.18, "a100-80": 79.25}
GPUS = {k: replace(g, sms=SMS.get(k, 0),
                   torch_total_bytes=int(TORCH_TOTAL_GIB.get(k, 0) * 2**30))
        for k, g in GPUS.items()}

DEFAULT_GPU = "h100"

#: the declared server's CPU memory. Releases up to 0.16 refuse a command whose swap space
#: (4 GiB per GPU by default) times the tensor-parallel size exceeds 70% of it; read from the
#: machine recon runs on, every TP 8 command on a laptop failed where the server started.
#: GPU servers hold hundreds of GiB to a few TiB; the value is printed with every answer.
HOST_MEMORY_GIB = 1024


class UnknownGPU(ReconError):
    """A ``--gpu`` name that is not in the table (the error lists the table)."""

    exit_code = 2


def gpu(key: str) -> GPU:
    """The table entry for ``key``: a key, an alias (``a100`` means ``a100-80``) or a board's
    device name, in any case (a spelling that needs reading goes through :func:`board_for`)."""
    k = _named(key)
    if k is None:
        raise UnknownGPU(f"unknown GPU {key!r}; known: {', '.join(GPUS)}")
    return GPUS[k]


def board_for(spec: str | None) -> tuple[str | None, str]:
    """A ``--set gpu`` value as a table key, and what recon assumed to get it ("" if nothing).

    A board name is itself; a compute capability (``sm86``, ``sm_90``, ``8.6``) is
    the first board of the table with it, and the choice is said: the memory of
    the board (the release's batch defaults read it) is recon's assumption then.
    """
    if spec is None:
        return None, ""
    text = str(spec).strip().lower()
    digits = text.removeprefix("sm").lstrip("_").replace(".", "")
    if text.startswith("sm") or (digits.isdigit() and "." in text):
        if not digits.isdigit() or len(digits) < 2:
            raise UnknownGPU(f"--set gpu: {spec!r} is neither a board ({', '.join(GPUS)}) nor a "
                             "compute capability such as sm86")
        major, minor = int(digits[:-1]), int(digits[-1])
        for board in GPUS.values():
            if (board.major, board.minor) == (major, minor):
                return board.key, (f"GPU {spec}: {board.name} ({board.memory_bytes / 2**30:.1f} "
                                   f"GiB), the first board of that compute capability; name "
                                   f"the board (--set gpu=KEY) if its memory differs")
        raise UnknownGPU(f"--set gpu: no board of compute capability {major}.{minor} in the "
                         f"table; known: {', '.join(f'{g.key} (sm{g.major}{g.minor})' for g in GPUS.values())}")
    key = _named(text)
    if key is not None:
        return key, ""
    board = _read_as(text)
    return board.key, (f"GPU {spec!r} read as {board.key}: {board.name} "
                       f"({board.memory_bytes / 2**30:.1f} GiB); name the board (--set gpu=KEY) "
                       "if it is another")


#: other names of a board (the same board, so nothing is assumed)
ALIASES = {"a100": "a100-80", "a100-80gb": "a100-80", "a100-40gb": "a100-40",
           "h100-sxm": "h100", "h100-sxm5": "h100", "h100-80gb": "h100", "dgx-spark": "gb10",
           "spark": "gb10", "jetson-thor": "thor", "agx-thor": "thor",
           "rtx-pro-6000-blackwell": "rtx-pro-6000"}


def _compact(text: str) -> str:
    """A board name without case, spaces, punctuation or vendor words: ``RTX-4090`` -> rtx4090."""
    text = text.lower()
    for word in ("nvidia", "geforce", "amd", "instinct", "tesla"):
        text = text.replace(word, "")
    return "".join(ch for ch in text if ch.isalnum())


def _named(text: str) -> str | None:
    """The key ``text`` names exactly: a key, or a board's own device name (any case)."""
    k = text.strip().lower().replace("_", "-")
    k = ALIASES.get(k, k)
    if k in GPUS:
        return k
    for board in GPUS.values():
        if board.name.lower() == text.strip().lower():
            return board.key
    return None


def _read_as(text: str) -> GPU:
    """The one board whose key or device name ``text`` spells (``rtx 4090``, ``rtx_3090``,
    ``GeForce RTX 4090``, ``a6000``); more than one, or none, is the user's to name."""
    want = _compact(text)
    if not want:
        raise UnknownGPU(f"unknown GPU {text!r}; known: {', '.join(GPUS)}")
    spelled = [b for b in GPUS.values() if want in (_compact(b.key), _compact(b.name))]
    if len(spelled) == 1:
        return spelled[0]
    near = spelled or [b for b in GPUS.values()
                       if _compact(b.key).endswith(want) or _compact(b.key).startswith(want)]
    if len(near) == 1:
        return near[0]
    if near:
        raise UnknownGPU(f"GPU {text!r} could be {', '.join(b.key for b in near)}: name one "
                         "(--set gpu=KEY)")
    raise UnknownGPU(f"unknown GPU {text!r}; known: {', '.join(GPUS)}")
