"""What the review page's generate form may ask for, and the ``generate`` config it becomes.

The form chooses the number of pairs, the question types and the model: one of the options of
``conf/llm/`` (``embedded``, ``fake``, ``ollama``, ``openai``) with its model name, base URL or
GGUF file. :func:`compose_generate_config` composes ``conf/generate.yaml`` with Hydra's compose
API, exactly as ``rag-exp generate`` does: first the command line's overrides (say
``embedder=hash``, or ``llm=ollama llm.num_ctx=16384``: ``llm=<option>`` on the command line
preselects that option, and a model key composes with its own option only), then the form's
group choice ``llm=<option>`` (the judge follows: ``judge=<option>``, unless the command line
chose one). The form's free-text
values (model, URL, path) are then set on the composed config as plain data, never parsed as
override syntax, and the workspace decides ``docs`` and ``out``.

``llm=fake`` in the review app is the fake in extractive mode (pairs taken from the uploaded
text), with a fake judge that finds every unanswerable question unanswered: a dry run of the
whole workflow without a model.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import DictConfig, open_dict
from omegaconf.errors import OmegaConfBaseException
from pydantic import BaseModel, ConfigDict, Field, field_validator

from rag_experiments.build import chat_class
from rag_experiments.config import register
from rag_experiments.errors import ConfigError, ReviewError
from rag_experiments.generate.config import GenerateConf
from rag_experiments.records import QUESTION_TYPES
from rag_experiments.review.workspace import Workspace

register()  # the schemas the form's compositions use

_HYDRA_LOCK = threading.Lock()
"""Hydra's compose API keeps global state: one composition at a time."""

_GROUP_CHOICE = re.compile(r"^(llm|judge)=([\w-]+)$")


def form_fields(node: Any) -> tuple[str, ...]:
    """The keys of chat-model config ``node`` that the form sets: what its class declares
    (``form_fields``: ``model``/``base_url`` for a server, ``model_path`` for the embedded
    model, none for the fake)."""
    return chat_class(node).form_fields


class GenerateRequest(BaseModel):
    """The generate form (``POST /generate``), validated.

    Attributes:
        n: Answerable pairs wanted, 1..1000.
        n_unanswerable: Unanswerable questions wanted, 0..200 (checked by the judge); the
            default is ``rag-exp generate``'s (:class:`~rag_experiments.generate.config.
            GenerateConf`).
        types: Question types, a non-empty subset of the 8 types.
        llm: An option of ``conf/llm/``.
        model: Model name (ollama, openai); required there (the page fills in the option's
            default; a blank one is refused by the model check, never silently replaced).
        base_url: Server URL (ollama, openai); required there, like ``model``.
        model_path: A GGUF file (embedded); blank = the bundled model.
        attempt_factor: Attempts per wanted pair, 1..10.
        start_over: Discard the earlier generation (and its cards) instead of resuming it.
    """

    model_config = ConfigDict(extra="forbid")

    n: int = Field(default=8, ge=1, le=1000)
    n_unanswerable: int = Field(default=GenerateConf.n_unanswerable, ge=0, le=200)
    types: list[str] = Field(default_factory=lambda: list(QUESTION_TYPES), min_length=1)
    llm: str = Field(default="embedded", pattern=r"^[\w-]+$", max_length=50)
    model: str = Field(default="", max_length=200)
    base_url: str = Field(default="", max_length=500)
    model_path: str = Field(default="", max_length=1000)
    attempt_factor: float = Field(default=2.0, ge=1.0, le=10.0)
    start_over: bool = False

    @field_validator("types")
    @classmethod
    def _known_types(cls, value: list[str]) -> list[str]:
        unknown = [t for t in value if t not in QUESTION_TYPES]
        if unknown or len(set(value)) != len(value):
            raise ValueError(
                f"types must be distinct names from {', '.join(QUESTION_TYPES)}; got {value}"
            )
        return value

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        value = value.strip()
        if value and not re.match(r"^https?://[^\s/]+", value):
            raise ValueError("must be an http:// or https:// URL")
        return value


