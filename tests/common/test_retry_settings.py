"""Call settings travel as one :class:`RetryPolicy`: users keep the flat keys (``llm.timeout_s``,
``judge.max_retries``, ``embedder.backoff_s`` …), the composition root nests them into the
policy each client takes, and the defaults are declared once (on the policy; the schemas read
them from it, no client constructor repeats them)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hydra.utils import instantiate

from rag_experiments.build import build, build_chat_model, build_embedder, build_role_chat
from rag_experiments.common.http import DEFAULT_RETRY, RetryPolicy, nest_retry
from rag_experiments.errors import ConfigError
from rag_experiments.targets.http import TARGET_RETRY

ROOT = Path(__file__).resolve().parents[2]
POLICY = "rag_experiments.common.http.RetryPolicy"
CHAT = "rag_experiments.llm.ollama.OllamaChat"
HTTP = "rag_experiments.targets.http.HttpTarget"
CALL_KEYS = {"timeout_s", "max_retries", "retries", "backoff_s", "backoff_max_s"}


def test_nest_retry_moves_the_flat_keys_into_one_node() -> None:
    node = {"_target_": CHAT, "model": "m", "timeout_s": 30, "max_retries": 0}
    assert nest_retry(node) == {
        "_target_": CHAT,
        "model": "m",
        "retry": {"_target_": POLICY, "jitter": True, "timeout_s": 30, "max_retries": 0},
    }
    assert node["timeout_s"] == 30  # the input is left as it was
    target = {"_target_": HTTP, "url": "u", "retries": 5, "backoff_s": 0.1}
    assert nest_retry(target, retries_key="retries", jitter=False)["retry"] == {
        "_target_": POLICY,
        "jitter": False,
        "backoff_s": 0.1,
        "max_retries": 5,
    }
    fake = {"_target_": "x.FakeChat", "text": "hi"}  # no call settings: as it is
    assert nest_retry(fake) == fake


@pytest.mark.parametrize(
    ("node", "kwargs", "message"),
    [
        ({"retries": -1}, {"retries_key": "retries", "where": "target"}, "target.retries must"),
        ({"timeout_s": 0}, {"where": "judge"}, "judge.timeout_s must be > 0"),
        ({"backoff_s": -1}, {"where": "llm"}, "llm.backoff_s and llm.backoff_max_s must"),
        ({"max_retries": -2}, {}, "max_retries must be >= 0, got -2"),
    ],
)
def test_a_refused_setting_names_the_users_key(node, kwargs, message) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        nest_retry({"_target_": CHAT, **node}, **kwargs)


class UsersTarget:
    """A user's own target: not a :class:`TakesRetry`, it takes its call settings flat."""

    def __init__(self, url: str, timeout_s: float = 5.0, retries: int = 1) -> None:
        self.url, self.timeout_s, self.retries = url, timeout_s, retries


def test_a_class_that_does_not_take_a_retry_policy_gets_its_keys_as_written() -> None:
    node = {"_target_": f"{__name__}.UsersTarget", "url": "u", "timeout_s": 9, "retries": 0}
    assert nest_retry(node, retries_key="retries") == node
    built = instantiate(nest_retry(node, retries_key="retries"))
    assert (built.timeout_s, built.retries) == (9, 0)
    unknown = {"_target_": "no.such.Class", "timeout_s": 9}  # instantiate reports it later
    assert nest_retry(unknown) == unknown


def test_policy_defaults_and_checks() -> None:
    assert DEFAULT_RETRY == RetryPolicy(
        max_retries=2, backoff_s=0.5, backoff_max_s=8.0, jitter=True, timeout_s=120.0
    )
    with pytest.raises(ConfigError, match="timeout_s must be > 0"):
        RetryPolicy(timeout_s=0)


