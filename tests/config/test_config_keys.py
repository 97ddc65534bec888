"""An unknown config key gets "did you mean" from the schema, as our one line (Hydra's advice,
``use +key=…``, would only lead to another error): ``retriever.topk=3`` (Hydra refuses the
override) and ``+retriever.topk=3`` (Hydra adds the key; the retriever's constructor raised
``TypeError: unexpected keyword argument 'topk'``). A key under an optional group left null
(``gate.baseline=x``) says to select the group."""

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


def test_a_misspelled_override_gets_our_line_alone(
    compose_cfg: Callable[..., DictConfig],
) -> None:
    with pytest.raises(ConfigCompositionException) as info:
        compose(config_name="config", overrides=["retriever.topk=3"])
    assert error_message(info.value) == OURS
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


def test_rag_exp_run_prints_our_line_alone(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "retriever.topk=3"]) == 1
    assert capsys.readouterr().err.splitlines() == [f"rag-exp run: error: {OURS}"]


def test_a_misspelled_group_option_gets_did_you_mean(
    compose_cfg: Callable[..., DictConfig],
) -> None:
    with pytest.raises(ConfigCompositionException) as info:
        compose(config_name="config", overrides=["chunker=semantik"])
    assert error_message(info.value) == (
        "chunker=semantik: chunker has no option 'semantik'; did you mean 'semantic'? Its "
        "options: fixed, none, semantic (an option of your own: ./conf/chunker/semantik.yaml)"
    )


def test_rag_exp_run_prints_no_search_path_for_a_missing_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "chunker=zzz"]) == 1
    err = capsys.readouterr().err
    assert "no name of it is close" in err and "search path" not in err


def test_a_value_of_the_wrong_type_says_what_the_key_takes(
    compose_cfg: Callable[..., DictConfig],
) -> None:
    cases = {
        "retriever.top_k=abc": "retriever.top_k=abc: retriever.top_k takes an integer, not "
        "'abc' (default 5: e.g. retriever.top_k=5)",
        "progress=maybe": "progress=maybe: progress takes true or false, not 'maybe' (default "
        "true: e.g. progress=true)",
    }
    for override, line in cases.items():
        with pytest.raises(ConfigCompositionException) as info:
            compose(config_name="config", overrides=[override])
        assert error_message(info.value) == line


def test_a_key_under_an_unselected_group_says_to_select_it(
    compose_cfg: Callable[..., DictConfig],
) -> None:
    # conf/gate/ holds default.yaml and retrieval.yaml; gate is null in conf/config.yaml
    with pytest.raises(ConfigCompositionException) as info:
        compose(config_name="config", overrides=["gate.baseline=production"])
    assert error_message(info.value) == (
        "gate.baseline: the gate group is not selected; add gate=default "
        "(choices: default, retrieval)"
    )
    with pytest.raises(ConfigCompositionException) as info:  # deeper keys name the same fix
        compose(config_name="config", overrides=["gate.rules.x=1"])
    assert error_message(info.value).startswith("gate.rules: the gate group is not selected")
    # a selected group's unknown key is still a typo of its schema
    with pytest.raises(ConfigCompositionException) as info:
        compose(config_name="config", overrides=["gate=default", "gate.baselin=production"])
    assert "did you mean gate.baseline?" in error_message(info.value)


def test_rag_exp_run_says_to_select_the_group(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "gate.baseline=production"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "rag-exp run: error: gate.baseline: the gate group is not selected; add gate=default "
        "(choices: default, retrieval)"
    ]


def test_a_group_without_a_default_asks_to_choose_not_for_a_fake(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # conf/reranker/ holds fake, http, http_tei and none (the default): no option to recommend
    assert main(["run", "reranker.candidates=20"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "rag-exp run: error: reranker.candidates: the reranker group is not selected; "
        "choose one: reranker=fake|http|http_tei"
    ]
