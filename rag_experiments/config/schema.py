"""Typed schemas of every config group, registered in Hydra's ConfigStore.

Each YAML file in ``conf/<group>/`` starts from one of these schemas (its defaults list names
``/schema/<group>/<name>``), so a misspelled or unknown key fails when the config is composed,
before any work starts::

    $ rag-exp run chunker.sise=256
    Could not override 'chunker.sise'. ... Key 'sise' not in 'SemanticChunkerConf'

Defaults lists stay in YAML (``conf/``); these dataclasses declare fields, types and
defaults, and a YAML option carries only what differs from its schema (a test checks it).
``MISSING`` marks a required field. Fields shared by several providers live once, in a base:
:class:`RemoteConf` (model, server, timeout, retries), :class:`OllamaServerConf` /
:class:`OpenAIServerConf` (each server kind's URL and keys, for chat models and embedders),
:class:`GenerationConf` / :class:`RemoteChatConf` (chat models), :class:`BatchEmbedderConf` /
:class:`RemoteEmbedderConf` (embedders), :class:`DocMatchConf` (targets),
:class:`FileDatasetConf` / :class:`RowFileDatasetConf` (datasets).

Each schema dataclass declares the group and name it is stored under, once, with
:func:`option` (``@option("retriever", "bm25")``); :data:`SCHEMAS` (and :data:`CHAT_MODELS`,
its ``llm`` group) is gathered from those declarations. A new chat provider needs one
dataclass here, declared ``@option("llm", <name>)`` (extending :class:`RemoteChatConf` and a
server base, or :class:`GenerationConf`); its judge schema is derived (:func:`judge_schema`).
A part with no schema here (a user's class named by a YAML file of their ``./conf``) gets one
derived from its constructor (:mod:`rag_experiments.config.derive`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from rag_experiments.common.http import TARGET_RETRY, RetryPolicy
from rag_experiments.config.declare import SCHEMAS, option
from rag_experiments.config.declare import SchemaOption as SchemaOption  # re-exported
from rag_experiments.config.declare import schema_option as schema_option  # re-exported
from rag_experiments.config.stats_defaults import ALPHA, MIN_PAIRS, N_RESAMPLES, SEED
from rag_experiments.index.bm25_params import INDEX_TITLE, Bm25Params

# NOTE: Optional[...] / Dict / List (not PEP 604 unions) because OmegaConf inspects these
# annotations at runtime and must understand them on Python 3.10.


# --- paths -----------------------------------------------------------------------------------
@option("paths", "paths")
@dataclass
class PathsConf:
    """Where things are written. Relative paths resolve against the working directory."""

    cache_dir: str = ".cache"
    chroma_dir: str = "${paths.cache_dir}/chroma"
    bm25_dir: str = "${paths.cache_dir}/bm25"
    embedding_cache: str | None = "${paths.cache_dir}/embeddings.sqlite"
    llm_cache: str | None = "${paths.cache_dir}/llm.sqlite"


# --- shared bases ----------------------------------------------------------------------------
@dataclass
class ComponentConf:
    """A node Hydra instantiates: ``_target_`` names its class (first key of every component)."""

    _target_: str = MISSING


@dataclass
class BackoffConf(ComponentConf):
    """Waits between attempts of an HTTP call: ``backoff_s`` first, doubled per attempt up to
    ``backoff_max_s`` (seconds). These keys and ``timeout_s`` / ``max_retries`` (``retries``
    for the HTTP target) reach the client as one
    :class:`~rag_experiments.common.http.RetryPolicy`, whose defaults they take."""

    backoff_s: float = RetryPolicy.backoff_s
    backoff_max_s: float = RetryPolicy.backoff_max_s


@dataclass
class RemoteConf(BackoffConf):
    """A model served over HTTP: its name on the server, where the server is, and how calls are
    bounded and retried (timeouts, connection errors, HTTP 429/5xx; exponential backoff with
    jitter)."""

    model: str = MISSING
    base_url: str = MISSING
    timeout_s: float = RetryPolicy.timeout_s
    """Per call, seconds."""
    max_retries: int = RetryPolicy.max_retries
    """Extra attempts after a failed call."""
    api_key_env: str | None = None
    """Name of the environment variable holding the server's key (sent as ``Authorization:
    Bearer``; the key then appears nowhere). Prefer it to ``api_key``."""
    api_key: str | None = None
    """The key itself (redacted in params, artifacts, Hydra's ``.hydra/`` files and the
    console, but typed into shell history): prefer ``api_key_env``."""


@dataclass
class OllamaServerConf(RemoteConf):
    """An Ollama server (native API): a model stays loaded ``keep_alive`` after its last call."""

    base_url: str = "http://127.0.0.1:11434"
    keep_alive: str = "5m"


@dataclass
class OpenAIServerConf(RemoteConf):
    """An OpenAI-compatible server (vLLM, llama.cpp server, LM Studio, Ollama's ``/v1``)."""

    model: str = "default"
    base_url: str = "http://127.0.0.1:8080/v1"


@dataclass
class DocMatchConf(ComponentConf):
    """A target whose answers may come without document ids: ``doc_ids_from_text`` matches
    each context to the corpus document that contains it (or holds ``doc_min_overlap`` of its
    words)."""

    doc_ids_from_text: bool = True
    doc_min_overlap: float = 0.7


# --- dataset ---------------------------------------------------------------------------------
@dataclass
class FileDatasetConf(ComponentConf):
    """Fields of every loader that reads one file or folder (``path`` is required)."""

    path: str = MISSING
    name: str | None = None


@dataclass
class RowFileDatasetConf(FileDatasetConf):
    """Fields of every loader that reads question rows from one file (``RowDataset``):
    ``corpus`` = documents the contexts come from (needed for doc-level retrieval metrics),
    ``password`` = of encrypted PDFs in it."""

    corpus: str | None = None
    password: str | None = None


@option("dataset", "jsonl")
@dataclass
class JsonlDatasetConf(RowFileDatasetConf):
    _target_: str = "rag_experiments.data.jsonl.JsonlDataset"


@option("dataset", "mlflow_traces")
@dataclass
class MlflowTracesDatasetConf(ComponentConf):
    """Traces of an MLflow experiment (``rag_experiments.data.mlflow_traces``)."""

    _target_: str = "rag_experiments.tracking.trace_dataset.MlflowTracesDataset"
    experiment: str = MISSING
    tracking_uri: str | None = None
    filter_string: str | None = None
    max_results: int | None = None
    corpus: str | None = None
    name: str | None = None


@option("dataset", "beir")
@dataclass
class BeirDatasetConf(FileDatasetConf):
    """A BEIR folder; ``max_queries``: a seeded subset of N queries (null = all)."""

    _target_: str = "rag_experiments.data.beir.BeirDataset"
    split: str = "test"
    max_queries: int | None = None
    seed: int = 0


@option("dataset", "seed_json")
@dataclass
class SeedJsonDatasetConf(RowFileDatasetConf):
    _target_: str = "rag_experiments.data.peer.SeedJsonDataset"


@option("dataset", "keywords_jsonl")
@dataclass
class KeywordsJsonlDatasetConf(RowFileDatasetConf):
    _target_: str = "rag_experiments.data.peer.KeywordsJsonlDataset"


@option("dataset", "ragas")
@dataclass
class RagasDatasetConf(RowFileDatasetConf):
    _target_: str = "rag_experiments.data.peer.RagasDataset"


@option("dataset", "deepeval")
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
@option(
    "target",
    "baseline",
    built=("chunker", "embedder", "retriever", "index", "generator", "generate", "reranker"),
    consumed=("hnsw",),
    own_defaults=("system_prompt",),
)
@dataclass
class BaselineTargetConf(ComponentConf):
    """The built-in baseline: chunker → embedder → Chroma → top-k → generator (``llm``)."""

    _target_: str = "rag_experiments.targets.baseline.BaselineTarget"
    embed_title: bool = True
    """Embed ``title + ' ' + text`` when a document has a title (as BEIR/MTEB do)."""
    hnsw: HnswConf = field(default_factory=lambda: HnswConf())
    system_prompt: str = (
        "You answer questions using only the numbered context passages. "
        "If the passages do not contain the answer, reply exactly: I don't know."
    )
    truncate_contexts: bool = False
    """True = trim contexts to fit the generator's window (row flagged) instead of failing it."""
    cite: bool = False
    """True = ask the generator to cite passages as ``[k]`` after each sentence
    (``metrics=citations`` scores them)."""


@dataclass
class HttpResponseConf:
    """JMESPath mapping of an endpoint's JSON (see ``rag_experiments.targets.response_mapping``).
    ``null`` = not mapped; ``required`` fields must be found on every answer (a missing one
    fails the row as ``mapping_empty``). ``contexts`` is a list of strings or of objects
    (``context_text``, ``context_id``, ``context_doc_id`` inside each); ``context_ids`` and
    ``doc_ids`` are separate ranked lists. ``citations`` (not mapped by default) is a list of
    objects (``citation_statement`` and ``citation_chunk_id`` / ``citation_doc_id`` /
    ``citation_text`` inside each) that ``metrics=citations`` scores."""

    answer: str | None = "answer"
    contexts: str | None = "contexts"
    context_text: str = "text"
    context_id: str | None = "id"
    context_doc_id: str | None = "doc_id"
    context_ids: str | None = "context_ids"
    doc_ids: str | None = "doc_ids"
    required: list[str] = field(default_factory=lambda: ["answer", "contexts"])
    citations: str | None = None
    citation_statement: str = "statement"
    citation_chunk_id: str | None = "chunk_id"
    citation_doc_id: str | None = "doc_id"
    citation_text: str | None = "text"


@option("target", "http")
@dataclass
class HttpTargetConf(DocMatchConf, BackoffConf):
    """Any RAG service over HTTP (``rag_experiments.targets.http.HttpTarget``). ``body``: a JSON
    object (or a JSON string) with ``{user_input}``, ``{id}``, ``{question_type}``; null = the
    seed tool's ``{"question": "{user_input}"}``. ``method``: POST or PUT send a JSON body,
    GET sends it as query parameters. Header values may hold ``{env:NAME}`` (read from the
    environment, never logged); ``api_key_env`` / ``api_key`` add ``Authorization: Bearer <key>``.
    ``retries``: extra attempts on timeouts, connection errors and
    ``retry_statuses``. ``health_url``: checked once before the run. ``ca_bundle``: PEM file of
    an internal CA for https endpoints."""

    _target_: str = "rag_experiments.targets.http.HttpTarget"
    _convert_: str = "all"
    url: str = MISSING
    method: str = "POST"
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    response: HttpResponseConf = field(default_factory=lambda: HttpResponseConf())
    timeout_s: float = TARGET_RETRY.timeout_s
    """Per connect / per read, seconds."""
    retries: int = TARGET_RETRY.max_retries
    retry_statuses: list[int] = field(default_factory=lambda: [429, 500, 502, 503, 504])
    max_concurrency: int = 4
    """Requests in flight at once."""
    health_url: str | None = None
    verify_tls: bool = True
    ca_bundle: str | None = None
    api_key_env: str | None = None
    """Environment variable holding a key sent as ``Authorization: Bearer`` (prefer it)."""
    api_key: str | None = None
    """The key itself (redacted everywhere it would be written): prefer ``api_key_env``."""


@option("target", "recorded")
@dataclass
class RecordedTargetConf(DocMatchConf):
    """Answers read from the dataset rows (``rag_experiments.targets.recorded.RecordedTarget``)."""

    _target_: str = "rag_experiments.targets.recorded.RecordedTarget"


# --- chunker ---------------------------------------------------------------------------------
@option("chunker", "none")
@dataclass
class NoChunkerConf(ComponentConf):
    _target_: str = "rag_experiments.chunking.none.NoChunker"


@option("chunker", "fixed")
@dataclass
class FixedChunkerConf(ComponentConf):
    """Windows of ``size`` characters; neighbours share ``overlap`` characters."""

    _target_: str = "rag_experiments.chunking.fixed.FixedChunker"
    size: int = 512
    overlap: int = 64


@option("chunker", "semantic")
@dataclass
class SemanticChunkerConf(ComponentConf):
    """Paragraph- and heading-aware chunks of ``min_size`` to ``size`` characters."""

    _target_: str = "rag_experiments.chunking.semantic.SemanticChunker"
    size: int = 800
    min_size: int = 200


# --- embedder --------------------------------------------------------------------------------
@dataclass
class BatchEmbedderConf(ComponentConf):
    """Fields of every model embedder: texts per call and unit-length vectors."""

    batch_size: int = 32
    normalize: bool = True


@option("embedder", "sentence_transformers")
@dataclass
class SentenceTransformerEmbedderConf(BatchEmbedderConf):
    """A sentence-transformers model in-process. ``model``: ``minilm`` = the bundled
    all-MiniLM-L6-v2, or a local path."""

    _target_: str = "rag_experiments.embedding.sentence_transformers.SentenceTransformerEmbedder"
    model: str = "minilm"
    device: str = "cpu"
    max_seq_length: int | None = None
    show_progress: bool = True
    backend: str = "torch"  # torch | onnx | onnx-int8 (ONNX Runtime, exported once to cache_dir)
    cache_dir: str = "${paths.cache_dir}"


@option("embedder", "hash")
@dataclass
class HashEmbedderConf(ComponentConf):
    _target_: str = "rag_experiments.embedding.hash.HashEmbedder"
    dim: int = 256


@dataclass
class RemoteEmbedderConf(RemoteConf, BatchEmbedderConf):
    """Fields of every embedder served over HTTP. ``query_prefix`` / ``document_prefix`` are
    prepended to queries / documents (``search_query: `` for nomic-embed-text); ``dim``: the
    expected vector size (null = whatever the server returns)."""

    query_prefix: str = ""
    document_prefix: str = ""
    dim: int | None = None


@option("embedder", "ollama")
@dataclass
class OllamaEmbedderConf(OllamaServerConf, RemoteEmbedderConf):
    """Ollama ``/api/embed``; the id holds the model's digest."""

    _target_: str = "rag_experiments.embedding.ollama.OllamaEmbedder"
    model: str = "bge-m3"
    truncate: bool = True


@option("embedder", "openai")
@dataclass
class OpenAIEmbedderConf(OpenAIServerConf, RemoteEmbedderConf):
    """OpenAI-compatible ``/v1/embeddings``; ``dimensions`` is sent to models that can shorten
    their vectors."""

    _target_: str = "rag_experiments.embedding.openai_compat.OpenAICompatEmbedder"
    dimensions: int | None = None


# --- retriever -------------------------------------------------------------------------------
@option("retriever", "retriever")
@dataclass
class RetrieverConf(ComponentConf):
    """``top_k`` contexts go to the generator; retrieval metrics see a ranking ``depth`` deep
    (``null`` = the deepest cutoff of the retrieval metrics, at least ``top_k``)."""

    _target_: str = "rag_experiments.retrieval.retriever.Retriever"
    top_k: int = 5
    depth: int | None = None


@dataclass
class Bm25Conf:
    """BM25 analysis and scoring (defaults: Pyserini's BEIR "flat" settings, those of
    :class:`~rag_experiments.index.bm25_params.Bm25Params`)."""

    k1: float = Bm25Params.k1
    b: float = Bm25Params.b
    method: str = Bm25Params.method
    """bm25s variant: lucene | robertson | atire | bm25l | bm25+."""
    delta: float = Bm25Params.delta
    """δ of bm25l and bm25+."""
    stemmer: str | None = Bm25Params.stemmer
    """PyStemmer algorithm: porter (Lucene's PorterStemFilter), english (Snowball) …, or null."""
    stopwords: str | None = Bm25Params.stopwords
    """en (Lucene's 33 English stop words) or null."""
    language: str = Bm25Params.language
    """auto (CJK runs as Lucene's CJKAnalyzer bigrams, other text as en) | en | cjk."""
    index_title: bool = INDEX_TITLE
    """Index ``title + ' ' + text`` (Anserini's BEIR "flat" index)."""
    index_dir: str = "${paths.bm25_dir}"


@option("retriever", "bm25")
@dataclass
class Bm25RetrieverConf(Bm25Conf, RetrieverConf):
    """BM25 over the chunks (``bm25s``); the index is cached in ``paths.bm25_dir``."""

    _target_: str = "rag_experiments.retrieval.bm25.Bm25Retriever"


@option("retriever", "hybrid")
@dataclass
class HybridRetrieverConf(RetrieverConf):
    """Dense and BM25 rankings fused: ``fusion=rrf`` (``Σ 1/(k + rank)``) or ``convex``
    (``alpha·dense + (1−alpha)·bm25`` of ``norm``-normalised scores)."""

    _target_: str = "rag_experiments.retrieval.hybrid.HybridRetriever"
    fusion: str = "rrf"
    """rrf | convex."""
    k: float = 60.0
    """RRF constant (> 0); fusion=rrf only."""
    alpha: float = 0.5
    """Weight of the dense scores, in [0, 1]; fusion=convex only."""
    norm: str = "minmax"
    """minmax | zscore; fusion=convex only."""
    dense_depth: int = 100
    bm25_depth: int = 100
    bm25: Bm25Conf = field(default_factory=lambda: Bm25Conf())


# --- reranker --------------------------------------------------------------------------------
@dataclass
class RerankerConf(ComponentConf):
    """Fields of every reranker: ``candidates`` = how many of the retriever's hits are
    re-scored (separate from ``retriever.top_k``, the contexts the generator gets)."""

    candidates: int = 20


@option("reranker", "fake")
@dataclass
class FakeRerankerConf(RerankerConf):
    """Deterministic reranker: the share of the question's words each document holds."""

    _target_: str = "rag_experiments.retrieval.rerank.FakeReranker"


@dataclass
class RerankRequestConf:
    """JSON field names of a rerank request (null = not sent); ``extra``: more fields sent
    as they are (``{truncate: true}`` for TEI)."""

    query: str = "query"
    documents: str = "documents"
    model: str | None = "model"
    top_n: str | None = "top_n"
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RerankResponseConf:
    """JMESPath of a rerank answer: ``results`` = the list of items (on the whole answer;
    ``@`` when the answer is the list), ``index`` / ``score`` = each item's document index
    (null = items in the order sent) and score."""

    results: str = "results"
    index: str | None = "index"
    score: str = "relevance_score"


@option("reranker", "http")
@dataclass
class HttpRerankerConf(RerankerConf, BackoffConf):
    """A cross-encoder behind an HTTP rerank API (``rag_experiments.retrieval.rerank.
    HttpReranker``): llama.cpp's ``llama-server --reranking``, vLLM, Infinity (``POST
    /v1/rerank`` or ``/rerank`` with ``{model, query, documents, top_n}``), Hugging Face TEI
    (``reranker=http_tei``). ``top_n``: sent to the server, which returns only its best
    ``top_n`` (null = all scored); ``batch_size``: documents per request (null = all
    candidates at once); ``api_key_env`` / ``api_key`` add ``Authorization: Bearer <key>``.
    ``timeout_s``, ``max_retries``, ``backoff_s``, ``backoff_max_s``: as every HTTP call
    (timeouts, lost connections, HTTP 429/5xx retried; ``Retry-After`` honoured)."""

    _target_: str = "rag_experiments.retrieval.rerank.HttpReranker"
    _convert_: str = "all"
    url: str = "http://127.0.0.1:8080/v1/rerank"
    model: str | None = None
    top_n: int | None = None
    batch_size: int | None = None
    max_concurrency: int = 4
    """Requests in flight at once (fewer after HTTP 429/503)."""
    timeout_s: float = RetryPolicy.timeout_s
    """Per request, seconds."""
    max_retries: int = RetryPolicy.max_retries
    headers: dict[str, str] = field(default_factory=dict)
    api_key_env: str | None = None
    """Environment variable holding a key sent as ``Authorization: Bearer`` (prefer it)."""
    api_key: str | None = None
    """The key itself (redacted everywhere it would be written): prefer ``api_key_env``."""
    request: RerankRequestConf = field(default_factory=lambda: RerankRequestConf())
    response: RerankResponseConf = field(default_factory=lambda: RerankResponseConf())


# --- verifier --------------------------------------------------------------------------------
@option("verifier", "local")
@dataclass
class LocalVerifierConf(ComponentConf):
    """A sequence-classification model folder run in-process by ``transformers``
    (``rag_experiments.verifier.local.LocalVerifier``): an NLI cross-encoder, MiniCheck,
    HHEM-2.1-open (``trust_remote_code: true``, ``method: predict``). ``label``: the output
    that means "supported" (an index or a name; null = detected from ``config.id2label``;
    one-logit models: sigmoid). ``max_length``: tokens per (window, claim) pair (null = the
    model's); ``stride``: tokens shared by neighbouring windows of a long context. No model
    ships with the package (docs/how-to/verifiers.md)."""

    _target_: str = "rag_experiments.verifier.local.LocalVerifier"
    path: str = MISSING
    label: Any = None
    trust_remote_code: bool = False
    """Run the model code shipped in the folder (HHEM needs it); off unless you set it."""
    method: str = "logits"
    max_length: int | None = None
    stride: int = 64
    batch_size: int = 16
    device: str = "cpu"


@option("verifier", "tei")
@dataclass
class TeiVerifierConf(BackoffConf):
    """A classifier or cross-encoder behind Hugging Face Text Embeddings Inference
    (``rag_experiments.verifier.tei.TeiVerifier``): ``route`` ``predict`` (``POST /predict``,
    a sequence classifier: the ``label`` score) or ``rerank`` (``POST /rerank``, a one-logit
    cross-encoder). Contexts are cut into windows of ``window_words`` words sharing
    ``overlap_words``. ``timeout_s``, ``max_retries``, ``backoff_s``, ``backoff_max_s``: as
    every HTTP call."""

    _target_: str = "rag_experiments.verifier.tei.TeiVerifier"
    _convert_: str = "all"
    url: str = "http://127.0.0.1:8080"
    route: str = "predict"
    label: str | None = None
    window_words: int = 200
    overlap_words: int = 40
    batch_size: int = 32
    max_concurrency: int = 4
    truncate: bool = True
    timeout_s: float = RetryPolicy.timeout_s
    max_retries: int = RetryPolicy.max_retries
    headers: dict[str, str] = field(default_factory=dict)
    api_key_env: str | None = None
    api_key: str | None = None


# --- llm / judge -----------------------------------------------------------------------------
@dataclass
class GenerationConf(ComponentConf):
    """Fields of every real chat model: completion limit (tokens), temperature and seed."""

    max_tokens: int = 512
    temperature: float = 0.0
    seed: int = 0


@dataclass
class RemoteChatConf(RemoteConf, GenerationConf):
    """Fields of every chat model served over HTTP. ``parse_retries``: repair requests after a
    structured reply that does not validate."""

    parse_retries: int = 2
    max_concurrency: int = 8
    """The server's parallel slots: requests it computes at once (llama.cpp ``--parallel``,
    ``OLLAMA_NUM_PARALLEL``, vLLM ``--max-num-seqs``)."""
    in_flight: int | None = None
    """Requests the client keeps in flight (a request refused with 429/503 retried after its
    Retry-After); null = 2 x
    ``max_concurrency``: the extra ones wait in the server's queue, so no slot idles while the
    client turns a call round."""
    slot_affinity: bool = False
    """Compute-bound servers (llama.cpp): run each question's judge calls in sequence on one
    lane of ``max_concurrency`` lanes and send ``id_slot`` + ``cache_prompt``, so the server
    reuses the shared prompt prefix. Leave off for vLLM/SGLang (they share prefixes across
    slots themselves) and for throughput at many slots."""
    reasoning: str = "auto"
    """Reasoning ("thinking") models: ``auto`` (leave the server's default), ``off``, ``on``,
    ``low``, ``medium``, ``high``; sent as Ollama ``think`` or OpenAI-compatible
    ``chat_template_kwargs.enable_thinking`` / ``reasoning_effort``."""
    reasoning_budget: int | None = None
    """Tokens added to every call's ``max_tokens`` when reasoning is asked for (it covers
    reasoning + answer); null = 1024 (low), 2048 (on, medium), 4096 (high)."""


@option("llm", "embedded")
@dataclass
class EmbeddedLLMConf(GenerationConf):
    """llama-cpp-python in-process; ``model_path: null`` = the bundled SmolLM2-135M GGUF."""

    _target_: str = "rag_experiments.llm.embedded.EmbeddedChat"
    model_path: str | None = None
    n_ctx: int = 4096
    n_threads: int | None = None
    max_tokens: int = 256
    timeout_s: float = RetryPolicy.timeout_s
    """Wall clock of one call, seconds."""
    reasoning: str = "auto"
    """``auto`` or ``off`` only: the in-process model has no reasoning switch, so other levels
    are refused (serve a reasoning model with llm=ollama / llm=openai)."""


@option("llm", "fake")
@dataclass
class FakeLLMConf(ComponentConf):
    """Deterministic fake model (tests, dry runs): no model call."""

    _target_: str = "rag_experiments.llm.fake.FakeChat"
    responses: dict[str, Any] = field(default_factory=dict)
    text: str | None = None
    delay_s: float = 0.0
    jitter_s: float = 0.0  # extra delay in [0, jitter_s), fixed per prompt (concurrency tests)
    max_concurrency: int = 4
    model: str = "fake-chat"
    extractive: bool = False  # answer unscripted question schemas from the prompt's passages
    fit_lengths: bool = False  # cycle/cut scripted lists to the schema's exact length
    noisy_marker: str | None = None  # prompts holding it get a seeded coin between scripts
    noisy_responses: dict[str, Any] = field(default_factory=dict)  # the coin's other script


@option("llm", "ollama")
@dataclass
class OllamaLLMConf(OllamaServerConf, RemoteChatConf):
    """Ollama's native ``/api/chat``; ``max_tokens`` is sent as ``num_predict`` and ``num_ctx``
    with every request (Ollama's own default window is small and it silently cuts longer
    prompts). ``options``: further Ollama model options."""

    _target_: str = "rag_experiments.llm.ollama.OllamaChat"
    model: str = "llama3.1:8b"
    num_ctx: int = 8192
    options: dict[str, Any] = field(default_factory=dict)


@option("llm", "openai")
@dataclass
class OpenAILLMConf(OpenAIServerConf, RemoteChatConf):
    """OpenAI-compatible ``/v1/chat/completions`` (vLLM, llama.cpp server, LM Studio).
    ``context_window`` (tokens): set it to refuse over-long prompts before the call."""

    _target_: str = "rag_experiments.llm.openai_compat.OpenAICompatChat"
    context_window: int | None = None
    reasoning_style: str = "both"
    """Fields that carry ``reasoning``: ``both`` (``chat_template_kwargs.enable_thinking`` and,
    for a level, ``reasoning_effort``), ``kwargs`` (the former only), ``effort`` (the latter
    only; gpt-oss)."""


@dataclass
class CacheConf:
    """The LLM response cache (file: ``paths.llm_cache``). ``mode``: ``read_write`` (look up,
    store new answers), ``read_only`` (look up only) or ``off``."""

    mode: str = "read_write"


@dataclass
class JudgeRoleConf:
    """Keys of every judge option that configure the judge's role, not the chat model
    (:data:`~rag_experiments.llm.roles.JUDGE_ONLY_KEYS`).

    ``require_distinct: true`` refuses a run whose judge is the generator's model (otherwise it
    only warns). ``min_kappa``: below this faithfulness kappa of the judge's latest
    qualification (``rag-exp judge-check``) a run warns; ``require_qualified: true`` refuses a
    run whose judge has no qualification or one below ``min_kappa``
    (:mod:`rag_experiments.qualify.registry`).

    ``repeats``: judge every (row, metric) this many times and keep the mean; ``vary``: what
    changes between repeats (``seed``, ``context_order`` or ``temperature``, which samples
    repeats 1.. at ``vary_temperature``); with ``repeats > 1`` a run logs
    ``<metric>.judge_sd`` and ``<metric>.flip_rate`` and the per-query column ``<metric>.sd``
    (:mod:`rag_experiments.metrics.repeats`)."""

    require_distinct: bool = False
    min_kappa: float = 0.4
    require_qualified: bool = False
    repeats: int = 1
    vary: str = "seed"
    vary_temperature: float = 0.7


# --- metrics ---------------------------------------------------------------------------------
@option("metrics", "metrics")
@dataclass
class MetricsConf:
    """A metric set. ``suite`` maps a short key to one metric component (each with a
    ``_target_``); every entry is instantiated. ``generate: false`` skips answer generation
    (retrieval-only)."""

    name: str = MISSING
    generate: bool = True
    suite: dict[str, Any] = field(default_factory=dict)


# --- tracking --------------------------------------------------------------------------------
@option("tracking", "mlflow", built=("run_name",))
@dataclass
class TrackingConf(ComponentConf):
    """MLflow location. ``uri``: ``sqlite:///mlruns.db`` (a file in the working directory) or
    ``http://127.0.0.1:5000`` (a tracking server)."""

    _target_: str = "rag_experiments.tracking.mlflow_tracker.MlflowTracker"
    uri: str = "sqlite:///mlruns.db"
    experiment: str = "rag-experiments"
    log_table: bool = True
    traces: bool = True
    """One MLflow trace per question with its assessments (:mod:`rag_experiments.tracking.
    traces`; needs a sqlite store or a server)."""
    metrics: str = "headline"
    """Run values logged as MLflow metrics: ``headline`` (key metrics with CI and n_valid,
    key metrics per question type, run counts; every value stays in ``average_results.csv``)
    or ``all`` (:mod:`rag_experiments.tracking.selection`)."""
    retry_s: float = 120.0
    """On a tracking server: longest wait, seconds, for a server that went away mid-run (its
    logging calls are retried with backoff meanwhile); past it the run is left resumable
    (:mod:`rag_experiments.tracking.resilience`). A server down at the start fails the
    preflight in seconds instead."""
    trace_assessments: str = "key"
    """Which values each trace carries as assessments: ``key`` (the key metrics of the
    console table, most important first) or ``all`` (also every LLM-judged metric); the
    per-query table keeps every value (:func:`rag_experiments.tracking.selection.
    assessed_columns`)."""


# --- gate ------------------------------------------------------------------------------------
@option("gate", "gate")
@dataclass
class GateConf:
    """The regression gate run at the end of ``rag-exp run`` (``gate=default``; rules and
    their statistics: :mod:`rag_experiments.analysis.gate`). The process exits 1 when a rule
    failed, 2 when the gate could not decide (after the run is logged)."""

    baseline: str | None = None
    """Run id or alias (``rag-exp promote``) of the baseline; needed by ``max_drop`` rules."""
    alpha: float = ALPHA
    """Family-wise error rate of the ``max_drop`` tests (Holm across the gated metrics)."""
    min_pairs: int = MIN_PAIRS
    """Fewest paired rows (rows with a value) a rule decides on; fewer: undecided."""
    seed: int = SEED
    n_resamples: int = N_RESAMPLES
    rules: dict[str, Any] = field(default_factory=dict)
    """``{metric: {min, max, max_drop, by_type}}``."""
    junit: str | None = None
    """Write JUnit XML here (one testcase per rule)."""
    markdown: str | None = None
    """Append a Markdown summary here (e.g. the file $GITHUB_STEP_SUMMARY names)."""


# --- sharding --------------------------------------------------------------------------------
@dataclass
class ShardConf:
    """Evaluate one part of the samples (:mod:`rag_experiments.data.shard`): shard
    ``index`` of ``count`` by a hash of the sample id, after ``max_samples``; ``count: 1`` =
    all. ``rag-exp merge <parent run>`` joins a sweep over ``shard.index``."""

    count: int = 1
    index: int = 0


# --- calibration -----------------------------------------------------------------------------
@dataclass
class CalibrationConf:
    """Human labels that calibrate judged means (:mod:`rag_experiments.metrics.calibration`).
    ``labels``: a JSONL of ``{"id", "metric", "value"}`` or a filled ``rag-exp grade-sheet``
    CSV; each labeled metric gets ``<metric>.ppi`` with its CI beside the labels-only one.
    ``power_tuning: true`` uses PPI++'s data-chosen weight of the judge (never much worse than
    the labels alone)."""

    labels: str | None = None
    power_tuning: bool = False


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
    reranker: Any | None = None
    """The reranker of the baseline (``reranker=http``, ``fake``); null = none."""
    verifier: Any | None = None
    """The groundedness verifier of ``metrics=verifier`` (``verifier=local``, ``tei``);
    null = none."""
    llm: Any = MISSING
    judge: Any = MISSING
    metrics: Any = MISSING
    tracking: Any = MISSING
    experiment: Any | None = None
    gate: Any | None = None
    """The end-of-run regression gate (:class:`GateConf`), ``gate=default``; null = none."""
    seed: int = 0
    run_name: str | None = None
    """MLflow run name; null = ``<dataset>-<chunker>-<metrics>``, plus ``-<retriever>`` unless
    dense and ``-rerank-<reranker>`` unless none (a sweep's child: its swept values)."""
    max_failure_rate: float = 0.2
    progress: bool = True
    max_samples: int | None = None
    """Evaluate a seeded subset of this many samples in proportion to question type and
    answerability, at least one per type when it allows (``EvalDataset.subset``); null = all."""
    shard: ShardConf = field(default_factory=lambda: ShardConf())
    max_concurrency: int | None = None
    """Questions answered at once; null = what the target declares (its generator's
    ``max_concurrency`` for the baseline, ``target.max_concurrency`` for HTTP)."""
    cache: CacheConf = field(default_factory=lambda: CacheConf())
    resume: str | None = None
    """Continue an interrupted run: its MLflow run id or its job folder."""
    objective: str | None = None
    """Value returned to a sweeper: a metric (``nDCG@10``) or ``0.7*nDCG@10+0.3*faithfulness``."""
    calibration: CalibrationConf = field(default_factory=lambda: CalibrationConf())
    """Human labels for some rows: prediction-powered estimates of judged means."""


CHAT_MODELS: dict[str, type] = SCHEMAS["llm"]
"""Chat-model providers: option name → schema, the ``llm`` group of :data:`SCHEMAS` (the same
dict). Each gives ``/schema/llm/<name>`` and the derived ``/schema/judge/<name>``
(:func:`judge_schema`)."""


def judge_schema(chat: type) -> type:
    """The judge schema of chat-model schema ``chat``: its fields plus :class:`JudgeRoleConf`'s,
    named ``<Provider>JudgeConf`` (``OllamaLLMConf`` → ``OllamaJudgeConf``).

    The class is made once and kept as an attribute of this module, so configs typed with it
    pickle (multirun launchers send them to other processes).

    Args:
        chat: A dataclass of :data:`CHAT_MODELS`, named ``<Provider>LLMConf``.

    Returns:
        The judge dataclass.
    """
    name = chat.__name__.removesuffix("LLMConf") + "JudgeConf"
    made = globals().get(name)
    if made is None:
        made = make_dataclass(name, [], bases=(chat, JudgeRoleConf))
        made.__module__ = __name__
        made.__doc__ = f"{chat.__name__} as judge (role keys: :class:`JudgeRoleConf`)."
        globals()[name] = made
    return made


SCHEMAS["judge"] = {name: judge_schema(chat) for name, chat in CHAT_MODELS.items()}


def register_configs() -> None:
    """Store every schema in Hydra's ConfigStore (idempotent). Call before composing.

    The ``judge`` schemas are derived again from the ``llm`` schemas (:func:`judge_schema`), so
    a chat model declared after import (a plugin, a test) can serve as judge too.
    """
    SCHEMAS["judge"].update({name: judge_schema(chat) for name, chat in SCHEMAS["llm"].items()})
    cs = ConfigStore.instance()
    cs.store(name="root_schema", node=RootConf)
    for group, schemas in SCHEMAS.items():
        for name, node in schemas.items():
            cs.store(group=f"schema/{group}", name=name, node=node)
