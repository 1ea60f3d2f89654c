"""Text-classification data for the mixture-of-prompts backend (``morl prompt``).

* :func:`generate_domain_flip` — a generated multi-domain sentiment task whose domains need
  different rules: the same attribute word is good in one domain and bad in another ("the
  battery lasts long" is positive, "the queue was long" is negative), and a third domain is
  labelled by explicit sentiment words. A single soft prompt with one linear head must learn a
  domain × attribute interaction from a mean-pooled embedding; a mixture whose prompts
  specialise per domain only needs the per-domain rule. Stored as code, never as a data file.
* :func:`load_text_file` — a user's JSONL or CSV with ``text`` and ``label`` columns.

Both return :class:`TextData`: split -> (texts, integer labels, domain ids or None).
"""

from __future__ import annotations

import csv
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

SPLITS = ("train", "val", "test")

# (subject phrases, attribute pairs (good, bad)). Domain 0 wants "more", domain 1 wants "less".
_MORE_SUBJECTS = [
    "the phone battery",
    "the warranty",
    "the coffee",
    "the soup",
    "the sound system",
    "the garden",
    "the fireworks show",
    "the tea",
    "the memory card",
    "the holiday",
]
_LESS_SUBJECTS = [
    "the queue",
    "the commute",
    "the beer",
    "the ice cream",
    "the library",
    "the bill",
    "the lecture",
    "the waiting time",
    "the salad",
    "the delay",
]
_ATTRIBUTES = [
    ("long", "short"),
    ("hot", "cold"),
    ("loud", "quiet"),
    ("big", "small"),
    ("strong", "weak"),
    ("large", "tiny"),
]
_EXPLICIT_SUBJECTS = [
    "the service",
    "the staff",
    "the film",
    "the hotel",
    "the food",
    "the app",
    "the concert",
    "the book",
    "the driver",
    "the course",
]
_EXPLICIT_WORDS = [
    ("great", "awful"),
    ("wonderful", "terrible"),
    ("excellent", "horrible"),
    ("lovely", "dreadful"),
    ("superb", "disappointing"),
    ("fantastic", "poor"),
]
_TEMPLATES = [
    "{s} was {a}.",
    "honestly, {s} is {a}.",
    "i think {s} was really {a}.",
    "{s} turned out {a} today.",
    "as expected {s} was quite {a}.",
    "my friend said {s} is {a}.",
]
DOMAIN_NAMES = ("more-is-better", "less-is-better", "explicit")


@dataclass
class TextData:
    """Texts and labels per split; ``domains`` holds generator domain ids (None for user files)."""

    texts: dict[str, list[str]]
    labels: dict[str, list[int]]
    label_names: list[str]
    domains: dict[str, list[int] | None] = field(default_factory=dict)
    domain_names: list[str] | None = None

    @property
    def num_classes(self) -> int:
        return len(self.label_names)


def _sentence(rng: random.Random, domain: int) -> tuple[str, int]:
    label = rng.randrange(2)  # 1 = positive
    template = rng.choice(_TEMPLATES)
    if domain == 2:
        good, bad = rng.choice(_EXPLICIT_WORDS)
        return template.format(s=rng.choice(_EXPLICIT_SUBJECTS), a=good if label else bad), label
    more, less = rng.choice(_ATTRIBUTES)
    subjects = _MORE_SUBJECTS if domain == 0 else _LESS_SUBJECTS
    wants_more = domain == 0
    word = more if (label == 1) == wants_more else less
    return template.format(s=rng.choice(subjects), a=word), label


def generate_domain_flip(
    train: int = 600,
    val: int = 300,
    test: int = 600,
    seed: int = 0,
    domain_weights: list[float] | None = None,
    label_noise: float = 0.0,
) -> TextData:
    """The generated three-domain sentiment task (see module docstring); deterministic in ``seed``."""
    sizes = {"train": train, "val": val, "test": test}
    for name, size in sizes.items():
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"{name} must be a positive integer number of sentences, got {size!r}")
    weights = list(domain_weights) if domain_weights is not None else [1.0, 1.0, 1.0]
    if len(weights) != 3 or min(weights) < 0 or sum(weights) <= 0:
        raise ValueError(f"domain_weights must be 3 non-negative numbers with a positive sum, got {domain_weights}")
    if not 0.0 <= label_noise < 0.5:
        raise ValueError(f"label_noise must be in [0, 0.5), got {label_noise}")
    rng = random.Random(seed)
    texts, labels, domains = {}, {}, {}
    for split in SPLITS:
        ds = rng.choices(range(3), weights=weights, k=sizes[split])
        pairs = [_sentence(rng, d) for d in ds]
        texts[split] = [t for t, _ in pairs]
        labels[split] = [y if rng.random() >= label_noise else 1 - y for _, y in pairs]
        domains[split] = list(ds)
    return TextData(texts, labels, ["negative", "positive"], domains, list(DOMAIN_NAMES))


