"""The config tree: every option of every group composes and instantiates; typos fail at
compose time; the CLI prints the resolved config."""

from __future__ import annotations

import pickle
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.plugins import Plugins
from hydra.errors import ConfigCompositionException
from hydra.plugins.config_source import ConfigLoadError
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError

from rag_experiments.build import build_role_chat, chat_class, model_arguments, run_caveat
from rag_experiments.config.schema import (
    CHAT_MODELS,
    SCHEMAS,
    GenerationConf,
    JudgeRoleConf,
    option,
    register_configs,
)
from rag_experiments.errors import ConfigError
from rag_experiments.generate.config import register_generate_config
from rag_experiments.llm.base import ChatModelBase, Completion, Message, Usage
from rag_experiments.llm.roles import JUDGE_ONLY_KEYS, judge_model_node
from rag_experiments.locations import CONF_DIR
from rag_experiments.qualify.config import register_judge_check_config

NOT_COMPONENTS = ("experiment", "gate", "hydra")  # presets, the gate's settings, launchers
GROUPS = sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir() and p.name not in NOT_COMPONENTS)
REQUIRED = {"dataset": ["dataset.path=/nonexistent/x"]}
REQUIRED_BY_OPTION = {"mlflow_traces": ["dataset.experiment=x"]}  # reads a store, not a path


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def test_conf_groups_mirror_the_component_kinds():
    expected = {
        "paths",
        "dataset",
        "target",
        "chunker",
        "embedder",
        "retriever",
        "reranker",
        "llm",
        "judge",
        "metrics",
        "tracking",
        "verifier",
    }
    assert set(GROUPS) == expected
    assert set(SCHEMAS) == expected | {"gate"}  # gate= is a setting, not a component


@pytest.mark.parametrize(("group", "option"), [(g, o) for g in GROUPS for o in _options(g)])
def test_every_option_composes_and_instantiates(compose_cfg, group, option):
    extra = REQUIRED.get(group, []) if option not in ("sample",) else []
    extra = REQUIRED_BY_OPTION.get(option, extra)
    if (group, option) == ("verifier", "local"):
        extra = ["verifier.path=/nonexistent"]  # a model folder
    cfg = compose_cfg(f"{group}={option}", *extra)
    node = cfg[group]
    if node is None:  # reranker=none, verifier=none: no part
        assert option == "none" and group in ("reranker", "verifier")
    elif (group, option) == ("verifier", "local"):  # its constructor checks the folder first
        with pytest.raises(Exception, match="no model folder there") as info:
            instantiate(model_arguments(node))
        assert isinstance(info.value.__cause__ or info.value, ConfigError)
    elif group == "metrics":
        built = [instantiate(n) for n in node.suite.values()]
        assert built and all(hasattr(m, "evaluate") and m.specs() for m in built)
    elif group in ("paths",):
        assert node.chroma_dir.endswith("chroma")
    elif group == "target":
        assert node._target_.endswith("Target")
    else:  # a judge node also holds role keys (require_distinct) the model does not take;
        # a client's flat timeout/retry keys travel as one `retry` (model_arguments)
        obj = instantiate(model_arguments(judge_model_node(node) if group == "judge" else node))
        assert type(obj).__name__ == node._target_.rsplit(".", 1)[-1]


