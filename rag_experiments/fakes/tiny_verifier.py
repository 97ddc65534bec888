"""A tiny sequence-classification model folder with random weights, for tests, dry runs and
benchmarks of ``verifier=local`` / ``verifier=tei`` (no verifier model ships with the package).

:func:`make_tiny_verifier` writes what ``save_pretrained`` writes for a one-layer BERT
(hidden size 16, 512 positions) with a word-piece vocabulary of :data:`WORDS` and three NLI labels
(``contradiction``, ``entailment``, ``neutral``), or one logit. The weights are seeded and
drawn wide (``initializer_range`` 1.0) so the probabilities spread over [0, 1]; they mean
nothing: the model's scores check the plumbing (values equal to its own logits), never
groundedness.
"""

from __future__ import annotations

from pathlib import Path

WORDS = (
    "the a an is are was were of in on to and or not no yes it this that for with by as at "
    "from be has have had can will which who what when where how why capital city country "
    "paris france berlin germany rome italy madrid spain london england river sea mountain "
    "population million year founded king queen war river water sky blue green red color "
    "sun moon earth planet star light speed fast slow large small big old new first last "
    "one two three four five ten hundred thousand people language speaks spoken english "
    "french german answer question context document model data system retrieval chunk "
    "evaluation metric score faithful true false because also only more most less"
).split()
"""The vocabulary's words (lower case); any other word is ``[UNK]``."""

NLI_LABELS = {0: "contradiction", 1: "entailment", 2: "neutral"}
"""Labels of the three-way model (``entailment`` is the one that means supported)."""


def make_tiny_verifier(folder: str | Path, num_labels: int = 3, seed: int = 0) -> Path:
    """Write a tiny random BERT sequence classifier and its tokenizer to ``folder``.

    Args:
        folder: Where to write (created).
        num_labels: 3 (labels :data:`NLI_LABELS`) or 1 (one logit, read by a sigmoid).
        seed: Torch seed of the weights.

    Returns:
        The folder.
    """
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *".,;:!?'\"()-", *dict.fromkeys(WORDS)]
    vocab = {token: i for i, token in enumerate(tokens)}
    tokenizer = BertTokenizerFast(vocab=vocab, do_lower_case=True, model_max_length=512)
    labels = NLI_LABELS if num_labels == 3 else {0: "LABEL_0"}
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=512,
        num_labels=num_labels,
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
        initializer_range=1.0,
    )
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config)
    model.eval()
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out