def _read_rows(path: Path) -> list[dict]:
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        rows = []
        for k, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: line {k} is not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}: line {k} must be a JSON object with 'text' and 'label'")
            rows.append(row)
        return rows
    if suffix in (".csv", ".tsv"):
        with path.open(newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh, delimiter="\t" if suffix == ".tsv" else ","))
    raise ValueError(
        f"{path}: unsupported file type {suffix!r}; allowed: .jsonl, .json (one object per line), .csv, .tsv"
    )


def _read_split(path: str) -> tuple[list[str], list[str]]:
    if not isinstance(path, str):
        raise ValueError(f"data file options (train/val/test) must be file paths, got {path!r}")
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"data file {path!r} does not exist")
    rows = _read_rows(p)
    if not rows:
        raise ValueError(f"data file {path!r} has no rows")
    texts, labels = [], []
    for k, row in enumerate(rows, 1):
        if "text" not in row or "label" not in row:
            raise ValueError(
                f"data file {path!r}: row {k} lacks a 'text' or 'label' column (has: {', '.join(map(str, row))})"
            )
        if not isinstance(row["text"], str) or not row["text"].strip():
            raise ValueError(f"data file {path!r}: row {k} has an empty or non-string 'text'")
        texts.append(row["text"])
        labels.append(str(row["label"]).strip())
    return texts, labels


def load_text_file(
    train: str,
    test: str | None = None,
    val: str | None = None,
    val_fraction: float = 0.15,
    test_fraction: float = 0.15,
    seed: int = 0,
) -> TextData:
    """A user's JSONL/CSV (``text``, ``label`` columns). Splits missing as files are cut from ``train``.

    Labels may be strings or integers; they are mapped to ``0..C-1`` in sorted order (integers
    numerically). Every label of val/test must occur in train.
    """
    for name, frac in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0.0 < frac < 0.5:
            raise ValueError(f"{name} must be in (0, 0.5), got {frac}")
    raw = {"train": _read_split(train)}
    rng = random.Random(seed)
    order = list(range(len(raw["train"][0])))
    rng.shuffle(order)
    cut = {}
    for split, path, frac in (("test", test, test_fraction), ("val", val, val_fraction)):
        if path is not None:
            raw[split] = _read_split(path)
        else:
            k = max(int(round(frac * len(raw["train"][0]))), 1)
            cut[split], order = order[:k], order[k:]
    if len(order) < 2:
        raise ValueError(f"data file {train!r} has too few rows ({len(raw['train'][0])}) to split off val/test")
    tx, ty = raw["train"]
    for split, idx in cut.items():
        raw[split] = ([tx[i] for i in idx], [ty[i] for i in idx])
    raw["train"] = ([tx[i] for i in order], [ty[i] for i in order])
    names = sorted(set(raw["train"][1]), key=lambda s: (0, int(s)) if s.lstrip("-").isdigit() else (1, s))
    if len(names) < 2:
        raise ValueError(f"data file {train!r} has a single label {names[0]!r}; classification needs at least 2")
    index = {name: k for k, name in enumerate(names)}
    labels = {}
    for split in SPLITS:
        unknown = sorted(set(raw[split][1]) - set(index))
        if unknown:
            raise ValueError(
                f"{split} split has label(s) {', '.join(unknown[:5])} that do not occur in train ({', '.join(names)})"
            )
        labels[split] = [index[y] for y in raw[split][1]]
    return TextData({s: raw[s][0] for s in SPLITS}, labels, names, {s: None for s in SPLITS})


DATASETS = ("domain_flip", "file")


def load_text_data(name: str, **options) -> TextData:
    """``name="domain_flip"`` (generated; options of :func:`generate_domain_flip`) or ``"file"``."""
    if name == "domain_flip":
        return generate_domain_flip(**options)
    if name == "file":
        if "train" not in options:
            raise ValueError("data name 'file' needs options.train (a .jsonl or .csv path with text,label columns)")
        return load_text_file(**options)
    raise ValueError(f"unknown text dataset {name!r}; allowed: {', '.join(DATASETS)}")
