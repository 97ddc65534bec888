"""Typed schemas of every config group, registered in Hydra's ConfigStore.

Each YAML file in ``conf/<group>/`` starts from one of these schemas (its defaults list names
``/schema/<group>/<name>``), so a misspelled or unknown key fails when the config is composed,
before any work starts::

    $ rag-exp run chunker.sise=256
    Could not override 'chunker.sise'. ... Key 'sise' not in 'SemanticChunkerConf'

Defaults lists stay in YAML (``conf/``); these dataclasses only declare fields, types and
defaults. ``MISSING`` marks a required field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

# NOTE: Optional[...] / Dict / List (not PEP 604 unions) because OmegaConf inspects these
# annotations at runtime and must understand them on Python 3.10.


# --- paths -----------------------------------------------------------------------------------
@dataclass
class PathsConf:
    """Where things are written. Relative paths resolve against the working directory."""

    cache_dir: str = ".cache"
    chroma_dir: str = "${paths.cache_dir}/chroma"
    embedding_cache: str | None = "${paths.cache_dir}/embeddings.sqlite"
    llm_cache: str | None = "${paths.cache_dir}/llm.sqlite"


# --- dataset ---------------------------------------------------------------------------------
@dataclass
class RowFileDatasetConf:
    """Fields of every loader that reads question rows from one file (``RowDataset``)."""

    path: str = MISSING
    corpus: str | None = None
    name: str | None = None
    password: str | None = None


@dataclass
class JsonlDatasetConf(RowFileDatasetConf):
    _target_: str = "rag_experiments.data.jsonl.JsonlDataset"


@dataclass
class MlflowTracesDatasetConf:
    """Traces of an MLflow experiment (``rag_experiments.data.mlflow_traces``)."""

    _target_: str = "rag_experiments.data.mlflow_traces.MlflowTracesDataset"
    experiment: str = MISSING
    tracking_uri: str | None = None
    filter_string: str | None = None
    max_results: int | None = None
    corpus: str | None = None
    name: str | None = None


@dataclass
class BeirDatasetConf:
    _target_: str = "rag_experiments.data.beir.BeirDataset"
    path: str = MISSING
    split: str = "test"
    name: str | None = None
    max_queries: int | None = None
    seed: int = 0


@dataclass
class SeedJsonDatasetConf(RowFileDatasetConf):
    _target_: str = "rag_experiments.data.peer.SeedJsonDataset"


@dataclass
class KeywordsJsonlDatasetConf(RowFileDatasetConf):
    _target_: str = "rag_experiments.data.peer.KeywordsJsonlDataset"


@dataclass
class RagasDatasetConf(RowFileDatasetConf):
    _target_: str = "rag_experiments.data.peer.RagasDataset"


@dataclass
class DeepEvalDatasetConf(RowFileDatasetConf):
    _target_: str = "rag_experiments.data.peer.DeepEvalDataset"


@dataclass
class HnswConf:
    """HNSW settings of the Chroma collection (part of its identity). Larger = closer to
    exact cosine search, slower to build."""

    ef_construction: int = 200
    ef_search: int = 200
    max_neighbors: int = 32


# --- target ----------------------------------------------------------------------------------
@dataclass
class BaselineTargetConf:
    """The built-in baseline: chunker → embedder → Chroma → top-k → generator (``llm``)."""

    _target_: str = "rag_experiments.targets.baseline.BaselineTarget"
    embed_title: bool = True
    hnsw: HnswConf = field(default_factory=lambda: HnswConf())
    system_prompt: str = (
        "You answer questions using only the numbered context passages. "
        "If the passages do not contain the answer, reply exactly: I don't know."
    )
    truncate_contexts: bool = False


@dataclass
class HttpResponseConf:
    """JMESPath mapping of an endpoint's JSON (see ``rag_experiments.targets.response_mapping``).
    ``null`` = not mapped; ``required`` fields must be found on every answer."""

    answer: str | None = "answer"
    contexts: str | None = "contexts"
    context_text: str = "text"
    context_id: str | None = "id"
    context_doc_id: str | None = "doc_id"
    context_ids: str | None = "context_ids"
    doc_ids: str | None = "doc_ids"
    required: list[str] = field(default_factory=lambda: ["answer", "contexts"])


@dataclass
class HttpTargetConf:
    """Any RAG service over HTTP (``rag_experiments.targets.http.HttpTarget``). ``body``: a JSON
    object (or a JSON string) with ``{user_input}``; header values may hold ``{env:NAME}``."""

    _target_: str = "rag_experiments.targets.http.HttpTarget"
    _convert_: str = "all"
    url: str = MISSING
    method: str = "POST"
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    response: HttpResponseConf = field(default_factory=lambda: HttpResponseConf())
    timeout_s: float = 60.0
    retries: int = 2
    backoff_s: float = 0.5
    backoff_max_s: float = 8.0
    retry_statuses: list[int] = field(default_factory=lambda: [429, 500, 502, 503, 504])
    max_concurrency: int = 4
    health_url: str | None = None
    doc_ids_from_text: bool = True
    doc_min_overlap: float = 0.7
    verify_tls: bool = True
    ca_bundle: str | None = None


@dataclass
class RecordedTargetConf:
    """Answers read from the dataset rows (``rag_experiments.targets.recorded.RecordedTarget``)."""

    _target_: str = "rag_experiments.targets.recorded.RecordedTarget"
    doc_ids_from_text: bool = True
    doc_min_overlap: float = 0.7


# --- chunker ---------------------------------------------------------------------------------
@dataclass
class NoChunkerConf:
    _target_: str = "rag_experiments.chunking.none.NoChunker"


@dataclass
class FixedChunkerConf:
    _target_: str = "rag_experiments.chunking.fixed.FixedChunker"
    size: int = 512
    overlap: int = 64


@dataclass
class SemanticChunkerConf:
    _target_: str = "rag_experiments.chunking.semantic.SemanticChunker"
    size: int = 800
    min_size: int = 200


# --- embedder --------------------------------------------------------------------------------
@dataclass
class SentenceTransformerEmbedderConf:
    _target_: str = "rag_experiments.embedding.sentence_transformers.SentenceTransformerEmbedder"
    model: str = "minilm"
    batch_size: int = 32
    normalize: bool = True
    device: str = "cpu"
    max_seq_length: int | None = None
    show_progress: bool = True
    backend: str = "torch"  # torch | onnx | onnx-int8 (ONNX Runtime, exported once to cache_dir)
    cache_dir: str = "${paths.cache_dir}"


@dataclass
class HashEmbedderConf:
    _target_: str = "rag_experiments.embedding.hash.HashEmbedder"
    dim: int = 256


@dataclass
class OllamaEmbedderConf:
    """Ollama ``/api/embed``; the id holds the model's digest."""

    _target_: str = "rag_experiments.embedding.ollama.OllamaEmbedder"
    model: str = "bge-m3"
    base_url: str = "http://127.0.0.1:11434"
    batch_size: int = 32
    normalize: bool = True
    truncate: bool = True
    keep_alive: str = "5m"
    query_prefix: str = ""
    document_prefix: str = ""
    dim: int | None = None
    timeout_s: float = 120.0
    max_retries: int = 2
    backoff_s: float = 0.5
    backoff_max_s: float = 8.0


