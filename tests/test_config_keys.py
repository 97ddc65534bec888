"""An unknown config key gets "did you mean" from the schema, our line first and Hydra's message
kept: ``retriever.topk=3`` (Hydra refuses the override) and ``+retriever.topk=3`` (Hydra adds
the key; the retriever's constructor raised ``TypeError: unexpected keyword argument 'topk'``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hydra import compose
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig

from rag_experiments.build import build
from rag_experiments.cli import main
from rag_experiments.config.compose import compose_config
from rag_experiments.config.keys import unknown_keys
from rag_experiments.config.reporting import error_message
from rag_experiments.config.schema import RetrieverConf, RootConf
from rag_experiments.errors import ConfigError

OURS = (
    "retriever.topk is not a config key (RetrieverConf has no 'topk'): did you mean "
    "retriever.top_k? Its keys: _target_, top_k, depth"
)


def test_a_misspelled_override_gets_our_line_then_hydras(
    compose_cfg: Callable[..., DictConfig],
) -> None:
    with pytest.raises(ConfigCompositionException) as info:
        compose(config_name="config", overrides=["retriever.topk=3"])
    lines = error_message(info.value).splitlines()
    assert lines[0] == OURS
    assert lines[1:3] == [
        "Could not override 'retriever.topk'.",
        "To append to your config use +retriever.topk=3",
    ]
    assert "Key 'topk' not in 'RetrieverConf'" in lines[3]
    # a nested schema, and a key with no close field
    with pytest.raises(ConfigCompositionException) as info:
        compose(config_name="config", overrides=["target.hnsw.efsearch=5"])
    assert error_message(info.value).startswith(
        "target.hnsw.efsearch is not a config key (HnswConf has no 'efsearch'): did you mean "
        "target.hnsw.ef_search?"
    )
    with pytest.raises(ConfigCompositionException) as info:
        compose(config_name="config", overrides=["retriever.zzz=1"])
    assert "(RetrieverConf has no 'zzz'): no key of it is close" in error_message(info.value)


def test_an_appended_unknown_key_is_refused_before_anything_is_built(
    compose_cfg: Callable[..., DictConfig],
) -> None:
    cfg = compose_cfg("+retriever.topk=3", "+seeed=1", "embedder=hash", "llm=fake")
    assert unknown_keys(cfg) == [
        ("retriever.topk", "topk", RetrieverConf),
        ("seeed", "seeed", RootConf),
    ]
    with pytest.raises(ConfigError) as info:
        build(cfg)
    assert str(info.value).startswith(OURS + "; seeed is not a config key (RootConf has no")
    assert "did you mean seed?" in str(info.value)
    # keys of Dict-typed nodes (scripted responses) and Hydra's own keys are free
    ok = compose_cfg("llm=fake", "+llm.responses.QAPair={question:q,answer:a}")
    assert unknown_keys(ok) == []


def test_compose_api_commands_say_did_you_mean() -> None:
    ours = r"^retriever\.topk is not a config key .*did you mean retriever\.top_k\?"
    with pytest.raises(ConfigError, match=ours):
        compose_config("config", ["retriever.topk=3"])
    with pytest.raises(ConfigError, match=ours):
        compose_config("config", ["+retriever.topk=3"])


def test_rag_exp_run_prints_our_line_first(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "retriever.topk=3"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"rag-exp run: error: {OURS}"
    assert err[1] == "Could not override 'retriever.topk'."
