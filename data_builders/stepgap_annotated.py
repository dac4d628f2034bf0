"""The annotated StepGap verifier set, built from 2WikiMultihopQA compositional questions (docs/architecture.md "StepGap";
StepGap, arXiv 2605.24733, §"verifier evaluation"); the shipped set `evals/stepgap/data/annotated_2wiki.jsonl`
was made by `build_annotated_2wiki` (seed 0, see evals/stepgap/data/SOURCE.md) and is read by
`procrl.evals.stepgap.evaluate.load_annotated`.
"""

from __future__ import annotations

import collections
import json
import random
import re
from pathlib import Path

from procrl.rewards.stepgap.verifier import TYPED_LABELS
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["build_annotated_2wiki"]

_R1 = ("director", "father", "composer", "performer", "mother")
_R2 = ("place of birth", "place of death", "date of death", "date of birth", "place of burial", "father", "mother")
# (inference label, conclusion label): a conclusion IE needs evidence that never names the bridge, so the
# inference step before it must be IE or MB (whose evidence does not name it either).
_COMBOS = [(a, b) for b in ("NONE", "CC", "MB") for a in TYPED_LABELS] + [("IE", "IE"), ("MB", "IE")]


def _n(text: str) -> str:
    return " ".join(text.lower().split())


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]


