"""The StepGap oracle: step labels of Search-R1 episodes in a world whose facts are known (docs/architecture.md
"StepGap oracle"; issue 29). Ground truth for the StepGap verifier (`procrl.rewards.stepgap.verifier`) and a stand-in
for it: `StepGapOracle.verify_many(traces)` returns the verifier's `StepLabel`s, so `StepGapReward(oracle)` works.
It reads plain data: the world's facts per passage and schema (`procrl.rewards.stepgap.oracle_world.OracleWorld`)
and each question's gold evidence chain e0 -r1-> e1 -r2-> ... -> en (a generated world's `evidences`).

What a step claims (its text, `procrl.rewards.stepgap.quotes.step_claim`, read by `OracleWorld.claims`):

- text claims: the facts its sentences assert. A claim about a name that is not on the chain, with the relation of
  hop k, is read as a claim about the chain's e_{k-1} (the step takes that name for e_{k-1}: "Varel Tamis Omundsk was
  born in Drumora" in a question about Varel Omundsk claims (Varel Omundsk, place of birth, Drumora));
- query claims (inference steps): a name in the `<search>` query that the question does not name is presumed to be
  the chain's entity of its kind: (e_{k-1}, r_k, name), where e_k is of that kind. Searching "Varel Omundsk
  birthplace" presumes that Varel Omundsk is the author;
- the answer claim (the conclusion): (e_{n-1}, r_n, answer). An abstaining answer ("unknown", "cannot be
  determined", ...) claims instead that the evidence does not settle the question.

Each claim (s, r, v) is checked against the step's evidence (passages retrieved BEFORE the step):

    | evidence                                                              | status               | label |
    |-----------------------------------------------------------------------|----------------------|-------|
    | a passage states (s, r, v)                                            | states               | NONE  |
    | a passage states (s, r, v') with v' != v                              | contradicts          | CC    |
    | a passage states (s', r, v) with s' != s (e.g. a near-namesake's)    | other_entity         | IE    |
    | a passage is about s (its title, a fact with s, or names s) and no    | relevant             | MB    |
    |   passage states (s, r, ·)                                            |                      |       |
    | nothing about s (no evidence; only other entities, near-namesakes)    | unrelated            | IE    |
    | abstaining answer, the evidence states every hop of the chain         | abstention_settled   | CC    |
    | abstaining answer, some hop not stated                                | abstention_open      | NONE  |
    | a step without claims (a plan, a search that names only the question) | -                    | NONE  |

The step's label is the most severe of its claims' labels, CC > IE > MB > NONE (`ORACLE_SEVERITY`), and the first
claim with it is the decisive claim (s, r, v). Its repair, what the NEXT step should do (`OracleRepair`):

    | label | repair         | the next step repairs it when                                                       |
    |-------|----------------|-------------------------------------------------------------------------------------|
    | CC    | retract        | it says it retracts, or it neither claims (s, r, v) again (text, query or answer)  |
    |       |                | nor builds on v (a claim about v)                                                   |
    | IE    | research       | it is a search whose ask (entity, relation; `OracleWorld.ask`) differs from this   |
    |       |                | step's ask                                                                          |
    | MB    | bridge_search  | it is a search whose query names the bridge s                                       |

A malformed next step (`TraceStep.malformed`) never repairs. As `StepLabel`s (what the reward's shaping reads):
CC -> entity = v when v is a name of the world, value = v; IE -> entity = s, value = v; MB -> entity = s, value = v,
bridge = s; NONE -> entity = s, value = v of the decisive claim when there is one. A question the oracle does not
know gets ERROR for every step (with a warning), never a guess.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from procrl.rewards.stepgap.oracle_world import OracleFact, OracleRelation, OracleWorld, oracle_key
from procrl.rewards.stepgap.quotes import step_claim
from procrl.rewards.stepgap.reward import RETRACTION
from procrl.rewards.stepgap.trace import StepLabel, Trace, TraceStep
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = [
    "ORACLE_ABSTENTION",
    "ORACLE_REPAIRS",
    "ORACLE_SEVERITY",
    "ORACLE_STATUS_LABELS",
    "OracleClaim",
    "OracleRepair",
    "OracleStepVerdict",
    "StepGapOracle",
]

ORACLE_STATUS_LABELS = {
    "states": "NONE",
    "contradicts": "CC",
    "other_entity": "IE",
    "relevant": "MB",
    "unrelated": "IE",
    "abstention_settled": "CC",
    "abstention_open": "NONE",
}
ORACLE_SEVERITY = ("CC", "IE", "MB", "NONE")
ORACLE_REPAIRS = {"CC": "retract", "IE": "research", "MB": "bridge_search"}
ORACLE_ABSTENTION = re.compile(
    r"\b(unknown|cannot be determined|can ?not be (?:determined|found|answered)|not enough information|"
    r"no information|i (?:do not|don't) know|unclear|not sure)\b",
    re.I,
)


@dataclass(frozen=True)
class OracleClaim:
    """One claim of a step and what the evidence says about it.

    Attributes:
        subject, relation, value: the claim (subject after reading an off-chain name as the chain's entity).
        source: "text" (the step's sentences), "query" (presumed by its search) or "answer" (the conclusion).
        written_subject: the name the step wrote when it was read as the chain's entity, else None.
        status: a key of `ORACLE_STATUS_LABELS`.
        evidence_value: the value the evidence states for (subject, relation) (status contradicts / states).
        other_entity: the entity whose passage states the value (status other_entity).
    """

    subject: str
    relation: str
    value: str
    source: str
    status: str
    written_subject: str | None = None
    evidence_value: str | None = None
    other_entity: str | None = None

    @property
    def label(self) -> str:
        return ORACLE_STATUS_LABELS[self.status]

    def __str__(self) -> str:
        written = f" (written {self.written_subject})" if self.written_subject else ""
        return f"({self.subject}{written}, {self.relation}, {self.value}) [{self.source}]: {self.status}"


@dataclass(frozen=True)
class OracleRepair:
    """What the next step should do after a gap: `action` is "retract" (CC), "research" (IE) or "bridge_search"
    (MB); `entity`, `value`: the decisive claim's subject and value; `bridge`: the entity to search (MB)."""

    action: str
    entity: str | None = None
    value: str | None = None
    bridge: str | None = None


@dataclass(frozen=True)
class OracleStepVerdict:
    """The oracle's verdict on one step.

    Attributes:
        label: NONE, CC, IE, MB (ERROR: the question is unknown to the oracle).
        claims: every claim of the step with its status.
        decisive: the claim that decided the label (None: no claim).
        ask: (entity, relation) of the step's search query (None, None without one).
        repair: what the next step should do (None when there is no gap).
        repaired: whether the next step does it (None: no gap, or no next step).
        reason: one line for logs.
    """

    label: str
    claims: tuple[OracleClaim, ...] = ()
    decisive: OracleClaim | None = None
    ask: tuple[str | None, str | None] = (None, None)
    repair: OracleRepair | None = None
    repaired: bool | None = None
    reason: str = ""

    def step_label(self, world: OracleWorld | None = None) -> StepLabel:
        """The verifier's `StepLabel` of this verdict (fields by the module docstring; `world` tells whether a CC
        value is a name of the world, without it the value is also the entity)."""
        reason = f"oracle: {self.reason}"
        d = self.decisive
        if d is None or self.label == "ERROR":
            return StepLabel(self.label, reason=reason)
        if self.label == "CC":
            is_name = world is None or world.kind(d.value) is not None
            return StepLabel("CC", entity=d.value if is_name else None, value=d.value, reason=reason)
        return StepLabel(self.label, entity=d.subject, value=d.value, bridge=d.subject if self.label == "MB" else None,
                         reason=reason)  # fmt: skip


class StepGapOracle:
    """Oracle StepGap labels of Search-R1 traces (module docstring), and the verifier interface over them.

    Args:
        world: the world's facts, kinds and schema.
        chains: question text -> its gold evidence chain [[e0, r1, e1], [e1, r2, e2], ...] (questions compared
            after `oracle_key`).

    Raises:
        ValueError: an empty or broken chain (a hop's subject is not the previous object), a hop the world does not
            hold as a fact, or one question with two different chains.
    """

    def __init__(self, world: OracleWorld, chains: Mapping[str, Sequence[Sequence[str]]]):
        self.world = world
        self.chains: dict[str, list[OracleFact]] = {}
        for question, chain in chains.items():
            hops = self._check_chain(question, chain)
            if self.chains.setdefault(oracle_key(question), hops) != hops:
                raise ValueError(f"StepGapOracle: the question {question!r} has two different chains")
        self._warned: set[str] = set()

    def _check_chain(self, question: str, chain: Sequence[Sequence[str]]) -> list[OracleFact]:
        hops = [tuple(str(x) for x in hop) for hop in chain]
        if not hops or any(len(h) != 3 for h in hops):
            raise ValueError(f"StepGapOracle: {question!r}: a chain is a non-empty list of [subject, relation, object]")
        for k, (subject, relation, value) in enumerate(hops):
            if k and not self.world.same(subject, hops[k - 1][2]):
                raise ValueError(f"StepGapOracle: {question!r}: hop {k} starts at {subject!r}, not {hops[k - 1][2]!r}")
            if not self.world.same(self.world.true_value(subject, relation), value):
                raise ValueError(f"StepGapOracle: {question!r}: ({subject}, {relation}, {value}) is not a world fact")
        return [(self.world.name(s), r, self.world.name(v)) for s, r, v in hops]

    @classmethod
    def from_rows(
        cls,
        corpus_rows: Iterable[Mapping],
        question_rows: Iterable[Mapping],
        relations: Mapping[str, OracleRelation | Mapping],
    ) -> StepGapOracle:
        """From a generated world's rows: corpus `{title, facts, kind?}`, questions `{question, evidences}`."""
        world = OracleWorld.from_rows(corpus_rows, relations)
        return cls(world, {str(q["question"]): q["evidences"] for q in question_rows})

    def __repr__(self) -> str:
        return f"StepGapOracle({len(self.chains)} questions, {len(self.world.facts)} passages)"

    def chain_of(self, question: str) -> list[OracleFact] | None:
        """The gold chain of a question, None when the oracle does not know it."""
        return self.chains.get(oracle_key(question))

    # -- the verifier interface (procrl.rewards.stepgap.reward.label_steps) ------------------------------------------

    def verify(self, trace: Trace) -> list[StepLabel]:
        """One `StepLabel` per step of `trace`."""
        return [v.step_label(self.world) for v in self.label_trace(trace)]

    def verify_many(self, traces: Sequence[Trace], **_ignored) -> list[list[StepLabel]]:
        """`verify` for each trace (the `StepGapVerifier.verify_many` interface; stage ablations do not apply)."""
        return [self.verify(trace) for trace in traces]

    # -- labels ------------------------------------------------------------------------------------------------------

    def label_trace(self, trace: Trace, chain: Sequence[Sequence[str]] | None = None) -> list[OracleStepVerdict]:
        """One verdict per step of `trace`, each with whether the next step makes its repair.

        Args:
            trace: a parsed trace (`procrl.rewards.stepgap.trace.parse_trace`).
            chain: the gold chain; None = looked up by `trace.question` (an unknown question: ERROR verdicts).
        """
        hops = self._check_chain(trace.question, chain) if chain is not None else self.chain_of(trace.question)
        if hops is None:
            if trace.question not in self._warned:
                self._warned.add(trace.question)
                logger.warning("StepGap oracle: question not in the world, its steps are ERROR: %r", trace.question)
            return [OracleStepVerdict("ERROR", reason="question not in the world") for _ in trace.steps]
        if not trace.steps:  # a completion without a search or an answer tag
            return []
        question_names = {oracle_key(n) for n in self.world.mentions(trace.question)}
        verdicts = [self._verdict(step, hops, question_names) for step in trace.steps]
        return [
            replace(v, repaired=self._repaired(v, step, nxt, hops, question_names))
            for v, step, nxt in zip(verdicts, trace.steps, [*trace.steps[1:], None], strict=True)
        ]

    def _claims(self, step: TraceStep, hops: list[OracleFact], question_names: set[str]) -> list[tuple]:
        """(subject, relation, value, source, written_subject) of a step, in order, without repeats."""
        world = self.world
        on_chain = {oracle_key(h[0]) for h in hops} | {oracle_key(hops[-1][2])}
        raw = []
        for subject, relation, value in world.claims(step_claim(step)):
            hop = next((h for h in hops if h[1] == relation), None)
            if hop is not None and oracle_key(subject) not in on_chain:
                raw.append((hop[0], relation, value, "text", subject))
            else:
                raw.append((subject, relation, value, "text", None))
        if step.kind == "inference" and step.query:
            for name in world.mentions(step.query):
                hop = next((h for h in hops if world.kind(h[2]) == world.kind(name)), None)
                if hop is not None and oracle_key(name) not in question_names:
                    raw.append((hop[0], hop[1], name, "query", None))
        if step.kind == "conclusion" and step.answer:
            raw.append((hops[-1][0], hops[-1][1], step.answer.strip(), "answer", None))
        out, seen = [], set()
        for claim in raw:
            key = (oracle_key(claim[0]), claim[1], oracle_key(claim[2]))
            if key not in seen:
                seen.add(key)
                out.append(claim)
        return out

    def _check(self, claim: tuple, evidence: Sequence, hops: list[OracleFact]) -> OracleClaim:
        subject, relation, value, source, written = claim
        world = self.world
        facts = [f for p in evidence for f in world.facts_of(p)]
        if source == "answer" and ORACLE_ABSTENTION.search(value):
            stated = {(oracle_key(s), r, oracle_key(o)) for s, r, o in facts}
            settled = all((oracle_key(s), r, oracle_key(o)) in stated for s, r, o in hops)
            return OracleClaim(subject, relation, value, source, "abstention_settled" if settled else "abstention_open")
        said = [o for s, r, o in facts if r == relation and world.same(s, subject)]
        if any(world.same(o, value) for o in said):
            return OracleClaim(subject, relation, value, source, "states", written, evidence_value=value)
        if said:
            return OracleClaim(subject, relation, value, source, "contradicts", written, evidence_value=said[0])
        others = [s for s, r, o in facts if r == relation and world.same(o, value) and not world.same(s, subject)]
        if others:
            return OracleClaim(subject, relation, value, source, "other_entity", written, other_entity=others[0])
        status = "relevant" if any(world.is_about(p, subject) for p in evidence) else "unrelated"
        return OracleClaim(subject, relation, value, source, status, written)

    def _verdict(self, step: TraceStep, hops: list[OracleFact], question_names: set[str]) -> OracleStepVerdict:
        claims = tuple(self._check(c, step.evidence, hops) for c in self._claims(step, hops, question_names))
        ask = self.world.ask(step.query) if step.kind == "inference" else (None, None)
        if not claims:
            return OracleStepVerdict("NONE", ask=ask, reason="no claim")
        label = min((c.label for c in claims), key=ORACLE_SEVERITY.index)
        decisive = next(c for c in claims if c.label == label)
        repair = None
        if label in ORACLE_REPAIRS:
            bridge = decisive.subject if label == "MB" else None
            repair = OracleRepair(ORACLE_REPAIRS[label], decisive.subject, decisive.value, bridge)
        reason = "; ".join(str(c) for c in claims)
        return OracleStepVerdict(label, claims, decisive, ask, repair, reason=reason)

    def _repaired(
        self, verdict: OracleStepVerdict, step: TraceStep, nxt: TraceStep | None, hops, question_names
    ) -> bool | None:
        """Whether `nxt` makes the repair of `verdict` (module docstring); None without a gap or a next step."""
        if verdict.repair is None or nxt is None:
            return None
        if nxt.malformed:
            return False
        world, d = self.world, verdict.decisive
        if verdict.label == "CC":
            if RETRACTION.search(nxt.text or ""):
                return True
            wrong = oracle_key(d.value)
            for subject, relation, value, _, written in self._claims(nxt, hops, question_names):
                if (oracle_key(subject), relation, oracle_key(value)) == (oracle_key(d.subject), d.relation, wrong):
                    return False  # claimed again
                if wrong in (oracle_key(subject), oracle_key(written or "")):
                    return False  # built on: a claim about the contradicted value
            return True
        if nxt.kind != "inference" or not nxt.query:
            return False
        if verdict.label == "IE":
            ask, new = verdict.ask, world.ask(nxt.query)
            same_entity = world.same(ask[0], new[0]) or (ask[0] is None and new[0] is None)
            return not same_entity or ask[1] != new[1]
        return oracle_key(verdict.repair.bridge) in {oracle_key(n) for n in world.mentions(nxt.query)}