@dataclass
class GenerationOptions:
    """The command line's part of every generation.

    Attributes:
        conf_dir: The Hydra config folder (``conf/``).
        overrides: Hydra overrides of ``conf/generate.yaml`` from the command line.
        default_llm: The option the form shows first (``llm=<option>`` on the command line,
            else ``conf/generate.yaml``'s default).
        judge: The judge option chosen on the command line, or None (the judge follows the
            form's model).
        llm_options: The options of ``conf/llm/``.
        defaults: Per option, the form's defaults (``model``, ``base_url``, ``model_path``).
    """

    conf_dir: Path
    overrides: list[str] = field(default_factory=list)
    default_llm: str = "embedded"
    judge: str | None = None
    llm_options: list[str] = field(default_factory=list)
    defaults: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def from_args(cls, conf_dir: Path, args: Sequence[str]) -> GenerationOptions:
        """Read the command line's overrides and compose once per model option.

        Args:
            conf_dir: The Hydra config folder.
            args: Hydra overrides (``llm=ollama``, ``embedder=hash`` …).

        Raises:
            ConfigError: An override does not compose with ``conf/generate.yaml``.
        """
        options = cls(conf_dir=Path(conf_dir))
        for arg in args:
            choice = _GROUP_CHOICE.match(arg)
            if choice and choice.group(1) == "llm":
                options.default_llm = choice.group(2)
            elif choice:
                options.judge = choice.group(2)
            else:
                options.overrides.append(arg)
        options.llm_options = sorted(p.stem for p in (options.conf_dir / "llm").glob("*.yaml"))
        if options.default_llm not in options.llm_options:
            raise ConfigError(
                f"llm={options.default_llm} is not one of "
                f"{', '.join(options.llm_options)} (conf/llm/)"
            )
        for name in options.llm_options:
            try:
                node = options.compose(name).llm
            except ReviewError as exc:
                if name == options.default_llm:
                    raise ConfigError(str(exc)) from None
                node = options.compose(name, with_overrides=False).llm
            options.defaults[name] = {k: str(node.get(k) or "") for k in form_fields(node)}
        return options

    def compose(self, llm: str, *, with_overrides: bool = True) -> DictConfig:
        """``conf/generate.yaml`` with the command line's overrides and ``llm=<llm>``.

        Raises:
            ReviewError: The option is unknown or the composition fails (400).
        """
        if llm not in self.llm_options and self.llm_options:
            raise ReviewError(f"llm={llm!r} is not one of {', '.join(self.llm_options)}")
        import rag_experiments.generate.app  # noqa: F401  (registers generate_schema)

        overrides = [
            *(self.overrides if with_overrides else []),
            f"llm={llm}",
            f"judge={self.judge or llm}",
        ]
        with _HYDRA_LOCK:
            GlobalHydra.instance().clear()
            try:
                with initialize_config_dir(config_dir=str(self.conf_dir), version_base="1.3"):
                    return compose(config_name="generate", overrides=overrides)
            except (HydraException, OmegaConfBaseException, ValueError) as exc:
                raise ReviewError(
                    f"conf/generate.yaml does not compose with {' '.join(overrides)}: "
                    f"{str(exc).splitlines()[0].rstrip('.')}. Fix the command-line overrides "
                    "of rag-exp review (model keys such as llm.num_ctx=… need the matching "
                    "llm=<option> too)"
                ) from exc
            finally:
                GlobalHydra.instance().clear()


def compose_generate_config(
    request: GenerateRequest, options: GenerationOptions, workspace: Workspace
) -> DictConfig:
    """The ``generate`` config of one form submission (see the module docstring).

    Args:
        request: The validated form.
        options: The command line's part.
        workspace: Decides ``docs`` (the uploads) and ``out`` (the generation folder).

    Returns:
        The composed config, ready for :func:`~rag_experiments.generate.app.run_generate`.

    Raises:
        ReviewError: Unknown model option or a failed composition (400).
    """
    cfg = options.compose(request.llm)
    form = {
        "model": request.model.strip(),
        "base_url": request.base_url.strip(),
        "model_path": request.model_path.strip() or None,
    }
    for key in form_fields(cfg.llm):
        cfg.llm[key] = form[key]  # a blank model or URL is refused by the model check
    if (options.judge or request.llm) == request.llm:  # the judge is the same kind of model
        for key in form_fields(cfg.judge):
            cfg.judge[key] = cfg.llm[key]
    if chat_class(cfg.llm).scripted:
        cfg.llm.extractive = True
    if chat_class(cfg.judge).scripted and "AnswerCheck" not in cfg.judge.responses:
        with open_dict(cfg.judge.responses):
            cfg.judge.responses["AnswerCheck"] = {"answered": False}
    cfg.docs = str(workspace.uploads_dir)
    cfg.out = str(workspace.generation_dir)
    cfg.n = request.n
    cfg.n_unanswerable = request.n_unanswerable
    cfg.types = list(request.types)
    cfg.attempt_factor = request.attempt_factor
    cfg.overwrite = request.start_over
    cfg.progress = False
    if not cfg.run_name:
        cfg.run_name = f"review-{workspace.root.name}"
    return cfg