def build_annotated_2wiki(
    dev_path: str | Path,
    corpus_path: str | Path,
    *,
    cycles: int = 3,
    extra_clean: int = 6,
    max_paragraph_chars: int = 800,
    seed: int = 0,
) -> list[dict]:
    """Annotated StepGap traces with known gap types, from 2Wiki compositional questions (A -r1-> B -r2-> C).

    Each trace has an inference step claiming "The r1 of A is B." (searching for B's r2) and a conclusion claiming
    "The r2 of B is C." with answer C. Per step, the evidence is constructed for its gold label (entity = the
    claim's subject, value = the claimed object):
        NONE: the subject's paragraph, which states the value;
        CC:   the subject's paragraph, with a claimed value taken from another question with the same relation
              (absent from the evidence, while the true value is present);
        MB:   the subject's paragraph with every sentence stating the value removed (relevant, not implying);
        IE:   only paragraphs that never name the subject (nor the value).
    Distractor paragraphs never name A, B, C or a substituted value. The conclusion's evidence is the inference
    step's evidence plus what its search returned. Every construction is checked by string tests; a question that
    fails one is skipped. `cycles` runs over the 14 label combinations plus `extra_clean` NONE/NONE traces;
    paragraphs longer than `max_paragraph_chars` characters are not used (short judge prompts).
    """
    rng = random.Random(seed)
    corpus = [json.loads(line) for line in open(corpus_path, encoding="utf-8")]
    by_title = {p["title"]: p for p in corpus}
    dev = [json.loads(line) for line in open(dev_path, encoding="utf-8")]
    values: dict[str, set[str]] = collections.defaultdict(set)
    for q in dev:
        for _, rel, obj in q["evidences"]:
            values[rel].add(obj)

    candidates = []
    for q in dev:
        if q["type"] != "compositional" or len(q["evidences"]) != 2 or not q["supporting_complete"]:
            continue
        (a, r1, b), (b2, r2, c) = q["evidences"]
        if b != b2 or r1 not in _R1 or r2 not in _R2 or _n(c) != _n(q["answer"]):
            continue
        pa, pb = (by_title.get(t) for t in q["supporting_titles"][:2])
        if not pa or not pb or _n(b) not in _n(pa["text"]) or _n(c) not in _n(pb["text"]):
            continue
        if max(len(pa["text"]), len(pb["text"])) > max_paragraph_chars:
            continue
        candidates.append((q, a, r1, b, r2, c, pa, pb))
    rng.shuffle(candidates)

    def wrong_value(rel: str, true: str, avoid: str) -> str | None:
        pool = sorted(v for v in values[rel] if _n(true) not in _n(v) and _n(v) not in _n(true))
        rng.shuffle(pool)
        return next((v for v in pool if _n(v) not in _n(avoid)), None)

    def distractors(k: int, names: list[str]) -> list[dict]:
        out = []
        while len(out) < k:
            p = rng.choice(corpus)
            blob = _n(p["title"] + " " + p["text"])
            if len(p["text"]) <= max_paragraph_chars and all(_n(x) not in blob for x in names) and p not in out:
                out.append(p)
        return out

    def without_value(p: dict, value: str) -> dict | None:
        kept = [s for s in _sentences(p["text"]) if _n(value) not in _n(s)]
        text = " ".join(kept)
        return {"title": p["title"], "text": text} if kept and _n(value) not in _n(text) else None

    combos = _COMBOS * cycles + [("NONE", "NONE")] * extra_clean
    records = []
    for q, a, r1, b, r2, c, pa, pb in candidates:
        if len(records) == len(combos):
            break
        l1, l2 = combos[len(records)]
        b_wrong = wrong_value(r1, b, pa["text"] + " " + pb["text"])
        c_wrong = wrong_value(r2, c, pa["text"] + " " + pb["text"])
        if b_wrong is None or c_wrong is None:
            continue
        names = [a, b, c, b_wrong, c_wrong]
        pa_mb, pb_mb = without_value(pa, b), without_value(pb, c)
        if pa_mb is None or pb_mb is None or _n(c) in _n(pa_mb["text"]):
            continue
        plain = lambda p: {"title": p["title"], "text": p["text"]}  # noqa: E731
        evidence1 = {
            "NONE": [plain(pa)],
            "CC": [plain(pa)],
            "MB": [pa_mb],
            "IE": [],
        }[l1] + [plain(d) for d in distractors(2 if l1 == "IE" else 1, names)]
        retrieved1 = {
            "NONE": [plain(pb)],
            "CC": [plain(pb)],
            "MB": [pb_mb],
            "IE": [],
        }[l2] + [plain(d) for d in distractors(2 if l2 == "IE" else 1, names)]
        evidence2 = evidence1 + retrieved1
        claim_b = b_wrong if l1 == "CC" else b
        claim_c = c_wrong if l2 == "CC" else c

        # The checks that make each gold label true by construction.
        blob1 = _n(" ".join(p["title"] + " " + p["text"] for p in evidence1))
        blob2 = _n(" ".join(p["title"] + " " + p["text"] for p in evidence2))
        ok = {
            "NONE": _n(b) in blob1,
            "CC": _n(b) in blob1 and _n(b_wrong) not in blob1,
            "MB": _n(a) in blob1 and _n(b) not in blob1,  # the subject's own paragraph (title) is there
            "IE": _n(a) not in blob1 and _n(b) not in blob1,
        }[l1] and {
            "NONE": _n(c) in blob2,
            "CC": _n(c) in blob2 and _n(c_wrong) not in blob2,
            "MB": _n(b) in blob2 and _n(c) not in blob2,
            "IE": _n(b) not in blob2 and _n(c) not in blob2,
        }[l2]
        if not ok:
            continue
        step1 = {
            "kind": "inference",
            "text": f"<think>The {r1} of {a} is {claim_b}.</think>\n<search>{r2} of {b}</search>",
            "query": f"{r2} of {b}",
            "answer": None,
            "evidence": evidence1,
            "retrieved": retrieved1,
            "gold": l1,
            "gold_entity": a,
            "gold_value": claim_b,
            "gold_bridge": b if l1 == "MB" else None,
        }
        step2 = {
            "kind": "conclusion",
            "text": f"<think>The {r2} of {b} is {claim_c}.</think>\n<answer>{claim_c}</answer>",
            "query": None,
            "answer": claim_c,
            "evidence": evidence2,
            "retrieved": [],
            "gold": l2,
            "gold_entity": b,
            "gold_value": claim_c,
            "gold_bridge": None,
        }
        records.append(
            {
                "id": f"2wiki-stepgap-{len(records):03d}",
                "source_id": q["id"],
                "question": q["question"],
                "answer": claim_c,
                "gold_answer": q["answer"],
                "steps": [step1, step2],
            }
        )
    if len(records) < len(combos):
        logger.warning("only %d of %d annotated traces could be built", len(records), len(combos))
    return records
