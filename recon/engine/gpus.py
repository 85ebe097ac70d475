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

import re
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

#: the table's own boards
TABLE_KEYS = tuple(GPUS)
#: boards the table lacks, as described by the user or a log (:func:`described`), by key:
#: found by :func:`gpu` from their key only, never by name, and never part of the table
DESCRIBED: dict[str, GPU] = {}

DEFAULT_GPU = "h100"

#: the declared server's CPU memory. Releases up to 0.16 refuse a command whose swap space
#: (4 GiB per GPU by default) times the tensor-parallel size exceeds 70% of it; read from the
#: machine recon runs on, every TP 8 command on a laptop failed where the server started.
#: GPU servers hold hundreds of GiB to a few TiB; the value is printed with every answer.
HOST_MEMORY_GIB = 1024


class UnknownGPU(ReconError):
    """A ``--gpu`` name that is not in the table (the error lists the table)."""

    exit_code = 2


class AmbiguousGPU(UnknownGPU):
    """A spelling that more than one board of the table fits (the error names them)."""


def gpu(key: str) -> GPU:
    """The table entry for ``key``: a key, an alias (``a100`` means ``a100-80``) or a board's
    device name, in any case (a spelling that needs reading goes through :func:`board_for`)."""
    if key in DESCRIBED:
        return DESCRIBED[key]
    k = _named(key)
    if k is None:
        raise UnknownGPU(f"unknown GPU {key!r}; known: {', '.join(TABLE_KEYS)}")
    return GPUS[k]


def board_for(spec: str | None) -> tuple[str | None, str]:
    """A ``--set gpu`` value as a table key, and what recon assumed to get it ("" if nothing).

    A board name is itself; a compute capability (``sm86``, ``sm_90``, ``8.6``) is
    the first board of the table with it, and the choice is said: the memory of
    the board (the release's batch defaults read it) is recon's assumption then.
    A board the table lacks is described instead (:func:`described`): its name, whose
    family tells the compute capability, and ``memory=``; or the properties alone.
    """
    if spec is None:
        return None, ""
    if "," in str(spec) or "=" in str(spec):
        board, how = described(str(spec))
        return board.key, how
    text = str(spec).strip().lower()
    digits = text.removeprefix("sm").lstrip("_").replace(".", "")
    if text.startswith("sm") or (digits.isdigit() and "." in text):
        if not digits.isdigit() or len(digits) < 2:
            raise UnknownGPU(f"--set gpu: {spec!r} is neither a board ({', '.join(TABLE_KEYS)}) nor a "
                             "compute capability such as sm86")
        major, minor = int(digits[:-1]), int(digits[-1])
        for board in _table():
            if (board.major, board.minor) == (major, minor):
                return board.key, (f"GPU {spec}: {board.name} ({board.memory_bytes / 2**30:.1f} "
                                   f"GiB), the first board of that compute capability; name "
                                   f"the board (--set gpu=KEY) if its memory differs")
        raise UnknownGPU(f"--set gpu: no board of compute capability {major}.{minor} in the "
                         f"table; known: {', '.join(f'{g.key} (sm{g.major}{g.minor})' for g in _table())}")
    key = _named(text)
    if key is not None:
        return key, ""
    try:
        board = _read_as(text)
    except AmbiguousGPU:
        raise
    except UnknownGPU:
        if family_of(text) is None:
            raise
        board, how = described(str(spec))  # or names the property it lacks (its memory)
        return board.key, how
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
    for board in _table():
        if board.name.lower() == text.strip().lower():
            return board.key
    return None


def _table() -> list[GPU]:
    """The table's own boards (a described board is found by its key only, never by name)."""
    return list(GPUS.values())


@dataclass(frozen=True)
class Family:
    """An architecture family, as a board's name tells it (the vendors' architecture tables)."""

    pattern: str  # over the compact name (:func:`_compact`, "laptop gpu" dropped)
    label: str
    major: int
    minor: int
    platform: str = "cuda"
    arch: str = ""


#: the first pattern that matches decides; a name none matches is the user's to describe
FAMILIES = (
    Family(r"rtxpro\d+blackwell", "RTX PRO Blackwell", 12, 0),
    Family(r"^rtx50\d\d", "GeForce RTX 50 (Blackwell)", 12, 0),
    Family(r"^rtx40\d\d", "GeForce RTX 40 (Ada Lovelace)", 8, 9),
    Family(r"^rtx\d+ada", "RTX Ada Generation", 8, 9),
    Family(r"^rtx30\d\d", "GeForce RTX 30 (Ampere)", 8, 6),
    Family(r"^rtxa\d+", "RTX A series (Ampere)", 8, 6),
    Family(r"^(rtx20\d\d|gtx16\d\d|titanrtx|quadrortx|t4$)", "Turing", 7, 5),
    Family(r"^v100", "Volta", 7, 0),
    Family(r"^l(4|40)", "Ada Lovelace data center", 8, 9),
    Family(r"^a(2|10|16|40)g?$", "Ampere GA10x data center", 8, 6),
    Family(r"^a(30|100|800)", "Ampere GA100", 8, 0),
    Family(r"^(gh|h)(100|200|800|20)", "Hopper", 9, 0),
    Family(r"^g?b300", "Blackwell Ultra", 10, 3),
    Family(r"^g?b(100|200)", "Blackwell", 10, 0),
    Family(r"^mi3(00|25)", "CDNA 3", 9, 4, "rocm", "gfx942:sramecc+:xnack-"),
    Family(r"^mi35", "CDNA 4", 9, 5, "rocm", "gfx950:sramecc+:xnack-"),
    Family(r"^mi2(10|50)", "CDNA 2", 9, 0, "rocm", "gfx90a:sramecc+:xnack-"),
)
UNITS = {"gib": 2**30, "gb": 10**9, "mib": 2**20, "mb": 10**6, "": 2**30}


