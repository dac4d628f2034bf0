"""A synthetic multi-hop world for StepGap (docs/architecture.md "Synthetic multi-hop world"; issue 29): a seeded
knowledge base of invented entities and relations, 2- and 3-hop questions through bridge entities, and a passage
corpus with distractors, written in the 2Wiki sample's format so that `procrl.data_builders.search_qa`
(`load_qa_questions`, `open_index`), `BM25Index` and `launch/grpo_stepgap.sh` read it unchanged.

    procrl world build --seed 0 --out data/world0        # writes the three splits (procrl.scripts.world)

The world (`build_world(config, split)`), per split:

- entities (names: `procrl.data_builders.synthetic_world_wording`): countries; cities, each in a country;
  organisations, each based in a city; persons, each born in a city in a year and employed by an organisation;
  works, each written by a person. Facts are triples (subject, relation, object) of `WORLD_RELATIONS`, one object per
  (subject, relation).
- near-namesakes: a share `namesake_rate` of the persons, works, organisations and cities gets a distractor entity
  whose name differs by one letter (a person's also by a middle name), with a different object for every relation.
  Near-namesakes are never on a question's chain.
- questions: a chain e0 -r1-> e1 -r2-> e2 (-r3-> e3) of a `QUESTION_TEMPLATES` template whose length is in `hops`,
  asked about e0; the answer is the last object. Each (template, e0) is asked at most once.
- corpus: one passage per entity (near-namesakes included) stating all of its facts (and a person's works, a
  country's cities) in varied templates, plus mention passages (events) that name persons and a work without
  stating any relation of theirs, `mention_rate` per person.

Rows: questions `{id, question, answer, type: "compositional", evidences: [[s, r, o], ...], supporting_titles,
supporting_paragraph_ids, hops, template, split, unresolved_evidence_subjects: [], supporting_complete: true}`;
corpus `{id, title, text, kind, facts: [[s, r, o], ...], namesake_of}` (`facts`: the triples the passage states;
`namesake_of`: the entity a near-namesake imitates, else null). The corpus loader reads title and text and ignores
the other fields (`procrl.retrieval.document_to_passage`).

Guarantees (checked when a world is built, ValueError otherwise): every evidence triple is stated by the passage
whose title is its subject; titles are unique; the world is a pure function of (config, split); the splits are
disjoint: an entity name belongs to the split that SHA-256 of its normalised form picks (bucket mod 10: 0-7 train,
8 dev, 9 test), so two splits never share a name, for any seed.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

from procrl.data_builders.synthetic_world_wording import (
    EVENT_TEMPLATES,
    FACT_TEMPLATES,
    FILLERS,
    OCCUPATIONS,
    QUESTION_TEMPLATES,
    REVERSE_TEMPLATES,
    WORK_KINDS,
    WORLD_RELATIONS,
    letter_variants,
    make_name,
    middle_name,
)
from procrl.retrieval import read_jsonl
from procrl.rewards.qa import normalize_answer
from procrl.rewards.stepgap.oracle import StepGapOracle
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = [
    "SPLITS",
    "WORLD_FILE",
    "WORLD_RELATIONS",
    "SyntheticWorld",
    "SyntheticWorldConfig",
    "build_world",
    "build_worlds",
    "load_world_oracle",
    "split_of_name",
    "world_paths",
    "write_worlds",
]

SPLITS = ("train", "dev", "test")
WORLD_FILE = "world.json"
FORMAT = "procrl-world-1"


@dataclass
class SyntheticWorldConfig:
    """What `build_world` generates (module docstring); `procrl world build` takes these as flags."""

    seed: int = field(default=0, metadata={"help": "seed of the world (names, facts, questions, wording)"})
    n_train: int = field(default=1000, metadata={"help": "questions of the train split (>= 1)"})
    n_dev: int = field(default=200, metadata={"help": "questions of the dev split (>= 1)"})
    n_test: int = field(default=500, metadata={"help": "questions of the test split (>= 1)"})
    hops: list[int] = field(
        default_factory=lambda: [2, 3], metadata={"help": "chain lengths of the questions, from {2, 3}"}
    )
    namesake_rate: float = field(
        default=0.5,
        metadata={"help": "share of persons, works, organisations and cities with a near-namesake, in [0, 1]"},
    )
    mention_rate: float = field(
        default=0.5, metadata={"help": "mention (event) passages per person, >= 0 (each names 2 persons and a work)"}
    )

    def __post_init__(self) -> None:
        for name in ("n_train", "n_dev", "n_test"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 (questions of that split), got {getattr(self, name)}")
        if not self.hops or not set(self.hops) <= {2, 3}:
            raise ValueError(f"hops must be a non-empty subset of [2, 3], got {self.hops}")
        if not 0.0 <= self.namesake_rate <= 1.0:
            raise ValueError(f"namesake_rate must be in [0, 1], got {self.namesake_rate}")
        if not (self.mention_rate >= 0.0 and math.isfinite(self.mention_rate)):
            raise ValueError(f"mention_rate must be a finite number >= 0, got {self.mention_rate}")

    def n_questions(self, split: str) -> int:
        return {"train": self.n_train, "dev": self.n_dev, "test": self.n_test}[_check_split(split)]


@dataclass
class SyntheticWorld:
    """One split's world: `questions` and `corpus` rows (module docstring), the kind of every entity name."""

    split: str
    questions: list[dict]
    corpus: list[dict]
    kinds: dict[str, str]

    def summary(self) -> dict:
        """Counts: questions (and per hop count), passages, entities per kind, near-namesakes, mention passages."""
        kinds: dict[str, int] = {}
        for kind in self.kinds.values():
            kinds[kind] = kinds.get(kind, 0) + 1
        hops: dict[str, int] = {}
        for q in self.questions:
            hops[str(q["hops"])] = hops.get(str(q["hops"]), 0) + 1
        return {
            "questions": len(self.questions),
            "questions_by_hops": dict(sorted(hops.items())),
            "passages": len(self.corpus),
            "entities": dict(sorted(kinds.items())),
            "namesakes": sum(1 for p in self.corpus if p["namesake_of"]),
            "mention_passages": sum(1 for p in self.corpus if p["kind"] == "event"),
        }


