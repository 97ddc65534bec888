"""Verifier models for groundedness: a sequence-classification (NLI / fact-checking) or
cross-encoder model that gives the probability that a premise supports a hypothesis
(:class:`~rag_experiments.protocols.Verifier`).

- :mod:`~rag_experiments.verifier.base`: :class:`~rag_experiments.verifier.base.VerifierBase`
  (declarations and defaults), the "supported" label's detection from ``config.id2label``,
  logits → probability, word windows;
- :mod:`~rag_experiments.verifier.local`: a model folder run in-process by ``transformers``
  (``verifier=local``);
- :mod:`~rag_experiments.verifier.tei`: a Text Embeddings Inference server, ``/predict`` or
  ``/rerank`` (``verifier=tei``);
- :mod:`~rag_experiments.verifier.cache`: the response cache and usage meter around any of them.

No verifier model ships with the package (docs: how-to/verifiers.md).
"""
