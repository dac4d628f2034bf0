"""What the StepGap oracle knows (docs/architecture.md "StepGap oracle"): the facts each passage states, the kind of
every name, the relation schema, and how names, claims and asks are read from a step's text. Plain data in (a
generated world's corpus rows and schema, e.g. `procrl.data_builders.synthetic_world`); nothing learned.

Names are compared as token runs after SQuAD normalisation (`procrl.rewards.qa.normalize_answer`: lower case, no
punctuation, no articles; a possessive "'s" and hyphens are split off first), so "the Velmor Chronicles" names
"The Velmor Chronicles" and "Omundsk's" names "Omundsk". Text is read left to right, taking the LONGEST name that
starts at each token, so "Varel Tamis Omundsk" (a near-namesake) is never read as "Varel Omundsk".

Claims: the schema has at most one relation per (subject kind, object kind), so within one sentence each name is
paired with the nearest name before it whose kind is related to its own, and that pair is a claim of that relation
(in either order: "Kelvik is the birthplace of Varel Omundsk" claims (Varel Omundsk, place of birth, Kelvik)).

    >>> world = OracleWorld({"Varel Omundsk": [("Varel Omundsk", "place of birth", "Kelvik")]},
    ...                     {"place of birth": {"subject": "person", "object": "city", "cues": ["born"]}})
    >>> world.claims("Omundsk is famous. Kelvik is where Varel Omundsk's life began.")
    [('Varel Omundsk', 'place of birth', 'Kelvik')]
    >>> world.ask("where was varel omundsk born")
    ('Varel Omundsk', 'place of birth')
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from procrl.rewards.qa import normalize_answer
from procrl.rewards.stepgap.trace import Passage

__all__ = ["OracleFact", "OracleRelation", "OracleWorld", "oracle_key"]

OracleFact = tuple[str, str, str]  # (subject, relation, object), names as the world writes them

_POSSESSIVE = re.compile(r"['’]s\b")
_SENTENCES = re.compile(r"(?<=[.!?;])\s+|\n+")


def oracle_key(text: str) -> str:
    """The normal form names are compared in: possessive "'s" and hyphens split off, then `normalize_answer`.

    >>> oracle_key("The Velmor-Chronicles' author, Omundsk's")
    'velmor chronicles author omundsk'
    """
    return normalize_answer(_POSSESSIVE.sub(" ", str(text)).replace("-", " "))


@dataclass(frozen=True)
class OracleRelation:
    """One relation of the schema: the kinds of its subject and object, and the cue words that name it in a query
    (phrases, compared after `oracle_key`)."""

    name: str
    subject: str
    object: str
    cues: tuple[str, ...] = ()


class OracleWorld:
    """The facts, kinds and schema of a world, with the readers of text the oracle needs.

    Args:
        passage_facts: passage title -> the (subject, relation, object) triples that passage states.
        relations: relation name -> `OracleRelation` or a mapping {"subject": kind, "object": kind, "cues": [...]}.
        kinds: name -> kind, for names the facts do not reach (the facts give every subject and object its kind
            from the schema; an explicit kind must agree).

    Raises:
        ValueError: two relations with the same (subject kind, object kind); a fact whose relation is not in the
            schema; a name of two kinds; two different objects for one (subject, relation).
    """

    def __init__(
        self,
        passage_facts: Mapping[str, Iterable[Sequence[str]]],
        relations: Mapping[str, OracleRelation | Mapping],
        kinds: Mapping[str, str] | None = None,
    ):
        self.relations = {name: _relation(name, spec) for name, spec in relations.items()}
        self._between: dict[tuple[str, str], str] = {}
        for rel in self.relations.values():
            if self._between.setdefault((rel.subject, rel.object), rel.name) != rel.name:
                raise ValueError(
                    f"OracleWorld: relations {self._between[rel.subject, rel.object]!r} and {rel.name!r} both link "
                    f"{rel.subject} to {rel.object}; the claim reader needs one relation per pair of kinds"
                )
        self.display: dict[str, str] = {}  # key -> the name as the world writes it
        self.kinds: dict[str, str] = {}  # key -> kind
        for name, kind in (kinds or {}).items():
            self._add_name(name, kind)
        self.facts: dict[str, frozenset[OracleFact]] = {}  # title key -> facts the passage states
        self.truth: dict[tuple[str, str], str] = {}  # (subject key, relation) -> object as written
        for title, facts in passage_facts.items():
            triples = frozenset(self._add_fact(fact) for fact in facts)
            self.facts[oracle_key(title)] = self.facts.get(oracle_key(title), frozenset()) | triples
        self._by_first: dict[str, list[tuple[tuple[str, ...], str]]] = {}
        for key in self.display:
            tokens = tuple(key.split())
            if tokens:
                self._by_first.setdefault(tokens[0], []).append((tokens, key))
        for entries in self._by_first.values():
            entries.sort(key=lambda entry: -len(entry[0]))
        self._mention_cache: dict[tuple[str, str], frozenset[str]] = {}

    def _add_name(self, name: str, kind: str) -> str:
        key = oracle_key(name)
        if not key:
            raise ValueError(f"OracleWorld: the name {name!r} is empty after normalisation")
        if self.kinds.setdefault(key, kind) != kind:
            raise ValueError(f"OracleWorld: {name!r} is both a {self.kinds[key]} and a {kind}")
        self.display.setdefault(key, str(name))
        return key

    def _add_fact(self, fact: Sequence[str]) -> OracleFact:
        if len(fact) != 3:
            raise ValueError(f"OracleWorld: a fact is (subject, relation, object), got {fact!r}")
        subject, relation, value = (str(x) for x in fact)
        if relation not in self.relations:
            raise ValueError(
                f"OracleWorld: relation {relation!r} of {fact!r} is not in the schema {sorted(self.relations)}"
            )
        rel = self.relations[relation]
        s_key, o_key = self._add_name(subject, rel.subject), self._add_name(value, rel.object)
        known = self.truth.setdefault((s_key, relation), self.display[o_key])
        if oracle_key(known) != o_key:
            raise ValueError(f"OracleWorld: ({subject}, {relation}) is both {known!r} and {value!r}")
        return (self.display[s_key], relation, self.display[o_key])

    @classmethod
    def from_rows(
        cls, corpus_rows: Iterable[Mapping], relations: Mapping[str, OracleRelation | Mapping]
    ) -> OracleWorld:
        """From corpus rows `{title, facts, kind?}` (a generated world's corpus.jsonl); a row's `kind` counts when
        it is a kind of the schema (mention passages' "event" does not)."""
        rows = list(corpus_rows)
        schema = {name: _relation(name, spec) for name, spec in relations.items()}
        schema_kinds = {k for rel in schema.values() for k in (rel.subject, rel.object)}
        kinds = {str(r["title"]): str(r["kind"]) for r in rows if r.get("kind") in schema_kinds}
        return cls({str(r["title"]): r.get("facts") or [] for r in rows}, schema, kinds)

    # -- names -----------------------------------------------------------------------------------------------------

    def name(self, text: str) -> str:
        """The world's spelling of a name (the text itself when the world does not know it)."""
        return self.display.get(oracle_key(text), str(text).strip())

    def kind(self, name: str) -> str | None:
        return self.kinds.get(oracle_key(name))

    def same(self, a: str | None, b: str | None) -> bool:
        """Whether two names or values are one after `oracle_key` (None matches nothing)."""
        return a is not None and b is not None and oracle_key(a) == oracle_key(b) != ""

    def mentions(self, text: str) -> list[str]:
        """Names of the world in `text`, in order, longest match first at each token (module docstring)."""
        tokens = oracle_key(text).split()
        found, i = [], 0
        while i < len(tokens):
            for name_tokens, key in self._by_first.get(tokens[i], ()):
                if tuple(tokens[i : i + len(name_tokens)]) == name_tokens:
                    found.append(self.display[key])
                    i += len(name_tokens)
                    break
            else:
                i += 1
        return found

    # -- facts and passages ------------------------------------------------------------------------------------------

    def true_value(self, subject: str, relation: str) -> str | None:
        """The object of (subject, relation) in the world, None when the world has none."""
        return self.truth.get((oracle_key(subject), relation))

    def facts_of(self, passage: Passage) -> frozenset[OracleFact]:
        """The facts a passage states (by its title; a passage the world does not know states none)."""
        return self.facts.get(oracle_key(passage.title), frozenset())

    def passage_mentions(self, passage: Passage) -> frozenset[str]:
        """Keys of the names a passage's title and text mention (cached per passage)."""
        cache_key = (passage.title, passage.text)
        if cache_key not in self._mention_cache:
            names = self.mentions(f"{passage.title}. {passage.text}")
            self._mention_cache[cache_key] = frozenset(oracle_key(n) for n in names)
        return self._mention_cache[cache_key]

    def is_about(self, passage: Passage, name: str) -> bool:
        """Whether a passage concerns `name`: its title, a subject or object of a fact it states, or a name in its
        text (a near-namesake's passage names the near-namesake, so it is not about the original)."""
        key = oracle_key(name)
        if not key:
            return False
        if oracle_key(passage.title) == key or key in self.passage_mentions(passage):
            return True
        return any(key in (oracle_key(s), oracle_key(o)) for s, _, o in self.facts_of(passage))

    # -- reading steps ---------------------------------------------------------------------------------------------

    def relation_between(self, kind_a: str | None, kind_b: str | None) -> tuple[str, bool] | None:
        """(relation, a is the subject) linking two kinds, None when none does."""
        if (kind_a, kind_b) in self._between:
            return self._between[kind_a, kind_b], True
        if (kind_b, kind_a) in self._between:
            return self._between[kind_b, kind_a], False
        return None

    def claims(self, text: str) -> list[OracleFact]:
        """The facts `text` asserts (module docstring), in order, without repeats; names as the world writes them."""
        out: list[OracleFact] = []
        for sentence in _SENTENCES.split(text or ""):
            names = self.mentions(sentence)
            for j, b in enumerate(names):
                for a in reversed(names[:j]):
                    link = self.relation_between(self.kind(a), self.kind(b)) if oracle_key(a) != oracle_key(b) else None
                    if link is None:
                        continue
                    relation, a_first = link
                    claim = (a, relation, b) if a_first else (b, relation, a)
                    if claim not in out:
                        out.append(claim)
                    break
        return out

    def ask(self, query: str | None) -> tuple[str | None, str | None]:
        """(entity, relation) a search query asks about: its first name, and the first schema relation whose cue it
        contains, preferring relations whose subject is of the entity's kind; None for what it does not name."""
        if not query:
            return None, None
        names = self.mentions(query)
        entity = names[0] if names else None
        padded = f" {oracle_key(query)} "
        cued = [r for r in self.relations.values() if any(f" {oracle_key(c)} " in padded for c in r.cues)]
        kind = self.kind(entity) if entity else None
        fitting = [r for r in cued if r.subject == kind] or ([] if kind else cued)
        return entity, (fitting[0].name if fitting else None)


def _relation(name: str, spec: OracleRelation | Mapping) -> OracleRelation:
    if isinstance(spec, OracleRelation):
        return spec
    try:
        return OracleRelation(name, str(spec["subject"]), str(spec["object"]), tuple(spec.get("cues") or ()))
    except (KeyError, TypeError) as error:
        raise ValueError(f"OracleWorld: relation {name!r} needs 'subject' and 'object' kinds, got {spec!r}") from error
