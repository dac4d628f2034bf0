"""NLI pairs labelled by the synthetic world, for a trained StepGap stage D (docs/architecture.md "World NLI pairs";
issue 29 part 4).

Stage D of the StepGap verifier asks an NLI model whether a verbatim quote of the evidence (5-20 words, one of
`procrl.rewards.stepgap.quotes.quote_candidates`) entails the step's claim; stage E whether whole passages
("title: text", `passages_text`) do. Here the premises are made the same way from a generated world's corpus, the
hypotheses are claims as steps phrase them ("The place of birth of X is Y.", "X was born in Y."), and the world
gives the label, since it knows which facts each passage sentence states. Every relation of the world is
single-valued (one object per subject and relation), so "X was born in Y'" entails "X was not born in Y".

Pair kinds (`PAIR_KINDS`: kind -> label; premise / hypothesis):

    entail             states (s, r, v)                      / (s, r, v)              entailment
    contradict         states (s, r, v')                     / (s, r, v), v != v'     contradiction
    other_relation     about s, states no (s, r, .)          / (s, r, v)              neutral
    namesake           states (s', r, v), s' a near-namesake / (s, r, v)              neutral
                       of s, named in full
    neg_claim_true     states (s, r, v)                      / not (s, r, v)          contradiction
    neg_claim_other    states (s, r, v')                     / not (s, r, v)          entailment
    neg_premise_same   not (s, r, v)                         / (s, r, v)              contradiction
    neg_premise_other  not (s, r, v')                        / (s, r, v)              neutral
    neg_both           not (s, r, v)                         / not (s, r, v)          entailment

A premise that states something is a quote candidate of a corpus passage that contains whole every sentence of a
fact whose name it shows (so a quote cut inside a fact's sentence is never used), or, for stage E (`stage_e_share`),
the passage as "title: text". Negated premises are synthesised (`NEGATED_TEMPLATES`), alone or followed by a quote
about s that states no (s, r, .). The kinds starting with "neg_" are the negation subset: a sentence and its
negation are close in a sentence embedding, so a cosine model cannot tell them apart.

Rows: {id, premise, hypothesis, label, kind, stage ("D" | "E"), negation, subject, relation, split}. Pairs are a
pure function of (the split's corpus, config); (premise, hypothesis) pairs are unique; the splits of a world share
no name (`procrl.data_builders.synthetic_world.split_of_name`), so the test pairs are about held-out worlds.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from procrl.data_builders.synthetic_world import SPLITS, build_worlds, world_paths
from procrl.data_builders.synthetic_world import SyntheticWorldConfig as _WorldConfig
from procrl.data_builders.synthetic_world_wording import WORLD_RELATIONS
from procrl.retrieval import read_jsonl
from procrl.rewards.stepgap.oracle_world import oracle_key
from procrl.rewards.stepgap.quotes import quote_candidates, sentence_spans
from procrl.rewards.stepgap.trace import Passage
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = [
    "CLAIM_TEMPLATES",
    "NEGATED_TEMPLATES",
    "NLI_PAIRS_FILE",
    "PAIR_KINDS",
    "WorldNLIConfig",
    "build_nli_pairs",
    "load_corpus_rows",
    "nli_pair_splits",
    "write_nli_pairs",
]

NLI_PAIRS_FILE = "nli.jsonl"
PAIR_KINDS: dict[str, str] = {
    "entail": "entailment",
    "contradict": "contradiction",
    "other_relation": "neutral",
    "namesake": "neutral",
    "neg_claim_true": "contradiction",
    "neg_claim_other": "entailment",
    "neg_premise_same": "contradiction",
    "neg_premise_other": "neutral",
    "neg_both": "entailment",
}
# default weights: about a third of the pairs per label (a namesake or other-relation premise is not always there),
# the negation kinds about a third
_DEFAULT_WEIGHTS = {"entail": 3, "contradict": 3, "other_relation": 2.5, "namesake": 3, "neg_claim_true": 1,
                    "neg_claim_other": 1, "neg_premise_same": 1, "neg_premise_other": 1, "neg_both": 1}  # fmt: skip
_E_KINDS = ("entail", "contradict", "namesake", "neg_claim_true", "neg_claim_other")  # kinds with a stage-E form

# how a step claims (s, r, o): {s} subject, {o} object (the annotated set's "The {r} of {s} is {o}." first)
CLAIM_TEMPLATES: dict[str, tuple[str, ...]] = {
    "author": ("The author of {s} is {o}.", "{s} was written by {o}.", "{o} is the author of {s}."),
    "place of birth": ("The place of birth of {s} is {o}.", "{s} was born in {o}.", "{o} is the birthplace of {s}."),
    "year of birth": ("The year of birth of {s} is {o}.", "{s} was born in {o}.", "{s} was born in the year {o}."),
    "employer": ("The employer of {s} is the {o}.", "{s} worked for the {o}.", "{s} was employed by the {o}."),
    "headquarters location": (
        "The headquarters location of the {s} is {o}.",
        "The {s} is based in {o}.",
        "The headquarters of the {s} are in {o}.",
    ),
    "country": ("The country of {s} is {o}.", "{s} is in {o}.", "{s} is a city in {o}."),
}
# the negation of (s, r, o): negated claims and negated premises
NEGATED_TEMPLATES: dict[str, tuple[str, ...]] = {
    "author": ("{s} was not written by {o}.", "{o} is not the author of {s}.", "{o} did not write {s}."),
    "place of birth": ("{s} was not born in {o}.", "{o} is not the birthplace of {s}.", "{s} was never born in {o}."),
    "year of birth": ("{s} was not born in {o}.", "The year of birth of {s} is not {o}."),
    "employer": ("{s} did not work for the {o}.", "{s} was never employed by the {o}.", "The {o} did not employ {s}."),
    "headquarters location": ("The {s} is not based in {o}.", "The headquarters of the {s} are not in {o}."),
    "country": ("{s} is not in {o}.", "{s} is not a city in {o}.", "{s} does not lie in {o}."),
}


@dataclass
class WorldNLIConfig:
    """How many pairs `build_nli_pairs` makes per split, and their mix (module docstring)."""

    n_train: int = field(default=12000, metadata={"help": "pairs of the train split (>= 1)"})
    n_dev: int = field(default=1500, metadata={"help": "pairs of the dev split (>= 1)"})
    n_test: int = field(default=3000, metadata={"help": "pairs of the test split (>= 1)"})
    pair_seed: int = field(default=0, metadata={"help": "seed of the pair sampler (the world has its own seed)"})
    stage_e_share: float = field(
        default=0.15,
        metadata={"help": "share of the pairs of kinds with a stage-E form whose premise is a whole passage"},
    )
    answer_suffix_share: float = field(
        default=0.2, metadata={"help": "share of affirmative claims written as a conclusion ('... The answer is Y.')"}
    )
    kind_weights: dict = field(
        default_factory=lambda: dict(_DEFAULT_WEIGHTS),
        metadata={"help": f"sampling weight of each pair kind, keys from {list(PAIR_KINDS)} (missing: 0)"},
    )

    def __post_init__(self) -> None:
        for name in ("n_train", "n_dev", "n_test"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 (pairs of that split), got {getattr(self, name)}")
        for name in ("stage_e_share", "answer_suffix_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        unknown = set(self.kind_weights) - set(PAIR_KINDS)
        if unknown or any(not isinstance(w, (int, float)) or w < 0 for w in self.kind_weights.values()):
            raise ValueError(f"kind_weights: keys from {list(PAIR_KINDS)} with weights >= 0, got {self.kind_weights}")
        if sum(self.kind_weights.values()) <= 0:
            raise ValueError("kind_weights: at least one kind needs a weight > 0")

    def n_pairs(self, split: str) -> int:
        return {"train": self.n_train, "dev": self.n_dev, "test": self.n_test}[split]


@dataclass
class _Quote:
    text: str
    title: str
    stated: frozenset  # facts (s, r, o) the quote states whole
    about: frozenset  # name keys the quote names (the title's subject by full or short form)


def _other(fact: Sequence[str], title: str) -> str:
    """The name in a passage's fact that is not the passage's own title (its object, or a reverse fact's subject)."""
    return fact[0] if oracle_key(fact[0]) != oracle_key(title) else fact[2]


def _has(text_key: str, name: str) -> bool:
    return f" {oracle_key(name)} " in f" {text_key} "


def _short(name: str, kind: str) -> str:
    return name.split()[-1] if kind == "person" else name


def _passage_quotes(row: dict) -> list[_Quote]:
    """The quote candidates of one passage that cut no fact sentence, with the facts each states whole."""
    text, title, facts = row["text"], row["title"], [tuple(f) for f in row["facts"]]
    sentences = [(s[0][0], s[-1][1]) for s in sentence_spans(text)]
    where: dict[tuple, tuple[int, int]] = {}
    for fact in facts:
        hits = [span for span in sentences if _has(oracle_key(text[span[0] : span[1]]), _other(fact, title))]
        if len(hits) == 1:
            where[fact] = hits[0]
    out = []
    for quote in quote_candidates([Passage(title, text)]):
        start = text.find(quote)  # a candidate is a substring of the text (quote_candidates)
        end = start + len(quote)
        key = oracle_key(quote)
        touched = {f for f in facts if _has(key, _other(f, title))}
        stated = {f for f, (a, b) in where.items() if start <= a and b <= end}
        if touched - stated or any(f not in where for f in touched):
            continue  # a fact's name in a cut sentence: what the quote states is unclear
        about = {oracle_key(title)} if _has(key, _short(title, row["kind"])) or _has(key, title) else set()
        out.append(_Quote(quote, title, frozenset(stated), frozenset(about)))
    return out


class _Sampler:
    """The facts, quotes and object pools of one split's corpus, and one builder per pair kind."""

    def __init__(self, corpus: list[dict], config: WorldNLIConfig, rng: random.Random):
        self.config, self.rng = config, rng
        self.rows = [r for r in corpus if r.get("kind") != "event" and r.get("facts") is not None]
        self.truth: dict[tuple[str, str], str] = {}
        self.pool: dict[str, list[str]] = {}
        for row in self.rows:
            self.pool.setdefault(row["kind"], []).append(row["title"])
            for s, r, o in row["facts"]:
                self.truth[s, r] = o
        self.pool["year"] = sorted({o for (_, r), o in self.truth.items() if r == "year of birth"})
        self.facts = sorted({(s, r, o) for (s, r), o in self.truth.items()})
        self.by_title = {row["title"]: row for row in self.rows}
        self.namesakes = {row["title"]: row["namesake_of"] for row in self.rows if row.get("namesake_of")}
        self.quotes: dict[tuple, list[_Quote]] = {}  # fact -> quotes stating it
        self.plain: dict[str, list[_Quote]] = {}  # subject key -> quotes about it (each with its stated facts)
        for row in self.rows:
            for quote in _passage_quotes(row):
                for fact in quote.stated:
                    self.quotes.setdefault(fact, []).append(quote)
                for key in quote.about:
                    self.plain.setdefault(key, []).append(quote)

    def other_value(self, subject: str, relation: str, avoid: str) -> str | None:
        kind = WORLD_RELATIONS[relation]["object"]
        choices = [v for v in self.pool.get(kind, []) if v != avoid]
        if relation == "year of birth":
            return str(int(avoid) + self.rng.choice((-1, 1)) * self.rng.randint(1, 40))
        return self.rng.choice(choices) if choices else None

    def claim(self, fact, negated: bool = False) -> str:
        s, r, o = fact
        templates = NEGATED_TEMPLATES if negated else CLAIM_TEMPLATES
        text = self.rng.choice(templates[r]).format(s=s, o=o)
        if not negated and self.rng.random() < self.config.answer_suffix_share:
            text += f" The answer is {o}."
        return text

    def stated(self, fact, stage_e: bool) -> tuple[str, str] | None:
        """A premise that states `fact`: (text, stage)."""
        if stage_e:
            row = self.by_title.get(fact[0])
            return (f"{row['title']}: {row['text']}", "E") if row else None
        quotes = self.quotes.get(tuple(fact))
        return (self.rng.choice(quotes).text, "D") if quotes else None

    def about_without(self, subject: str, relation: str) -> str | None:
        """A quote about `subject` that states no (subject, relation, .) fact."""
        key = oracle_key(subject)
        quotes = [q for q in self.plain.get(key, []) if not any(f[0] == subject and f[1] == relation for f in q.stated)]
        return self.rng.choice(quotes).text if quotes else None

    def negated_premise(self, fact) -> str:
        text = self.claim(fact, negated=True)
        extra = self.about_without(fact[0], fact[1]) if self.rng.random() < 0.5 else None
        return f"{text} {extra}" if extra else text

    def make(self, kind: str) -> dict | None:
        rng = self.rng
        fact = rng.choice(self.facts)
        s, r, v = fact
        if self.namesakes.get(s):  # claims are about the entities of the questions, never about a near-namesake
            return None
        stage_e = kind in _E_KINDS and rng.random() < self.config.stage_e_share
        wrong = self.other_value(s, r, v)
        if wrong is None:
            return None
        if kind in ("entail", "neg_claim_true", "contradict", "neg_claim_other"):
            premise = self.stated(fact, stage_e)
            if premise is None:
                return None
            if kind == "entail":
                hypothesis = self.claim(fact)
            elif kind == "neg_claim_true":
                hypothesis = self.claim(fact, negated=True)
            elif kind == "contradict":
                hypothesis = self.claim((s, r, wrong))
            else:
                hypothesis = self.claim((s, r, wrong), negated=True)
            text, stage = premise
        elif kind == "other_relation":
            text, stage = self.about_without(s, r), "D"
            hypothesis = self.claim((s, r, v if rng.random() < 0.5 else wrong))
        elif kind == "namesake":
            twins = [t for t, original in self.namesakes.items() if original == s and (t, r) in self.truth]
            if not twins:
                return None
            twin = rng.choice(twins)
            twin_fact = (twin, r, self.truth[twin, r])
            premise = self.stated(twin_fact, stage_e)
            if premise is None or (premise[1] == "D" and not _has(oracle_key(premise[0]), twin)):
                return None  # the quote must name the near-namesake in full, or the premise is ambiguous
            text, stage = premise
            hypothesis = self.claim((s, r, twin_fact[2] if rng.random() < 0.5 else v))
        else:  # negated premises
            negated = fact if kind in ("neg_premise_same", "neg_both") else (s, r, wrong)
            text, stage = self.negated_premise(negated), "D"
            hypothesis = self.claim(fact, negated=kind == "neg_both")
            for _ in range(8):  # neg_both: another wording than the premise's, not a copy
                if kind != "neg_both" or not text.startswith(hypothesis):
                    break
                hypothesis = self.claim(fact, negated=True)
        if not text:
            return None
        return {"premise": text, "hypothesis": hypothesis, "label": PAIR_KINDS[kind], "kind": kind, "stage": stage,
                "negation": kind.startswith("neg_"), "subject": s, "relation": r}  # fmt: skip


def build_nli_pairs(corpus: list[dict], split: str, config: WorldNLIConfig, *, seed_tag: str = "") -> list[dict]:
    """`config.n_pairs(split)` labelled pairs (module docstring) from one split's corpus rows (`facts`, `kind`,
    `namesake_of`: `procrl world build`'s corpus.jsonl).

    Raises:
        ValueError: an unknown split; corpus rows without `facts`; a corpus too small for that many unique pairs.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if any("facts" not in row for row in corpus):
        raise ValueError(
            "corpus rows need 'facts' (the triples each passage states): build the world with procrl world build"
        )
    rng = random.Random(f"procrl-world-nli:{config.pair_seed}:{seed_tag}:{split}")
    sampler = _Sampler(corpus, config, rng)
    kinds = [k for k in PAIR_KINDS if config.kind_weights.get(k, 0) > 0]
    weights = [config.kind_weights[k] for k in kinds]
    n = config.n_pairs(split)
    out: list[dict] = []
    seen: set[tuple[str, str]] = set()
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 50 * n + 1000:
            raise ValueError(f"build_nli_pairs: only {len(out)} unique pairs of {n} fit the {split} corpus; ask fewer")
        row = sampler.make(rng.choices(kinds, weights)[0])
        if row is None or (row["premise"], row["hypothesis"]) in seen:
            continue
        seen.add((row["premise"], row["hypothesis"]))
        out.append({"id": f"nli-{split}-{len(out):06d}", **row, "split": split})
    return out


def load_corpus_rows(world: str | Path, split: str) -> list[dict]:
    """The corpus rows of one split of a world written by `procrl world build` (`<world>/<split>/corpus.jsonl`).

    Raises:
        FileNotFoundError: no such file (build the world first).
    """
    path = world_paths(world, split)[1]
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: build the world with procrl world build --out {world}")
    return read_jsonl(path)


def nli_pair_splits(
    config: WorldNLIConfig, world: str | Path | None = None, world_config: _WorldConfig | None = None
) -> dict[str, list[dict]]:
    """Pairs of the three splits, from a written world folder or (without one) a world built in memory from
    `world_config` (default: seed 0, the default sizes)."""
    if world is not None:
        corpora = {split: load_corpus_rows(world, split) for split in SPLITS}
    else:
        corpora = {split: w.corpus for split, w in build_worlds(world_config or _WorldConfig()).items()}
    return {split: build_nli_pairs(corpora[split], split, config) for split in SPLITS}


def write_nli_pairs(pairs: dict[str, list[dict]], folder: str | Path) -> dict[str, Path]:
    """Write `<folder>/<split>/nli.jsonl` per split; returns the paths."""
    paths = {}
    for split, rows in pairs.items():
        path = Path(folder) / split / NLI_PAIRS_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        paths[split] = path
    return paths