@dataclass
class OpenAIEmbedderConf:
    """OpenAI-compatible ``/v1/embeddings``; ``api_key_env`` names the key's variable."""

    _target_: str = "rag_experiments.embedding.openai_compat.OpenAICompatEmbedder"
    model: str = "default"
    base_url: str = "http://127.0.0.1:8080/v1"
    api_key_env: str | None = None
    dimensions: int | None = None
    batch_size: int = 32
    normalize: bool = True
    query_prefix: str = ""
    document_prefix: str = ""
    dim: int | None = None
    timeout_s: float = 120.0
    max_retries: int = 2
    backoff_s: float = 0.5
    backoff_max_s: float = 8.0


# --- retriever -------------------------------------------------------------------------------
@dataclass
class RetrieverConf:
    """``top_k`` contexts go to the generator; retrieval metrics see a ranking ``depth`` deep
    (``null`` = the deepest cutoff of the retrieval metrics, at least ``top_k``)."""

    _target_: str = "rag_experiments.retrieval.retriever.Retriever"
    top_k: int = 5
    depth: int | None = None


# --- llm / judge -----------------------------------------------------------------------------
@dataclass
class EmbeddedLLMConf:
    """llama-cpp-python in-process; ``model_path: null`` = the bundled SmolLM2-135M GGUF."""

    _target_: str = "rag_experiments.llm.embedded.EmbeddedChat"
    model_path: str | None = None
    n_ctx: int = 4096
    n_threads: int | None = None
    max_tokens: int = 256
    temperature: float = 0.0
    seed: int = 0
    timeout_s: float = 120.0