def test_schema_defaults_are_the_policy_defaults(compose_cfg) -> None:
    cfg = compose_cfg("llm=ollama", "judge=openai", "embedder=ollama")
    for node in (cfg.llm, cfg.embedder):
        assert (node.timeout_s, node.max_retries) == (120.0, 2)
        assert (node.backoff_s, node.backoff_max_s) == (0.5, 8.0)
    assert cfg.judge.timeout_s == 180  # conf/judge/openai.yaml sets its own
    assert compose_cfg("llm=embedded").llm.timeout_s == 120.0


def test_users_flat_keys_reach_the_built_clients(compose_cfg) -> None:
    cfg = compose_cfg(
        "llm=ollama",
        "llm.timeout_s=7",
        "llm.max_retries=0",
        "llm.backoff_s=0.25",
        "judge=openai",
        "judge.max_retries=5",
        "embedder=ollama",
        "embedder.timeout_s=9",
        "embedder.backoff_max_s=1",
        "paths.embedding_cache=null",
    )
    chat = build_chat_model(cfg.llm)
    assert chat.retry == RetryPolicy(max_retries=0, backoff_s=0.25, timeout_s=7.0)
    assert chat.http.timeout_s == 7.0  # the transport's per-request limit
    judge = build_role_chat(cfg.judge, "judge").inner
    assert judge.retry == RetryPolicy(max_retries=5, timeout_s=180.0)
    embedder = build_embedder(cfg)
    assert embedder.retry == RetryPolicy(backoff_max_s=1.0, timeout_s=9.0)
    assert embedder.http.timeout_s == 9.0
    local = build_chat_model(compose_cfg("llm=embedded", "llm.timeout_s=3").llm)
    assert local.timeout_s == 3.0


def test_a_built_clients_refused_setting_names_its_config_key(compose_cfg) -> None:
    cfg = compose_cfg(
        "judge=ollama", "judge.timeout_s=0", "embedder=ollama", "embedder.backoff_s=-1"
    )
    with pytest.raises(ConfigError, match=r"^judge\.timeout_s must be > 0"):
        build_role_chat(cfg.judge, "judge")
    with pytest.raises(ConfigError, match=r"^embedder\.backoff_s and embedder\.backoff_max_s"):
        build_embedder(cfg)


def test_the_http_targets_flat_keys_reach_it(compose_cfg, tmp_path) -> None:
    data = tmp_path / "q.jsonl"
    data.write_text('{"id": "q1", "user_input": "Who?", "reference": "Ada"}\n')
    cfg = compose_cfg(
        "target=http",
        "target.url=http://127.0.0.1:9/ask",
        "target.retries=4",
        "target.timeout_s=2.5",
        "dataset=jsonl",
        f"dataset.path={data}",
        "metrics=retrieval",
    )
    target = build(cfg).target
    assert target._retry == RetryPolicy(max_retries=4, timeout_s=2.5, jitter=False)
    assert (target.retries, target.timeout_s, target.backoff_s) == (4, 2.5, 0.5)
    assert compose_cfg("target=http", "target.url=u").target.timeout_s == TARGET_RETRY.timeout_s


def constructor_call_defaults(path: Path) -> list[str]:
    """``file:line`` of every function argument named like a call setting
    (:data:`CALL_KEYS`) whose default is a number (a ``None`` default, "use the client's
    setting", is no second declaration)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        pairs = [
            *zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True)
        ]
        pairs += [
            (a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None
        ]
        found += [
            f"{path.relative_to(ROOT)}:{a.lineno}: {node.name}({a.arg}={ast.unparse(d)})"
            for a, d in pairs
            if a.arg in CALL_KEYS
            and isinstance(d, ast.Constant)
            and isinstance(d.value, int | float)
        ]
    return found


@pytest.mark.parametrize("folder", ["llm", "embedding", "targets", "retrieval"])
def test_no_client_repeats_the_call_setting_defaults(folder: str) -> None:
    found = [
        hit
        for path in sorted((ROOT / "rag_experiments" / folder).rglob("*.py"))
        for hit in constructor_call_defaults(path)
    ]
    assert not found, (
        "a constructor declares its own timeout/retry default; take `retry: RetryPolicy` "
        "(rag_experiments/common/http.py) instead:\n" + "\n".join(found)
    )
