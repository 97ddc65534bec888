"""ONNX Runtime inference for the transformer of a local sentence-transformers model.

sentence-transformers runs ONNX models through ``SentenceTransformer(..., backend="onnx")``,
which needs ``optimum-onnx``; no release of it installs beside the transformers 5.x that
sentence-transformers 6 requires (optimum-onnx 0.1.0 pins ``transformers<4.58``). So the
export and the session are done here with the two pieces that do install: PyTorch's own ONNX
exporter (``torch.onnx.export``, TorchScript tracing) and ``onnxruntime`` (with its dynamic
quantiser for int8). Everything else stays sentence-transformers': tokenisation, prompts,
truncation, length-sorted batching, pooling and normalisation run unchanged, because only
the Hugging Face model inside the first module (``Transformer.model``) is replaced by
:class:`OrtTransformer`, the same place where sentence-transformers puts optimum's
``ORTModelForFeatureExtraction``.

An export is made once per model (by content) and kept under ``<cache_dir>/onnx/``::

    <cache_dir>/onnx/<name>-<config hash>-<weights hash>/model.onnx        (float32)
    <cache_dir>/onnx/<name>-<config hash>-<weights hash>/model_qint8.onnx  (dynamic int8)

Files are written under a temporary name and renamed into place, so parallel jobs (a sweep)
that export at once never read a half-written file.
"""

from __future__ import annotations

import hashlib
import logging
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rag_experiments.errors import ConfigError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger(__name__)

BACKENDS: tuple[str, ...] = ("torch", "onnx", "onnx-int8")
"""Values of ``embedder.backend``: PyTorch, ONNX Runtime float32, ONNX Runtime dynamic int8."""

ONNX_FILES: dict[str, str] = {"onnx": "model.onnx", "onnx-int8": "model_qint8.onnx"}
"""File of each ONNX backend inside the export folder."""

MODEL_INPUTS: tuple[str, ...] = ("input_ids", "attention_mask", "token_type_ids")
"""Tokeniser outputs the exported graph takes (those the model's tokeniser produces)."""

OPSET = 17
"""ONNX opset of the export (supported by onnxruntime >= 1.14)."""

_WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")


def check_backend(backend: str) -> str:
    """Return ``backend`` if it is one of :data:`BACKENDS`.

    Raises:
        ConfigError: Any other value; the message lists the allowed ones.
    """
    if backend not in BACKENDS:
        raise ConfigError(
            f"embedder.backend={backend!r} is not supported; use one of {', '.join(BACKENDS)} "
            "(torch = PyTorch, onnx = ONNX Runtime float32, onnx-int8 = ONNX Runtime with "
            "dynamically quantised int8 weights)."
        )
    return backend


def weights_digest(folder: Path) -> str:
    """First 8 hex digits of SHA-256 over the weight files in ``folder`` (``*.safetensors``,
    ``pytorch_model*.bin``; name and content), so two models that share a config never share
    an export. Reads the weights once (about 0.2 s for MiniLM's 90 MB)."""
    h = hashlib.sha256()
    files = sorted({f for pattern in _WEIGHT_PATTERNS for f in folder.glob(pattern)})
    for f in files:
        h.update(f.name.encode() + b"\x00")
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:8]


def _write_atomically(target: Path, write: Any) -> None:
    """Call ``write(tmp_path)`` then rename the result to ``target`` (same folder)."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _export_float32(model: SentenceTransformer, target: Path) -> None:
    """Trace ``model``'s transformer to ONNX: inputs :data:`MODEL_INPUTS` (int64
    ``(batch, seq)``), output ``last_hidden_state`` float32 ``(batch, seq, hidden)``, both axes
    dynamic."""
    import torch

    features = model.preprocess(["an export example", "a second, longer export example text"])
    names = [k for k in MODEL_INPUTS if k in features]
    hf_model = model[0].model.eval()

    class _LastHiddenState(torch.nn.Module):
        """Positional inputs in ``names`` order -> the last hidden state tensor."""

        def __init__(self) -> None:
            super().__init__()
            self.inner = hf_model

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return self.inner(
                **dict(zip(names, inputs, strict=True)), return_dict=True
            ).last_hidden_state

    dynamic = {k: {0: "batch", 1: "sequence"} for k in [*names, "last_hidden_state"]}

    def write(path: Path) -> None:
        # The tracer warns about Python branches on shapes (constant for an encoder) and that
        # it is the legacy exporter; neither changes the graph, and the user can do nothing.
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                _LastHiddenState(),
                tuple(features[k] for k in names),
                str(path),
                input_names=names,
                output_names=["last_hidden_state"],
                dynamic_axes=dynamic,
                opset_version=OPSET,
                dynamo=False,
            )

    _write_atomically(target, write)


def _quantize_int8(source: Path, target: Path) -> None:
    """Dynamic int8 quantisation of ``source`` with onnxruntime's quantiser: int8 weights per
    output channel, 7-bit range (``reduce_range``, safe on CPUs without VNNI), activations
    quantised at run time (Jacob et al. 2018, *Quantization and Training of Neural Networks
    for Efficient Integer-Arithmetic-Only Inference*)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _quiet_root_logger():
        _write_atomically(
            target,
            lambda path: quantize_dynamic(
                str(source),
                str(path),
                weight_type=QuantType.QInt8,
                per_channel=True,
                reduce_range=True,
            ),
        )


@contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """Raise the root logger to WARNING for the duration (onnxruntime's quantiser logs a line
    per tensor at INFO through the root logger)."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        root.setLevel(level)


def export_folder(cache_dir: str | Path, name: str, config_hash: str, model_folder: Path) -> Path:
    """The export folder of a model: ``<cache_dir>/onnx/<name>-<config hash>-<weights hash>``."""
    return Path(cache_dir) / "onnx" / f"{name}-{config_hash}-{weights_digest(model_folder)}"


def ensure_export(model: SentenceTransformer, folder: Path, backend: str) -> tuple[Path, bool]:
    """Export (and for ``onnx-int8`` quantise) ``model`` into ``folder`` unless already there.

    Args:
        model: The torch-backed model to export (its first module must be a
            sentence-transformers ``Transformer``).
        folder: The export folder (:func:`export_folder`); created if needed.
        backend: ``"onnx"`` or ``"onnx-int8"``.

    Returns:
        ``(path of the ONNX file, True if it was written by this call)``.

    Raises:
        ConfigError: The folder is not writable, or the export failed.
    """
    target = folder / ONNX_FILES[backend]
    if target.is_file():
        return target, False
    float32 = folder / ONNX_FILES["onnx"]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not float32.is_file():
            log.info("Exporting the embedding model to ONNX (once) at %s", float32)
            _export_float32(model, float32)
        if backend == "onnx-int8":
            log.info("Quantising the ONNX embedding model to int8 (once) at %s", target)
            _quantize_int8(float32, target)
    except (OSError, RuntimeError, ValueError) as exc:
        raise ConfigError(
            f"Cannot export the embedding model to {target}: {exc}. Set paths.cache_dir to a "
            "writable folder, or use embedder.backend=torch."
        ) from exc
    return target, True


class OrtTransformer:
    """An ONNX Runtime session that stands in for the Hugging Face model inside a
    sentence-transformers ``Transformer`` module (its ``model`` attribute).

    Called as the Hugging Face model is: keyword tensors in, an object with
    ``last_hidden_state`` out. Runs on CPU (``CPUExecutionProvider``) with onnxruntime's
    default thread count (one per core).

    Args:
        path: The ONNX file (from :func:`ensure_export`).
        config: The Hugging Face config of the replaced model (sentence-transformers reads it,
            e.g. for the embedding dimension).

    Raises:
        ConfigError: onnxruntime cannot load the file (delete it: it is re-exported).
    """

    def __init__(self, path: Path, config: Any) -> None:
        import onnxruntime as ort
        import torch

        try:
            self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own non-exported exception types
            raise ConfigError(
                f"onnxruntime cannot load {path}: {exc}. Delete the file; the next run exports "
                "it again."
            ) from exc
        self.config = config
        self.device = torch.device("cpu")
        self.inputs = [i.name for i in self.session.get_inputs()]

    def forward(self, **features: Any) -> dict[str, Any]:
        """Run the session.

        Args:
            **features: Tokeniser outputs (torch int64 ``(batch, seq)``); keys the graph does
                not take (and sentence-transformers' bookkeeping) are ignored.

        Returns:
            ``{"last_hidden_state": float32 tensor (batch, seq, hidden)}``.
        """
        import torch

        feeds = {k: np.asarray(features[k].cpu().numpy(), dtype=np.int64) for k in self.inputs}
        (hidden,) = self.session.run(["last_hidden_state"], feeds)
        return {"last_hidden_state": torch.from_numpy(hidden)}

    __call__ = forward