def lacks_memory(spec: str) -> bool:
    """Whether ``spec`` names a board the table lacks whose family is known, without its
    memory (a log that prints the device's total can complete it)."""
    text = spec.strip()
    if "memory=" in text.lower() or _named(text.lower()) is not None or _spelled(text):
        return False
    return family_of(text.partition(",")[0]) is not None or "sm=" in text.lower()


def family_of(name: str) -> Family | None:
    """The architecture family a board's name tells, or None."""
    compact = _compact(name.lower().replace("laptop gpu", "").replace("laptop", ""))
    return next((f for f in FAMILIES if re.search(f.pattern, compact)), None)


def described(spec: str) -> tuple[GPU, str]:
    """A board the table lacks, from what the user or the log says of it, and the line that
    says what recon took and assumed: ``NAME,memory=16GiB[,sm=12.0][,sms=36]`` (the name's
    family gives the compute capability where ``sm`` is not given) or the properties alone.
    A property the answer needs and nothing gives (the memory) is refused, naming it."""
    name, props = _properties(spec)
    family = family_of(name) if name else None
    sm = props.get("sm")
    if sm is not None:
        (major, minor), source = _capability(sm), f"sm={sm}"
    elif family is not None:
        major, minor, source = family.major, family.minor, f"its family ({family.label})"
    else:
        raise UnknownGPU(f"GPU {spec!r}: its compute capability is not known here; give it "
                         f"(--set gpu='{name or 'NAME'},sm=12.0,memory=16GiB'), or a board "
                         f"recon knows ({', '.join(TABLE_KEYS)})")
    if "memory" not in props:
        raise UnknownGPU(f"GPU {spec!r} (compute capability {major}.{minor} from {source}): "
                         f"its memory is not known here; give it (--set gpu='"
                         f"{name or f'sm={major}.{minor}'},memory=16GiB'): the release sizes "
                         "its memory share and some defaults by it")
    nbytes = _bytes(props["memory"])
    similar = next((b for b in _table() if (b.major, b.minor) == (major, minor)), None)
    sms = int(props["sms"]) if props.get("sms", "").isdigit() else (similar.sms if similar else 64)
    board = GPU(key=f"described-{_compact(name) or f'sm{major}{minor}'}-{nbytes >> 20}m",
                name=name or f"sm{major}{minor} board", major=major, minor=minor,
                memory_bytes=nbytes, platform=family.platform if family else "cuda",
                arch=family.arch if family else "", sms=sms, torch_total_bytes=nbytes)
    sms_said = (f"{sms} SMs as given" if props.get("sms", "").isdigit() else
                f"{sms} SMs assumed (" + (f"the {similar.name}'s" if similar else
                                          "no board of that capability in the table")
                + "; give sms=N)")
    how = (f"GPU {board.name}: not in recon's table; compute capability {major}.{minor} from "
           f"{source}, memory {nbytes / 2**30:.2f} GiB as given (taken as torch's total too), "
           f"{sms_said}")
    DESCRIBED[board.key] = board
    return board, how


def _properties(spec: str) -> tuple[str, dict[str, str]]:
    name, props = "", {}
    if len(spec) > 200:
        raise UnknownGPU(f"GPU {spec[:60]!r}...: longer than any board's description")
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        key, eq, value = part.partition("=")
        if not eq:
            if name:
                raise UnknownGPU(f"GPU {spec!r}: one name, then KEY=VALUE properties")
            name = part
            continue
        if key.strip().lower() not in ("memory", "sm", "sms"):
            raise UnknownGPU(f"GPU {spec!r}: {key.strip()!r} is not a property recon takes "
                             "(memory, sm, sms)")
        props[key.strip().lower()] = value.strip()
    return name, props


def _capability(text: str) -> tuple[int, int]:
    digits = text.strip().lower().removeprefix("sm").lstrip("_")
    if "." in digits:
        major, _, minor = digits.partition(".")
    else:
        major, minor = digits[:-1], digits[-1:]
    if not (major.isdigit() and minor.isdigit()):
        raise UnknownGPU(f"sm={text!r} is not a compute capability (12.0, sm120)")
    return int(major), int(minor)


def _bytes(text: str) -> int:
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", text.lower())
    if not found or found.group(2) not in UNITS or float(found.group(1)) <= 0:
        raise UnknownGPU(f"memory={text!r} is not a size (16GiB, 16384MiB, 17.2GB)")
    return int(float(found.group(1)) * UNITS[found.group(2)])


def _spelled(text: str) -> bool:
    """Whether ``text`` spells a table board's key or name (``rtx 4090``, ``a6000``)."""
    want = _compact(text)
    return any(want in (_compact(b.key), _compact(b.name)) for b in _table())


def _read_as(text: str) -> GPU:
    """The one board whose key or device name ``text`` spells (``rtx 4090``, ``rtx_3090``,
    ``GeForce RTX 4090``, ``a6000``); more than one, or none, is the user's to name."""
    want = _compact(text)
    if not want:
        raise UnknownGPU(f"unknown GPU {text!r}; known: {', '.join(TABLE_KEYS)}")
    spelled = [b for b in _table() if want in (_compact(b.key), _compact(b.name))]
    if len(spelled) == 1:
        return spelled[0]
    near = spelled or [b for b in _table()
                       if _compact(b.key).endswith(want) or _compact(b.key).startswith(want)]
    if len(near) == 1:
        return near[0]
    if near:
        raise AmbiguousGPU(f"GPU {text!r} could be {', '.join(b.key for b in near)}: name one "
                         "(--set gpu=KEY)")
    raise UnknownGPU(f"unknown GPU {text!r}; known: {', '.join(TABLE_KEYS)}")