def split_of_name(name: str) -> str:
    """The split a name belongs to: int(first 8 hex of SHA-256("world:" + normalised name)) mod 10 -> 0-7 train,
    8 dev, 9 test (normalised: `procrl.rewards.qa.normalize_answer`, so "The X" and "x" are one name).

    >>> split_of_name("Varel Omundsk") in SPLITS
    True
    """
    bucket = int(hashlib.sha256(f"world:{normalize_answer(name)}".encode()).hexdigest()[:8], 16) % 10
    return "train" if bucket < 8 else SPLITS[bucket - 7]


def _check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return split


class _Names:
    """Fresh names of one split: unique after normalisation, and each in this split (`split_of_name`)."""

    def __init__(self, rng: random.Random, split: str):
        self.rng, self.split, self.used = rng, split, set()

    def take(self, name: str) -> bool:
        key = normalize_answer(name)
        if not key or key in self.used or split_of_name(name) != self.split:
            return False
        self.used.add(key)
        return True

    def new(self, kind: str) -> str:
        for _ in range(10_000):
            name = make_name(kind, self.rng)
            if self.take(name):
                return name
        raise RuntimeError(f"no fresh {kind} name after 10000 draws")  # the pools hold millions: never reached

    def namesake(self, name: str, kind: str) -> str | None:
        """A near-namesake: a person by a middle name or one letter (half each), another kind by one letter."""
        if kind == "person" and self.rng.random() < 0.5:
            first, last = name.split(" ", 1)
            for _ in range(100):
                candidate = f"{first} {middle_name(self.rng)} {last}"
                if self.take(candidate):
                    return candidate
        return next((v for v in letter_variants(name, self.rng) if self.take(v)), None)


def build_world(config: SyntheticWorldConfig, split: str) -> SyntheticWorld:
    """The world of one split (module docstring): a pure function of `config` and `split`.

    Raises:
        ValueError: an unknown split, or a world that breaks a guarantee (a bug; the message names it).
    """
    rng = random.Random(f"procrl-world:{config.seed}:{_check_split(split)}")
    names = _Names(rng, split)
    n = config.n_questions(split)
    sizes = {"person": max(8, math.ceil(n / 2)), "work": max(8, math.ceil(n / 2))}
    sizes["organisation"] = max(4, math.ceil(sizes["person"] / 4))
    sizes["city"] = max(6, math.ceil(sizes["person"] / 3))
    sizes["country"] = max(3, math.ceil(sizes["city"] / 5))
    entities = {kind: [names.new(kind) for _ in range(sizes[kind])] for kind in sizes}
    kinds = {name: kind for kind, group in entities.items() for name in group}
    truth: dict[tuple[str, str], str] = {}
    for i, city in enumerate(entities["city"]):  # every country gets cities
        truth[city, "country"] = entities["country"][i % len(entities["country"])]
    for org in entities["organisation"]:
        truth[org, "headquarters location"] = rng.choice(entities["city"])
    for person in entities["person"]:
        truth[person, "place of birth"] = rng.choice(entities["city"])
        truth[person, "year of birth"] = str(rng.randint(1720, 1960))
        truth[person, "employer"] = rng.choice(entities["organisation"])
    for work in entities["work"]:
        truth[work, "author"] = rng.choice(entities["person"])
    questions = _questions(config, split, rng, entities, truth)
    namesakes = _namesakes(config, rng, names, entities, kinds, truth)
    corpus = _corpus(config, split, rng, names, kinds, truth, namesakes, entities)
    world = SyntheticWorld(split=split, questions=questions, corpus=corpus, kinds=kinds)
    _link_and_check(world, config)
    return world


