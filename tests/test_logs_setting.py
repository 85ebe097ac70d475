"""What ``recon logs`` reads off a log about where and how the engine ran (its GPU, its entry point).

The real H200 logs (``tests/data/logs/real``) give the cases a real run produces: a MoE model
names its device in a kernel-config path, a dense one only prints its total memory, the
offline ``LLM(...)`` path prints an argument line and no API-server version. The ambiguous
and unknown boards below are single lines in the release's own wording (from vLLM 0.26.0's
source), because no real run of those boards is at hand: they are marked as such.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from recon.engine.gpus import GPUS, board_for, gpu
from recon.logs import parse_text, read_log
from recon.logs.setting import boards_by_memory, settings_from_log, with_logged_memory

REAL = Path(__file__).parent / "data" / "logs" / "real"

# written, not captured: the worker's memory line for boards no real run here had
MEMORY_LINE = ("INFO 12-01 21:21:38 [gpu_worker.py:857] Free memory on device ({free}/{total} GiB) "
               "on startup. Desired GPU memory utilization is (0.9, 70.0 GiB).")
ARGS_LINE = "INFO 12-01 21:18:25 [api_utils.py:273] non-default args: {'max_model_len': 4096}"


def _taken(log_text: str) -> tuple[dict[str, object], list[str]]:
    taken, notes = settings_from_log(parse_text(log_text, engine="vllm"))
    return {t.option: t.value for t in taken}, notes


def test_a_moe_log_names_its_device() -> None:
    taken, notes = settings_from_log(read_log(REAL / "Q_default.log"))
    gpu = next(t for t in taken if t.option == "gpu")
    assert (gpu.value, notes) == ("h200", [])
    assert "NVIDIA_H200" in gpu.why and "device_name=NVIDIA_H200" in \
        (REAL / "Q_default.log").read_text().splitlines()[gpu.line - 1]


def test_a_dense_log_is_known_by_its_total_memory() -> None:
    log = read_log(REAL / "L_default.log")
    assert "gpu_device_name" not in log.observed  # no MoE or SSM kernel config path
    taken = {t.option: t for t in settings_from_log(log)[0]}
    assert taken["gpu"].value == "h200" and "139.8 GiB" in taken["gpu"].why
    assert (taken["usage"].value, taken["usage"].line) == ("llm", log.args_line)


def test_every_board_is_found_by_the_memory_its_driver_leaves() -> None:
    # the engine prints total memory a little under the board's (H200: 140.4 -> 139.8 GiB)
    for board in GPUS.values():
        if board.memory_query:
            assert board.key in boards_by_memory(board.memory_bytes / 2**30 * 0.995)


def test_boards_of_one_size_are_named_not_chosen() -> None:
    # an H100 80GB and an A100 80GB both print about 79.2 GiB: recon must not pick one
    taken, notes = _taken(ARGS_LINE + "\n" + MEMORY_LINE.format(free="78.7", total="79.19"))
    assert "gpu" not in taken and taken["usage"] == "llm"
    assert len(notes) == 1 and "h100" in notes[0] and "a100-80" in notes[0] and "--set gpu" in notes[0]


MOE_LINE = ("WARNING 12-01 21:20:59 [fused_moe.py:1107] Using default MoE config. Config file "
            "not found at /x/configs/E=8,N=512,device_name={name}.json\n")


def test_an_unknown_device_is_said_and_the_memory_decides() -> None:
    taken, notes = _taken(MOE_LINE.format(name="NVIDIA_L20")
                          + MEMORY_LINE.format(free="51.9", total="52.5"))
    assert "gpu" not in taken
    assert any("NVIDIA_L20" in n for n in notes)
    assert any("no board recon knows has 52.5 GiB" in n for n in notes)


def test_the_first_words_of_one_boards_name_name_it() -> None:
    # the MoE config file of a real RTX PRO 6000 run names the device by its first words
    taken, notes = _taken(MOE_LINE.format(name="NVIDIA_RTX_PRO_6000")
                          + MEMORY_LINE.format(free="94.1", total="94.97"))
    assert taken["gpu"] == "rtx-pro-6000" and notes == []
    # words several boards start with choose none of them (three H100s in the table): the
    # board is described from the log instead, its family (Hopper, sm90) and printed total
    taken, notes = _taken(MOE_LINE.format(name="NVIDIA_H100")
                          + MEMORY_LINE.format(free="78.7", total="79.19"))
    assert taken["gpu"] == "NVIDIA H100,memory=79.19GiB" and notes == []
    board = gpu(board_for(taken["gpu"])[0])
    assert (board.major, board.minor, board.torch_total_bytes) == (9, 0, int(79.19 * 2**30))


def test_a_consumer_board_the_table_lacks_is_described_from_the_log() -> None:
    """A held-out class: an RTX 5060 Ti run (not in the table). The log names the device and
    prints its total; the RTX 50 family is compute capability 12.0 (NVIDIA's CUDA GPU list),
    so the board is the log's name, 12.0 and the log's 15.48 GiB, and the choice is said."""
    taken, notes = _taken(MOE_LINE.format(name="NVIDIA_GeForce_RTX_5060_Ti")
                          + MEMORY_LINE.format(free="15.1", total="15.48"))
    key, how = board_for(taken["gpu"])
    board = gpu(key)
    assert (board.name, board.major, board.minor) == ("NVIDIA GeForce RTX 5060 Ti", 12, 0)
    assert board.memory_bytes == int(15.48 * 2**30) and notes == []
    assert "GeForce RTX 50" in how and "SMs assumed" in how


def test_a_users_board_name_takes_its_memory_from_the_log() -> None:
    """--set gpu='NVIDIA GeForce RTX 4070 Laptop GPU' alone lacks the memory; the log's total
    completes it (and says from which line); without a log figure the name stays as given."""
    log = parse_text(MEMORY_LINE.format(free="7.6", total="7.63"), engine="vllm")
    spec, said = with_logged_memory("NVIDIA GeForce RTX 4070 Laptop GPU", log)
    assert spec == "NVIDIA GeForce RTX 4070 Laptop GPU,memory=7.63GiB" and said
    assert (gpu(board_for(spec)[0]).major, gpu(board_for(spec)[0]).minor) == (8, 9)
    assert with_logged_memory("h100", log) == ("h100", None)


@pytest.mark.parametrize("line", [
    "INFO 12-01 10:00:00 [api_server.py:1000] vLLM API server version 0.26.0",
    "INFO 12-01 10:00:00 [api_utils.py:330] vLLM server version 0.26.0, serving model m",
])
def test_an_api_server_version_line_means_vllm_serve(line: str) -> None:
    taken, _ = _taken(line + "\n" + ARGS_LINE)
    assert taken["usage"] == "serve"


def test_nothing_is_read_off_an_sglang_log() -> None:
    taken, notes = settings_from_log(parse_text(MEMORY_LINE.format(free="1", total="139.8"),
                                                engine="sglang"))
    assert (taken, notes) == ([], [])


def test_the_release_a_log_names() -> None:
    """``--config`` without ``--snapshot``: the log's own release, or one line saying why not."""
    from recon.errors import ReconError
    from recon.logs import release_of

    assert release_of(read_log(REAL / "L_serve.log")) == "pip:vllm==0.26.0"
    dev = parse_text("INFO 12-01 10:00:00 [api_server.py:1000] vLLM API server version "
                     "0.11.1rc2.dev123+gabc1234\n", engine="vllm")
    with pytest.raises(ReconError, match="development build"):
        release_of(dev)
    with pytest.raises(ReconError, match="prints no engine version"):
        release_of(parse_text(ARGS_LINE, engine="vllm"))
