"""The words of the synthetic multi-hop world (`procrl.data_builders.synthetic_world`): the relation schema, invented
names from syllable pools, near-namesake variants, passage sentence templates and question templates.

Names are letters and single spaces only (no punctuation, no digits), so SQuAD normalisation
(`procrl.rewards.qa.normalize_answer`) keeps every name token and the step oracle can find names as token runs.
Every kind of entity has its own shape, so a name's kind shows in it:

    person        Varel Omundsk          first name + surname (a near-namesake: Varel Tamis Omundsk, Varel Omandsk)
    city          Drumora                stem + city suffix
    country       Thalonia               stem + country suffix
    organisation  Vornel Guild           stem + organisation word
    work          The Velmor Chronicles  "The" + stem + noun, or noun + "of" + stem
    event         Quirra Lantern Fair    stem + event words (the titles of mention passages)

Sentences use names, never pronouns. Each fact template states exactly one fact of `WORLD_RELATIONS`; fillers and
event sentences state none. Rendering is a pure function of the `random.Random` it is given.
"""

from __future__ import annotations

import random

__all__ = [
    "ENTITY_KINDS",
    "EVENT_TEMPLATES",
    "FACT_TEMPLATES",
    "FILLERS",
    "OCCUPATIONS",
    "QUESTION_TEMPLATES",
    "REVERSE_TEMPLATES",
    "WORK_KINDS",
    "WORLD_RELATIONS",
    "letter_variants",
    "make_name",
    "middle_name",
]

# relation -> subject kind, object kind, cue words (how a query or a step names the relation). At most one relation
# per (subject kind, object kind), so two co-mentioned names of related kinds read as one relation (the oracle's rule).
WORLD_RELATIONS: dict[str, dict] = {
    "author": {"subject": "work", "object": "person", "cues": ["author", "wrote", "written", "writer"]},
    "place of birth": {
        "subject": "person",
        "object": "city",
        "cues": ["place of birth", "birthplace", "born", "native", "where"],
    },
    "year of birth": {"subject": "person", "object": "year", "cues": ["year of birth", "birth year", "year", "when"]},
    "employer": {
        "subject": "person",
        "object": "organisation",
        "cues": ["employer", "employed", "works for", "worked for", "work for", "works at"],
    },
    "headquarters location": {
        "subject": "organisation",
        "object": "city",
        "cues": ["headquarters", "based", "seat", "located", "where"],
    },
    "country": {"subject": "city", "object": "country", "cues": ["country", "nation"]},
}
ENTITY_KINDS = ("person", "city", "country", "organisation", "work")

# question template -> (relations of the chain in order, phrasings with {e} = the chain's first entity)
QUESTION_TEMPLATES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "author_birthplace": (
        ("author", "place of birth"),
        ("Where was the author of {e} born?", "What is the place of birth of the author of {e}?"),
    ),
    "author_birthyear": (
        ("author", "year of birth"),
        ("In which year was the author of {e} born?", "When was the author of {e} born?"),
    ),
    "author_employer": (
        ("author", "employer"),
        ("Which organisation employed the author of {e}?", "Who was the employer of the author of {e}?"),
    ),
    "employer_city": (
        ("employer", "headquarters location"),
        ("In which city is the employer of {e} based?", "Where are the headquarters of the employer of {e}?"),
    ),
    "birthplace_country": (
        ("place of birth", "country"),
        ("In which country was {e} born?", "Which country is the place of birth of {e} in?"),
    ),
    "headquarters_country": (
        ("headquarters location", "country"),
        ("In which country is the {e} based?", "Which country are the headquarters of the {e} in?"),
    ),
    "author_birthplace_country": (
        ("author", "place of birth", "country"),
        ("In which country was the author of {e} born?", "Which country is the birthplace of the author of {e} in?"),
    ),
    "author_employer_city": (
        ("author", "employer", "headquarters location"),
        ("In which city is the employer of the author of {e} based?",),
    ),
    "employer_city_country": (
        ("employer", "headquarters location", "country"),
        ("In which country is the employer of {e} based?", "Which country is the employer of {e} based in?"),
    ),
}

