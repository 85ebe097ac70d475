"""The pieces that run inside the child: recording stubs and the HF-like config.

In-process, with the real classes (no mocks): a stub factory hands out the
same objects the child would.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from recon.slicing.hfconfig import ConfigKeyError, HFConfig
from recon.slicing.stubs import (
    RECORDER,
    ForbiddenStub,
    ForbiddenStubReached,
    Stub,
    StubFactory,
    StubValueError,
)


@pytest.fixture
def factory() -> StubFactory:
    RECORDER.touches.clear()
    RECORDER.assumptions.clear()
    RECORDER.forbidden.clear()
    return StubFactory(values={"torch.float16": "half"}, forbid={"get_current_vllm_config"})


def test_attribute_and_call_chains_are_counted(factory: StubFactory) -> None:
    torch = factory.child("torch")
    assert torch.cuda is torch.cuda  # one object per dotted name
    result = torch.cuda.is_available()
    assert isinstance(result, Stub) and repr(result) == "<stub torch.cuda.is_available()>"
    torch.cuda.is_available()
    counts = {name: rec["count"] for name, rec in RECORDER.touches.items()}
    # torch.cuda read twice (two calls) plus once for the identity check above: 2 + 2 = 4
    assert counts["torch"] == 4
    assert counts["torch.cuda"] == 2
    assert counts["torch.cuda.is_available"] == 2
    assert RECORDER.touches["torch.cuda.is_available"]["ops"] == {"call": 2}


def test_subclass_and_isinstance(factory: StubFactory) -> None:
    nn = factory.child("torch.nn")

    class Layer(nn.Module):  # the classic `class Foo(nn.Module)`
        def __init__(self, width: int) -> None:
            super().__init__()
            self.width = width

    layer = Layer(4)
    assert layer.width == 4
    assert isinstance(layer, nn.Module)
    assert not isinstance(object(), nn.Module)
    assert issubclass(Layer, nn.Module)
    assert RECORDER.touches["torch.nn.Module"]["ops"]["subclass"] == 1


def test_decorators_pass_functions_through(factory: StubFactory) -> None:
    torch = factory.child("torch")
    triton = factory.child("triton")

    def add(a: int, b: int) -> int:
        return a + b

    for deco in (triton.jit, torch.compile(dynamic=True), torch.inference_mode()):
        assert deco(add) is add
    assert torch.compile(add) is add  # bare decorator form
    assert triton.jit(staticmethod(add)).__func__ is add
    wrapped = functools.lru_cache(maxsize=None)(add)
    assert torch.inference_mode()(wrapped) is wrapped


def test_stubs_have_no_value_and_say_how_to_give_one(factory: StubFactory) -> None:
    n = factory.child("torch.cuda.device_count")()
    with pytest.raises(StubValueError, match=r"--stub torch.cuda.device_count=EXPR"):
        int(n)
    with pytest.raises(StubValueError):
        n < 3  # noqa: B015 - the comparison itself must raise
    with pytest.raises(StubValueError):
        list(n)
    assert bool(n) is True  # truth tests answer True ...
    assert any("truth value True of stub torch.cuda.device_count()" in w  # ... and are recorded
               for w, _ in RECORDER.assumptions)
    assert isinstance(n + 1, Stub) and isinstance(1 - n, Stub)
    assert isinstance(int | factory.child("torch.Tensor"), Stub)  # type unions at module level


def test_user_values_and_forbidden(factory: StubFactory) -> None:
    assert factory.child("torch.float16") == "half"
    assert factory.child("vllm.config.get_current_vllm_config") is not None
    forbidden = factory.child("vllm.config.get_current_vllm_config")  # bare name matches
    assert isinstance(forbidden, ForbiddenStub)
    with pytest.raises(ForbiddenStubReached, match="forbidden stub vllm.config.get_current_vllm"):
        forbidden()
    try:  # an engine's `except Exception` cannot hide it ...
        forbidden.use_v2_model_runner  # noqa: B018 - the read itself must raise
    except Exception:  # pragma: no cover - must not happen
        pytest.fail("ForbiddenStubReached is caught by except Exception")
    except ForbiddenStubReached:
        pass
    assert len(RECORDER.forbidden) == 2  # ... and each use is recorded anyway


def test_hfconfig_behaves_like_a_pretrained_config(tmp_path: Path) -> None:
    data = {"model_type": "qwen3", "num_hidden_layers": 4, "sliding_window": None,
            "rope_scaling": {"type": "yarn", "factor": 4.0},
            "text_config": {"hidden_size": 2048, "vision_start": 3}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    cfg = HFConfig.from_file(path)
    assert cfg.num_hidden_layers == 4
    assert cfg.sliding_window is None  # present with null: None, not the default below
    assert getattr(cfg, "sliding_window", 128) is None
    assert getattr(cfg, "layer_types", "absent") == "absent"
    assert not hasattr(cfg, "layer_types")
    assert isinstance(cfg.text_config, HFConfig) and cfg.text_config.hidden_size == 2048
    assert cfg.get_text_config() is cfg.text_config
    assert cfg.rope_scaling == {"type": "yarn", "factor": 4.0}  # plain dicts stay dicts
    assert cfg.rope_scaling.get("factor") == 4.0
    with pytest.raises(ConfigKeyError, match=r"config.text_config has no key 'num_heads'"):
        cfg.text_config.num_heads  # noqa: B018
    cfg.num_hidden_layers = 8
    assert "num_hidden_layers" in cfg and cfg.to_dict()["num_hidden_layers"] == 8
    assert cfg.to_dict()["text_config"] == {"hidden_size": 2048, "vision_start": 3}
    assert HFConfig(cfg.to_dict()) == cfg
    assert json.loads(cfg.to_json_string())["rope_scaling"]["type"] == "yarn"
    assert HFConfig({"a": 1}).get_text_config().a == 1