def _questions(config, split, rng, entities, truth) -> list[dict]:
    """n questions: a template uniformly among those of an allowed length with starts left, then an unused start."""
    starts = {
        name: [e for e in entities[WORLD_RELATIONS[rels[0]]["subject"]]]
        for name, (rels, _) in QUESTION_TEMPLATES.items()
        if len(rels) in config.hops
    }
    for pool in starts.values():
        rng.shuffle(pool)
    out: list[dict] = []
    while len(out) < config.n_questions(split):
        open_templates = sorted(t for t, pool in starts.items() if pool)
        if not open_templates:
            raise ValueError(f"build_world: only {len(out)} distinct questions fit the {split} world")
        template = rng.choice(open_templates)
        relations, phrasings = QUESTION_TEMPLATES[template]
        entity = start = starts[template].pop()
        evidences = []
        for relation in relations:
            evidences.append([entity, relation, truth[entity, relation]])
            entity = truth[entity, relation]
        out.append(
            {
                "id": f"w{config.seed}-{split}-q{len(out):05d}",
                "question": rng.choice(phrasings).format(e=start),
                "answer": entity,
                "type": "compositional",
                "evidences": evidences,
                "supporting_titles": [s for s, _, _ in evidences],
                "supporting_paragraph_ids": [],  # filled when the corpus exists (`_link_and_check`)
                "hops": len(relations),
                "template": template,
                "split": split,
                "unresolved_evidence_subjects": [],
                "supporting_complete": True,
            }
        )
    return out


def _namesakes(config, rng, names, entities, kinds, truth) -> dict[str, str]:
    """Near-namesake -> the entity it imitates; each gets a different object for every relation of the original."""
    relations: dict[str, list[str]] = {}
    for subject, relation in truth:
        relations.setdefault(subject, []).append(relation)
    out: dict[str, str] = {}
    for kind in ("person", "work", "organisation", "city"):
        for original in entities[kind]:
            if rng.random() >= config.namesake_rate:
                continue
            twin = names.namesake(original, kind)
            if twin is None:
                continue
            out[twin] = original
            kinds[twin] = kind
            for relation in relations[original]:
                value = truth[original, relation]
                if relation == "year of birth":
                    truth[twin, relation] = str(int(value) + rng.choice((-1, 1)) * rng.randint(1, 40))
                else:
                    pool = entities[WORLD_RELATIONS[relation]["object"]]
                    truth[twin, relation] = rng.choice([e for e in pool if e != value])
    return out


def _corpus(config, split, rng, names, kinds, truth, namesakes, entities) -> list[dict]:
    """One passage per entity (its facts; a person's works and a country's cities from their side), then events."""
    own: dict[str, list[tuple[str, str, str]]] = {}
    by_object: dict[tuple[str, str], list[str]] = {}
    for (subject, relation), value in truth.items():
        own.setdefault(subject, []).append((subject, relation, value))
        by_object.setdefault((value, relation), []).append(subject)
    rows = []
    for name, kind in kinds.items():
        reverse = [(s, "author", name) for s in by_object.get((name, "author"), [])]
        reverse += [(s, "country", name) for s in by_object.get((name, "country"), [])[:4]]
        rows.append(_entity_passage(rng, name, kind, own.get(name, []), reverse, namesakes.get(name)))
    people = [p for p, k in kinds.items() if k == "person"]
    works = [w for w, k in kinds.items() if k == "work"]
    for _ in range(round(config.mention_rate * len(entities["person"]))):
        event = names.new("event")
        p1, p2 = rng.sample(people, 2)
        slots = {"e": event, "p1": p1, "p2": p2, "w": rng.choice(works), "c": rng.choice(entities["city"])}
        slots["y"] = str(rng.randint(1750, 1990))
        sentences = [EVENT_TEMPLATES[0]] + rng.sample(EVENT_TEMPLATES[1:], 2)
        if "{p1}" not in "".join(sentences):
            sentences.append(EVENT_TEMPLATES[1])
        text = " ".join(s.format(**slots) for s in sentences)
        rows.append({"title": event, "text": text, "kind": "event", "facts": [], "namesake_of": None})
    rng.shuffle(rows)
    return [{"id": f"w{config.seed}-{split}-{i:05d}", **row} for i, row in enumerate(rows)]


_INTROS = {
    "person": "{s} was a {kind}.",
    "work": "{s} is a {kind}.",
    "organisation": "The {s} is an organisation.",
    "city": "{s} is a city.",
    "country": "{s} is a country.",
}