@dataclass
class FakeLLMConf:
    """Deterministic fake model (tests, dry runs): no model call."""

    _target_: str = "rag_experiments.llm.fake.FakeChat"
    responses: dict[str, Any] = field(default_factory=dict)
    text: str | None = None
    delay_s: float = 0.0
    jitter_s: float = 0.0  # extra delay in [0, jitter_s), fixed per prompt (concurrency tests)
    max_concurrency: int = 4
    model: str = "fake-chat"
    extractive: bool = False  # answer unscripted question schemas from the prompt's passages


@dataclass
class OllamaLLMConf:
    """Ollama's native ``/api/chat``; ``max_tokens`` is sent as ``num_predict`` and ``num_ctx``
    with every request."""

    _target_: str = "rag_experiments.llm.ollama.OllamaChat"
    model: str = "llama3.1:8b"
    base_url: str = "http://127.0.0.1:11434"
    num_ctx: int = 8192
    max_tokens: int = 512
    temperature: float = 0.0
    seed: int = 0
    keep_alive: str = "5m"
    timeout_s: float = 120.0
    max_retries: int = 2
    backoff_s: float = 0.5
    backoff_max_s: float = 8.0
    parse_retries: int = 2
    max_concurrency: int = 8
    """Most requests in flight to the server at once (lowered under HTTP 429/503)."""
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class OpenAILLMConf:
    """OpenAI-compatible ``/v1/chat/completions`` (vLLM, llama.cpp server, LM Studio)."""

    _target_: str = "rag_experiments.llm.openai_compat.OpenAICompatChat"
    model: str = "default"
    base_url: str = "http://127.0.0.1:8080/v1"
    api_key_env: str | None = None
    context_window: int | None = None
    max_tokens: int = 512
    temperature: float = 0.0
    seed: int = 0
    timeout_s: float = 120.0
    max_retries: int = 2
    backoff_s: float = 0.5
    backoff_max_s: float = 8.0
    parse_retries: int = 2
    max_concurrency: int = 8
    """Most requests in flight to the server at once (lowered under HTTP 429/503)."""


@dataclass
class CacheConf:
    """The LLM response cache (file: ``paths.llm_cache``). ``mode``: ``read_write`` (look up,
    store new answers), ``read_only`` (look up only) or ``off``."""

    mode: str = "read_write"


@dataclass
class JudgeRoleConf:
    """Keys of every judge option that configure the judge's role, not the chat model
    (:data:`~rag_experiments.metrics.judge_config.JUDGE_ONLY_KEYS`).

    ``require_distinct: true`` refuses a run whose judge is the generator's model (otherwise it
    only warns). ``min_kappa``: below this faithfulness kappa of the judge's latest
    qualification (``rag-exp judge-check``) a run warns; ``require_qualified: true`` refuses a
    run whose judge has no qualification or one below ``min_kappa``
    (:mod:`rag_experiments.qualify.registry`)."""

    require_distinct: bool = False
    min_kappa: float = 0.4
    require_qualified: bool = False


@dataclass
class EmbeddedJudgeConf(EmbeddedLLMConf, JudgeRoleConf):
    """The embedded model as judge (role keys: :class:`JudgeRoleConf`)."""


@dataclass
class FakeJudgeConf(FakeLLMConf, JudgeRoleConf):
    """The fake model as judge (tests; role keys: :class:`JudgeRoleConf`)."""


@dataclass
class OllamaJudgeConf(OllamaLLMConf, JudgeRoleConf):
    """An Ollama model as judge (role keys: :class:`JudgeRoleConf`)."""


@dataclass
class OpenAIJudgeConf(OpenAILLMConf, JudgeRoleConf):
    """An OpenAI-compatible server as judge (role keys: :class:`JudgeRoleConf`)."""


