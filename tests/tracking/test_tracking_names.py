"""Metric-name sanitising, secret redaction and param flattening (no MLflow store needed)."""

from __future__ import annotations

import hashlib

import pytest
from mlflow.utils.validation import (
    MAX_ENTITY_KEY_LENGTH,
    MAX_PARAM_VAL_LENGTH,
    _validate_metric_name,
    _validate_param,
)

from rag_experiments.common.redact import REDACTED, is_secret_key, redact
from rag_experiments.errors import TrackingError
from rag_experiments.tracking.mlflow_tracker import redact_yaml
from rag_experiments.tracking.names import (
    hash_suffixed,
    sanitize_metric_name,
    sanitize_metric_names,
)
from rag_experiments.tracking.params import flatten_params


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("nDCG@10", "nDCG_at_10"),
        ("P@5", "P_at_5"),
        ("Hit@1", "Hit_at_1"),
        ("deepeval.faithfulness", "deepeval.faithfulness"),
        ("answer relevancy", "answer relevancy"),
        ("ragas:faithfulness", "ragas_faithfulness"),
        ("MRR@10 (doc)", "MRR_at_10 _doc_"),
        ("retrieval/recall@5", "retrieval/recall_at_5"),
        ("/abs", "_abs"),
        ("a//b", "a__b"),
        ("..", "_.."),
        ("précision", "pr_cision"),
    ],
)
def test_sanitize_metric_name(name: str, key: str) -> None:
    assert sanitize_metric_name(name) == key
    _validate_metric_name(key)  # MLflow's own check accepts it (raises otherwise)


def test_sanitize_long_name_is_cut_with_hash() -> None:
    a, b = "m" * 300 + "a", "m" * 300 + "b"
    ka, kb = sanitize_metric_name(a), sanitize_metric_name(b)
    assert len(ka) == len(kb) == MAX_ENTITY_KEY_LENGTH
    assert ka != kb
    assert ka.endswith("_sha256_" + hashlib.sha256(a.encode()).hexdigest()[:12])
    _validate_metric_name(ka)


def test_sanitize_blank_name_raises() -> None:
    with pytest.raises(TrackingError, match="empty"):
        sanitize_metric_name("  ")


def test_sanitize_metric_names_maps_all_and_keeps_duplicates() -> None:
    assert sanitize_metric_names(["nDCG@10", "P@5", "nDCG@10", "faithfulness"]) == {
        "nDCG@10": "nDCG_at_10",
        "P@5": "P_at_5",
        "faithfulness": "faithfulness",
    }


def test_sanitize_metric_names_collision_names_both() -> None:
    with pytest.raises(TrackingError) as err:
        sanitize_metric_names(["nDCG@10", "nDCG_at_10"])
    msg = str(err.value)
    assert "'nDCG@10'" in msg and "'nDCG_at_10'" in msg and "rename one" in msg


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("api_key", True),
        ("OPENAI_API_KEY", True),
        ("openaiApiKey", True),
        ("X-Api-Key", True),
        ("apikey", True),
        ("token", True),
        ("hf_token", True),
        ("accessToken", True),
        ("client_secret", True),
        ("password", True),
        ("Authorization", True),
        ("max_tokens", False),
        ("tokenizer", False),
        ("keywords", False),
        ("api_url", False),
        ("top_k", False),
    ],
)
def test_is_secret_key(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_redact_nested() -> None:
    cfg = {
        "llm": {
            "api_key": "sk-123",
            "headers": {"Authorization": "Bearer abc", "Accept": "application/json"},
            "max_tokens": 256,
        },
        "targets": [{"url": "http://h", "token": "t0k"}, {"note": "use Bearer xyz.123 please"}],
        "password": {"nested": "whole value goes"},
    }
    assert redact(cfg) == {
        "llm": {
            "api_key": REDACTED,
            "headers": {"Authorization": REDACTED, "Accept": "application/json"},
            "max_tokens": 256,
        },
        "targets": [{"url": "http://h", "token": REDACTED}, {"note": f"use {REDACTED} please"}],
        "password": REDACTED,
    }
    assert cfg["llm"]["api_key"] == "sk-123"  # the input is not modified


def test_hash_suffixed_keeps_short_text() -> None:
    assert hash_suffixed("abc", 10) == "abc"


def test_flatten_params_dotted_keys_lists_as_json_and_redaction() -> None:
    cfg = {
        "retriever": {"top_k": 5, "mmr": False},
        "metrics": {"cutoffs": [5, 10], "suite": {}},
        "llm": {"api_key": "sk-1", "model": None, "temperature": 0.1},
        "targets": [{"token": "t"}],
    }
    assert flatten_params(cfg) == {
        "retriever.top_k": "5",
        "retriever.mmr": "False",
        "metrics.cutoffs": "[5, 10]",
        "metrics.suite": "{}",
        "llm.api_key": REDACTED,
        "llm.model": "None",
        "llm.temperature": "0.1",
        "targets": f'[{{"token": "{REDACTED}"}}]',
    }


def test_flatten_params_sanitises_keys() -> None:
    assert flatten_params({"metrics": {"nDCG@10": {"k": 10}}}) == {"metrics.nDCG_at_10.k": "10"}


def test_flatten_params_key_collision_raises() -> None:
    with pytest.raises(TrackingError, match="'a@b' and 'a_at_b'"):
        flatten_params({"a@b": 1, "a_at_b": 2})


def test_long_param_value_cut_with_hash_suffix() -> None:
    value = "x" * 7000
    stored = flatten_params({"prompt": value})["prompt"]
    digest = hashlib.sha256(value.encode()).hexdigest()[:12]
    suffix = f"…[sha256:{digest}]"
    assert MAX_PARAM_VAL_LENGTH == 6000
    assert len(stored) == MAX_PARAM_VAL_LENGTH
    assert stored == value[: MAX_PARAM_VAL_LENGTH - len(suffix)] + suffix
    param = _validate_param("prompt", stored)  # MLflow keeps it as is (no further cut)
    assert param.value == stored


def test_long_param_values_differing_at_the_end_stay_different() -> None:
    a, b = "y" * 6999 + "a", "y" * 6999 + "b"
    stored = flatten_params({"a": a, "b": b})
    assert stored["a"] != stored["b"]
    assert stored["a"][:5900] == stored["b"][:5900]


def test_long_param_key_cut_with_hash() -> None:
    key = "k" * 300
    flat = flatten_params({key: 1, "k" * 299 + "j": 2})
    assert len(flat) == 2
    assert all(len(k) == MAX_ENTITY_KEY_LENGTH for k in flat)


def test_redact_yaml_parses_and_redacts() -> None:
    text = "llm:\n  model: m\n  api_key: sk-1\nheaders:\n  Authorization: Bearer abc\n"
    assert redact_yaml(text) == (
        f"llm:\n  model: m\n  api_key: '{REDACTED}'\nheaders:\n  Authorization: '{REDACTED}'\n"
    )


def test_redact_yaml_without_secrets_is_unchanged() -> None:
    text = "# comment kept\nretriever:\n  top_k: 5\n"
    assert redact_yaml(text) == text


def test_redact_yaml_fallback_for_invalid_yaml() -> None:
    text = "a: [unclosed\n  password: hunter2\nnote: Bearer abc\n"
    assert redact_yaml(text) == f"a: [unclosed\n  password: {REDACTED}\nnote: {REDACTED}\n"