# -- names -----------------------------------------------------------------------------------------------------------

_ONSETS = ("b", "br", "d", "dr", "f", "g", "gr", "k", "kr", "l", "m", "n", "p", "r", "s", "sh", "t", "th", "v", "z")
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ei", "ou", "y")
_CODAS = ("", "", "", "n", "r", "l", "s", "th", "m", "x", "nd", "rk", "sk")
_CITY_SUFFIXES = ("vik", "mora", "holm", "dell", "grad", "stead", "haven", "ford", "ria", "wick")
_COUNTRY_SUFFIXES = ("ia", "ania", "onia", "avia", "esh", "ora", "undia")
_ORG_WORDS = ("Institute", "Guild", "Company", "Society", "Works", "Foundry", "Observatory", "Academy", "Press")
_WORK_NOUNS = ("Chronicles", "Sonata", "Atlas", "Letters", "Cycle", "Tapestry", "Lexicon", "Almanac", "Elegies")
_EVENT_WORDS = ("Lantern Fair", "Book Festival", "Congress", "Regatta", "Salon", "Exhibition", "Winter Lectures")


def _syllable(rng: random.Random, coda: bool = True) -> str:
    return rng.choice(_ONSETS) + rng.choice(_VOWELS) + (rng.choice(_CODAS) if coda else "")


def _word(rng: random.Random, syllables: int) -> str:
    parts = [_syllable(rng, coda=i == syllables - 1 or rng.random() < 0.3) for i in range(syllables)]
    return "".join(parts).capitalize()


def make_name(kind: str, rng: random.Random) -> str:
    """One invented name of `kind` (`ENTITY_KINDS` or "event"; shapes in the module docstring).

    >>> make_name("organisation", random.Random(0)).split()[-1] in _ORG_WORDS
    True
    """
    if kind == "person":
        return f"{_word(rng, 2)} {_word(rng, rng.choice((2, 3)))}"
    if kind == "city":
        return _syllable(rng).capitalize() + rng.choice(_CITY_SUFFIXES)
    if kind == "country":
        return (
            _syllable(rng, coda=False).capitalize() + rng.choice(("l", "r", "n", "v")) + rng.choice(_COUNTRY_SUFFIXES)
        )
    if kind == "organisation":
        return f"{_word(rng, 2)} {rng.choice(_ORG_WORDS)}"
    if kind == "work":
        if rng.random() < 0.5:
            return f"The {_word(rng, 2)} {rng.choice(_WORK_NOUNS)}"
        return f"{rng.choice(_WORK_NOUNS)} of {_word(rng, 2)}"
    if kind == "event":
        return f"{_word(rng, 2)} {rng.choice(_EVENT_WORDS)}"
    raise ValueError(f"make_name: unknown kind {kind!r}; choose from {ENTITY_KINDS} or 'event'")


def middle_name(rng: random.Random) -> str:
    """A middle name for a person's near-namesake (the person's first name + it + the surname)."""
    return _word(rng, 2)


_FIXED_WORDS = frozenset({"The", "of", *_ORG_WORDS, *_WORK_NOUNS})


def letter_variants(name: str, rng: random.Random) -> list[str]:
    """Names that differ from `name` by one letter in one invented word, shuffled by `rng`: a vowel swapped for a
    vowel or a consonant for a consonant, a lone letter doubled (a vowel between consonants, a consonant between
    vowels), or a letter dropped from a word of 5 letters or more; fixed words ("The", "Guild", ...) are kept.

    >>> variants = letter_variants("Velmor Guild", random.Random(0))
    >>> [v in variants for v in ("Velmar Guild", "Vellmor Guild", "Velmr Guild", "Velmor Guilt")]
    [True, False, True, False]
    """
    words = name.split()
    out: set[str] = set()
    for w, word in enumerate(words):
        if word in _FIXED_WORDS:
            continue
        for i, ch in enumerate(word):
            low = ch.lower()
            swaps = "aeiou" if low in "aeiouy" else "bdgklmnprstvz"
            for new in swaps:
                if new != low:
                    out.add(_replace(words, w, word[:i] + (new.upper() if ch.isupper() else new) + word[i + 1 :]))
            vowel = low in "aeiouy"
            lone = 0 < i < len(word) - 1 and all((word[j].lower() in "aeiouy") != vowel for j in (i - 1, i + 1))
            if lone:  # a vowel between consonants or a consonant between vowels, doubled
                out.add(_replace(words, w, word[:i] + ch + word[i:]))
                if len(word) > 4:
                    out.add(_replace(words, w, word[:i] + word[i + 1 :]))  # dropped
    out.discard(name)
    variants = sorted(out)
    rng.shuffle(variants)
    return variants