@pytest.mark.parametrize("preset", sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml")))
def test_experiment_presets_compose(compose_cfg, preset):
    cfg = compose_cfg(f"experiment={preset}", "dataset.path=/x")
    assert cfg.metrics.name


def test_misspelled_key_fails_at_compose_time(compose_cfg):
    with pytest.raises((ConfigCompositionException, ConfigKeyError)) as info:
        compose_cfg("chunker.sise=256")
    assert "sise" in str(info.value) or "sise" in str(info.value.__cause__)


def test_wrong_type_fails_at_compose_time(compose_cfg):
    with pytest.raises(ConfigCompositionException):
        compose_cfg("retriever.top_k=many")


def test_cli_prints_resolved_config(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rag_experiments",
            "run",
            "chunker=fixed",
            "chunker.size=300",
            "--cfg",
            "job",
            "--resolve",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "_target_: rag_experiments.chunking.fixed.FixedChunker" in out.stdout
    assert "size: 300" in out.stdout


def test_cli_help_lists_commands():
    out = subprocess.run(
        [sys.executable, "-m", "rag_experiments", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "run" in out.stdout


def _schema_of(path) -> DictConfig | None:
    """The structured config a YAML file of conf/ starts from: the first entry of its defaults
    list that names a ConfigStore node (``/schema/llm/ollama``, ``root_schema``, a plugin's
    ``optuna``); None when there is none (experiment presets, plugins not installed)."""
    group = path.parent.relative_to(CONF_DIR).as_posix()
    for entry in OmegaConf.load(path).get("defaults", []):
        if not isinstance(entry, str):
            continue  # `group: option` entries and overrides
        name = entry.split("@")[0]
        where = name.lstrip("/") if name.startswith("/") else f"{group}/{name}".lstrip("./")
        try:
            return ConfigStore.instance().load(f"{where}.yaml").node
        except ConfigLoadError:
            continue
    return None


def _keys_equal_to_default(schema: DictConfig, raw: DictConfig, prefix: str = "") -> list[str]:
    """Dotted keys of YAML ``raw`` whose value equals ``schema``'s default (after the schema's
    type conversion: ``timeout_s: 120`` equals ``120.0``; ``???`` equals MISSING)."""
    found = []
    data = OmegaConf.to_container(raw, resolve=False)
    for key, value in data.items():
        if key in ("defaults", "hydra") or key not in schema.keys():
            continue
        if isinstance(value, dict) and OmegaConf.get_type(schema, key) not in (dict, None):
            if not OmegaConf.is_missing(schema, key) and OmegaConf.is_config(schema[key]):
                found += _keys_equal_to_default(schema[key], raw[key], f"{prefix}{key}.")
                continue
        default = OmegaConf.to_container(schema, resolve=False)[key]
        merged = OmegaConf.to_container(OmegaConf.merge(schema, {key: value}), resolve=False)
        if merged[key] == default:
            found.append(prefix + key)
    return found


def test_yaml_options_carry_only_what_differs_from_their_schema():
    register_generate_config()
    register_judge_check_config()
    Plugins.instance()  # plugins store their schemas (hydra/sweeper/optuna) when discovered
    repeated, unchecked = {}, []
    for path in sorted(CONF_DIR.rglob("*.yaml")):
        where = path.relative_to(CONF_DIR).as_posix()
        schema = _schema_of(path)
        if schema is None:
            unchecked.append(where)
            continue
        keys = _keys_equal_to_default(schema, OmegaConf.load(path))
        if keys:
            repeated[where] = keys
    # no schema: presets (overrides only), launchers whose plugin is not installed, and the
    # null options reranker=none and verifier=none
    allowed = ("experiment/", "hydra/launcher/", "reranker/none.yaml", "verifier/none.yaml")
    assert all(w.startswith(allowed) for w in unchecked), unchecked
    assert repeated == {}, f"YAML keys that repeat their schema's default: {repeated}"


def test_the_check_flags_a_repeated_default():
    schema = OmegaConf.structured(SCHEMAS["llm"]["ollama"])
    raw = OmegaConf.create({"timeout_s": 120, "max_tokens": 1024, "options": {}, "num_ctx": 8192})
    assert sorted(_keys_equal_to_default(schema, raw)) == ["num_ctx", "options", "timeout_s"]
    target = OmegaConf.structured(SCHEMAS["target"]["http"])
    raw = OmegaConf.create({"url": "???", "response": {"answer": "answer", "contexts": "x"}})
    assert _keys_equal_to_default(target, raw) == ["url", "response.answer"]


def test_every_chat_model_has_a_judge_schema_with_the_role_keys():
    role = set(OmegaConf.structured(JudgeRoleConf))
    for name, chat in CHAT_MODELS.items():
        judge = OmegaConf.structured(SCHEMAS["judge"][name])
        assert set(judge) == set(OmegaConf.structured(chat)) | role
        assert OmegaConf.get_type(judge).__name__ == chat.__name__.replace("LLM", "Judge")
    assert role == set(JUDGE_ONLY_KEYS)


def test_a_composed_judge_config_pickles(compose_cfg):
    cfg = compose_cfg("judge=ollama", "judge.model=qwen2.5:7b")
    back = pickle.loads(pickle.dumps(cfg))
    assert back.judge.model == "qwen2.5:7b"
    assert OmegaConf.get_type(back.judge) is SCHEMAS["judge"]["ollama"]


class EchoChat(ChatModelBase):
    """The chat-model module of the provider added by the test below (what
    ``rag_experiments/llm/<name>.py`` would hold)."""

    provider = "echo"
    cacheable = False

    def __init__(
        self, reply: str = "echo", max_tokens: int = 512, temperature: float = 0.0, seed: int = 0
    ) -> None:
        self.reply, self.max_tokens = reply, max_tokens

    def complete(self, messages: list[Message], schema: Any = None, **options: Any) -> Completion:
        return Completion(text=self.reply, usage=Usage(1, 1), latency_ms=0.0)

    def describe(self) -> dict[str, str]:
        return {"provider": self.provider, "model": self.reply}


@dataclass
class EchoLLMConf(GenerationConf):
    """The provider's schema (what ``rag_experiments/config/schema.py`` would hold)."""

    _target_: str = f"{__name__}.EchoChat"
    reply: str = "echo"


def test_a_new_chat_provider_is_one_module_one_schema_entry_one_yaml(tmp_path, monkeypatch):
    monkeypatch.setitem(SCHEMAS, "llm", dict(SCHEMAS["llm"]))  # restored after the test
    monkeypatch.setitem(SCHEMAS, "judge", dict(SCHEMAS["judge"]))
    option("llm", "echo")(EchoLLMConf)  # the schema's one declaration (@option on the class)
    register_configs()
    overlay = tmp_path / "conf"
    for group, extra in (("llm", "reply: hello\n"), ("judge", "max_tokens: 1024\n")):
        (overlay / group).mkdir(parents=True)
        (overlay / group / "echo.yaml").write_text(
            f"defaults:\n  - /schema/{group}/echo@_here_\n  - _self_\n{extra}"
        )
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(
                config_name="config",
                overrides=[f"hydra.searchpath=[file://{overlay}]", "llm=echo", "judge=echo"],
            )
    finally:
        GlobalHydra.instance().clear()
    # built by the composition root, as `rag-exp run` builds the generator and the judge
    generator = build_role_chat(cfg.llm, "generator").inner
    judge = build_role_chat(cfg.judge, "judge").inner
    assert (type(generator), generator.reply, generator.max_tokens) == (EchoChat, "hello", 512)
    assert (type(judge), judge.reply, judge.max_tokens) == (EchoChat, "echo", 1024)
    assert judge.complete([{"role": "user", "content": "hi"}]).text == "echo"
    assert (
        chat_class(cfg.judge) is EchoChat
        and run_caveat({"generator": cfg.llm, "judge": cfg.judge}) == ""
    )
    assert cfg.judge.require_distinct is False  # the judge-role keys come with the schema
    with pytest.raises(ConfigCompositionException) as info:  # typed: a typo fails
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            compose(
                config_name="config",
                overrides=[f"hydra.searchpath=[file://{overlay}]", "llm=echo", "llm.rely=x"],
            )
    GlobalHydra.instance().clear()
    assert "rely" in str(info.value.__cause__)