# --- metrics ---------------------------------------------------------------------------------
@dataclass
class MetricsConf:
    """A metric set. ``suite`` maps a short key to one metric component (each with a
    ``_target_``); every entry is instantiated. ``generate: false`` skips answer generation
    (retrieval-only)."""

    name: str = MISSING
    generate: bool = True
    suite: dict[str, Any] = field(default_factory=dict)


# --- tracking --------------------------------------------------------------------------------
@dataclass
class TrackingConf:
    """MLflow location. ``uri``: ``sqlite:///mlruns.db`` (a file in the working directory) or
    ``http://127.0.0.1:5000`` (a tracking server)."""

    _target_: str = "rag_experiments.tracking.mlflow_tracker.MlflowTracker"
    uri: str = "sqlite:///mlruns.db"
    experiment: str = "rag-experiments"
    log_table: bool = True
    traces: bool = True
    """One MLflow trace per question with its assessments (:mod:`rag_experiments.tracking.
    traces`; needs a sqlite store or a server)."""


# --- root ------------------------------------------------------------------------------------
@dataclass
class RootConf:
    """Top level. Group fields are typed ``Any`` because each option brings its own schema."""

    paths: Any = MISSING
    dataset: Any = MISSING
    target: Any = MISSING
    chunker: Any = MISSING
    embedder: Any = MISSING
    retriever: Any = MISSING
    llm: Any = MISSING
    judge: Any = MISSING
    metrics: Any = MISSING
    tracking: Any = MISSING
    experiment: Any | None = None
    seed: int = 0
    run_name: str | None = None
    max_failure_rate: float = 0.2
    progress: bool = True
    max_samples: int | None = None
    """Evaluate a seeded subset of this many samples, stratified by question type and
    answerability (``EvalDataset.subset``); null = all."""
    max_concurrency: int | None = None
    """Questions answered at once; null = what the target declares (its generator's
    ``max_concurrency`` for the baseline, ``target.max_concurrency`` for HTTP)."""
    cache: CacheConf = field(default_factory=lambda: CacheConf())
    resume: str | None = None
    """Continue an interrupted run: its MLflow run id or its job folder."""
    objective: str | None = None
    """Value returned to a sweeper: a metric (``nDCG@10``) or ``0.7*nDCG@10+0.3*faithfulness``."""


SCHEMAS: dict[str, dict[str, type]] = {
    "paths": {"paths": PathsConf},
    "dataset": {
        "jsonl": JsonlDatasetConf,
        "beir": BeirDatasetConf,
        "seed_json": SeedJsonDatasetConf,
        "keywords_jsonl": KeywordsJsonlDatasetConf,
        "ragas": RagasDatasetConf,
        "deepeval": DeepEvalDatasetConf,
        "mlflow_traces": MlflowTracesDatasetConf,
    },
    "target": {
        "baseline": BaselineTargetConf,
        "http": HttpTargetConf,
        "recorded": RecordedTargetConf,
    },
    "chunker": {
        "none": NoChunkerConf,
        "fixed": FixedChunkerConf,
        "semantic": SemanticChunkerConf,
    },
    "embedder": {
        "sentence_transformers": SentenceTransformerEmbedderConf,
        "hash": HashEmbedderConf,
        "ollama": OllamaEmbedderConf,
        "openai": OpenAIEmbedderConf,
    },
    "retriever": {"retriever": RetrieverConf},
    "llm": {
        "embedded": EmbeddedLLMConf,
        "fake": FakeLLMConf,
        "ollama": OllamaLLMConf,
        "openai": OpenAILLMConf,
    },
    "judge": {
        "embedded": EmbeddedJudgeConf,
        "fake": FakeJudgeConf,
        "ollama": OllamaJudgeConf,
        "openai": OpenAIJudgeConf,
    },
    "metrics": {"metrics": MetricsConf},
    "tracking": {"mlflow": TrackingConf},
}
"""``{group: {schema name: dataclass}}``; YAML files name them as ``/schema/<group>/<name>``."""


def register_configs() -> None:
    """Store every schema in Hydra's ConfigStore (idempotent). Call before composing."""
    cs = ConfigStore.instance()
    cs.store(name="root_schema", node=RootConf)
    for group, schemas in SCHEMAS.items():
        for name, node in schemas.items():
            cs.store(group=f"schema/{group}", name=name, node=node)