def _entity_passage(rng, name, kind, own, reverse, namesake_of) -> dict:
    """The passage of one entity: its own facts and the reverse ones, shuffled, opening with its full name."""
    short = name.split()[-1] if kind == "person" else name
    noun = {"person": rng.choice(OCCUPATIONS), "work": rng.choice(WORK_KINDS)}.get(kind, kind)
    sentences = [rng.choice(FACT_TEMPLATES[r]).format(s=s, o=o, S=short, kind=noun) for s, r, o in own]
    sentences += [rng.choice(REVERSE_TEMPLATES[r]).format(s=s, o=o, O=short) for s, r, o in reverse]
    rng.shuffle(sentences)
    if not sentences or name not in sentences[0]:
        sentences.insert(0, _INTROS[kind].format(s=name, kind=noun))
    sentences.append(rng.choice(FILLERS[kind]).format(s=name, S=short))
    facts = [list(f) for f in own + reverse]
    return {"title": name, "text": " ".join(sentences), "kind": kind, "facts": facts, "namesake_of": namesake_of}


def _link_and_check(world: SyntheticWorld, config: SyntheticWorldConfig) -> None:
    """Fill `supporting_paragraph_ids`; check the guarantees of the module docstring."""
    ids = {p["title"]: p["id"] for p in world.corpus}
    if len(ids) != len(world.corpus):
        raise ValueError("build_world: two passages share a title")
    stated = {p["title"]: {tuple(f) for f in p["facts"]} for p in world.corpus}
    for q in world.questions:
        for fact in q["evidences"]:
            if tuple(fact) not in stated.get(fact[0], set()):
                raise ValueError(f"build_world: {q['id']}: {fact} is not stated by the passage titled {fact[0]!r}")
        q["supporting_paragraph_ids"] = [ids[t] for t in q["supporting_titles"]]
    if len({q["question"] for q in world.questions}) != len(world.questions):
        raise ValueError("build_world: two questions have the same text")
    wrong = [n for n in world.kinds if split_of_name(n) != world.split]
    if wrong:
        raise ValueError(f"build_world: names outside the {world.split} split: {wrong[:3]}")


def build_worlds(config: SyntheticWorldConfig) -> dict[str, SyntheticWorld]:
    """The three splits' worlds; raises ValueError if two share a normalised name (never, by `split_of_name`)."""
    worlds = {split: build_world(config, split) for split in SPLITS}
    seen: dict[str, str] = {}
    for split, world in worlds.items():
        for name in [*world.kinds, *(p["title"] for p in world.corpus)]:
            other = seen.setdefault(normalize_answer(name), split)
            if other != split:
                raise ValueError(f"build_worlds: {name!r} is in both {other} and {split}")
    return worlds


def world_paths(folder: str | Path, split: str) -> tuple[Path, Path]:
    """(questions.jsonl, corpus.jsonl) of one split of a written world: `<folder>/<split>/...`."""
    base = Path(folder) / _check_split(split)
    return base / "questions.jsonl", base / "corpus.jsonl"


def write_worlds(worlds: dict[str, SyntheticWorld], config: SyntheticWorldConfig, folder: str | Path) -> Path:
    """Write `<folder>/<split>/questions.jsonl`, `<folder>/<split>/corpus.jsonl` and `<folder>/world.json` (format,
    config, relation schema, per-split `summary`); returns `<folder>/world.json`."""
    folder = Path(folder)
    for split, world in worlds.items():
        questions, corpus = world_paths(folder, split)
        questions.parent.mkdir(parents=True, exist_ok=True)
        for path, rows in ((questions, world.questions), (corpus, world.corpus)):
            path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    meta = {
        "format": FORMAT,
        "config": asdict(config),
        "relations": WORLD_RELATIONS,
        "splits": {split: world.summary() for split, world in worlds.items()},
    }
    path = folder / WORLD_FILE
    path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return path


def load_world_oracle(questions: str | Path, corpus: str | Path) -> StepGapOracle:
    """The StepGap oracle of a written world: the corpus rows' facts, the questions' evidence chains and
    `WORLD_RELATIONS` (`procrl.rewards.stepgap.oracle.StepGapOracle.from_rows`).

    Raises:
        FileNotFoundError: a missing file. ValueError: rows without `facts` / `evidences`, or facts that disagree.
    """
    question_rows, corpus_rows = read_jsonl(Path(questions)), read_jsonl(Path(corpus))
    if any("facts" not in row for row in corpus_rows):
        raise ValueError(f"{corpus}: corpus rows need a 'facts' field; build the world with procrl world build")
    return StepGapOracle.from_rows(corpus_rows, question_rows, WORLD_RELATIONS)