def _replace(words: list[str], index: int, word: str) -> str:
    return " ".join([*words[:index], word[:1].upper() + word[1:], *words[index + 1 :]])


# -- passages --------------------------------------------------------------------------------------------------------

# relation -> sentences stating (subject, relation, object); {s}: the subject's name, {o}: the object's name, {S}: the
# subject's short form (a person's surname, else the name), {kind}: a descriptive noun of the subject.
FACT_TEMPLATES: dict[str, tuple[str, ...]] = {
    "author": (
        "{s} is a {kind} written by {o}.",
        "{s} is a {kind} by {o}.",
        "The author of {s} is {o}.",
        "{o} wrote {s}.",
    ),
    "place of birth": (
        "{s} was born in {o}.",
        "The place of birth of {s} is {o}.",
        "{s} is a native of {o}, where {S} was born.",
    ),
    "year of birth": (
        "{s} was born in the year {o}.",
        "{s} (born {o}) was a {kind}.",
        "Born in {o}, {s} became a {kind}.",
    ),
    "employer": (
        "{s} worked for the {o}.",
        "{s} was employed by the {o}.",
        "For most of a long career, {S} worked for the {o}.",
    ),
    "headquarters location": (
        "The {s} is an organisation based in {o}.",
        "The headquarters of the {s} are in {o}.",
        "The {s} has its seat in {o}.",
    ),
    "country": ("{s} is a city in {o}.", "{s} lies in the north of {o}.", "{s} is a town of {o}."),
}
# the reverse statements a passage of the OBJECT makes: (subject, relation, object) said from the object's side
REVERSE_TEMPLATES: dict[str, tuple[str, ...]] = {
    "author": ("{O} is the author of {s}.", "Among the works of {O} is {s}.", "{O} wrote {s}."),
    "country": ("{o} is a country whose towns include {s}.", "The city of {s} lies in {o}."),
}
OCCUPATIONS = ("writer", "cartographer", "composer", "engineer", "botanist", "painter", "historian", "surveyor")
WORK_KINDS = ("novel", "poem cycle", "treatise", "play", "song cycle", "travel book")
FILLERS: dict[str, tuple[str, ...]] = {
    "person": (
        "{S} is remembered for a patient and careful manner.",
        "{S} kept detailed diaries for many years.",
        "Later in life {S} taught apprentices.",
    ),
    "work": ("{s} runs to many short chapters.", "{s} was reprinted several times.", "Critics praised {s}."),
    "organisation": ("The {s} employs several hundred people.", "The {s} publishes a yearly report."),
    "city": ("{s} is known for its covered markets.", "{s} sits on a wide river.", "{s} has an old stone bridge."),
    "country": ("{s} has a mild climate.", "{s} is crossed by two mountain ranges."),
}
# mention passages: name entities without stating any relation of WORLD_RELATIONS ({p1}, {p2}: persons, {w}: a work,
# {c}: a city, {y}: a year, {e}: the event's name)
EVENT_TEMPLATES = (
    "The {e} was held in {c} in {y}.",
    "{p1} and {p2} were among the guests of the {e}.",
    "{p1} gave a reading from {w} at the {e}.",
    "Visitors to the {e} discussed {w} at length.",
    "A portrait of {p2} was shown at the {e}.",
)
