"""`procrl select`: best-of-N selection with a PUM, PiCSAR, majority vote or a random pick (an accuracy table).

    procrl select --scorer pum,picsar,majority,random --n 8 --dataset svamp --start 0 --end 100 --pum outputs/pum
    procrl select --scorer picsar,picsar_reasoning,picsar_answer --picsar-evaluator gemma3-270m --greedy --n 8
    procrl select --scorer pum,pum_min,pum_last,pum_mean --pum outputs/pum --n 8
    python -m procrl.scripts.select --config select.yaml --n 16      # the same; flags override the YAML's keys

Samples `--n` completions per problem with the policy (the generation's own log-probs kept for PiCSAR), picks one
per scorer and reports the accuracy of the picked completions (DESIGN §4 "PUM" Best-of-N, "PiCSAR" best-of-N):

- `pum`: argmax_i U(x, y_i) (the PUM's utility of the full completion, trailing EOS stripped);
- `pum_min`, `pum_last`, `pum_mean`: argmax of the min / last / mean over the step prefixes' utilities U(x, p_k)
  (one step-scoring pass per completion shared by the three; a completion the PUM cannot score fully, e.g. one
  longer than its budget, is never picked);
- `picsar`: argmax of the unnormalised PiCSAR sum log p(r|x) + log p(y|a,x,r) (the paper's selection score);
  `picsar_reasoning` / `picsar_answer`: argmax of log p(r|x) / log p(y|a,x,r) alone (one PiCSAR pass for all
  three). log p(r|x) is the sampler's log-probs; the answer term is teacher-forced by the policy itself, or by
  `--picsar-evaluator MODEL` (a name or path like `--model`: the paper's decoupled evaluator; the samples do not
  change). Completions without an extractable answer are never picked;
- `majority`: the most frequent extracted answer (ties: the answer that appears first); its first completion;
- `random`: one completion drawn with `random.Random(f"{seed}:{problem_id}")` (reproducible per problem).

Several scorers (comma-separated) select from the SAME samples. Ties always go to the earliest candidate. Each
candidate in the report holds `score_<column>` for every column of the score passes run (any PiCSAR scorer writes
`score_picsar`, `score_picsar_reasoning` and `score_picsar_answer`; any of pum_min/pum_last/pum_mean writes all
three). The table also shows pass@N (some sample is correct: the ceiling of any selector) and the mean accuracy of
one sample; `--greedy` adds one greedy decode per problem (temperature 0, same prompt and `--max-new-tokens`; a
`greedy` entry `{text, extracted, correct}` per problem and a `greedy` row). The samples (token ids and log-probs)
go through procrl's sample store, `cache/` next to the report (content-addressed rollout shards; the report's
`samples.files` lists the ones it read): a rerun with the same model, engine, prompts and sampling settings (e.g.
with another scorer, once a PUM is trained, or into another report in the same folder) reads them instead of
sampling, and a killed run resumes from its finished shards; the greedy decodes likewise (reused across `--n`,
`--temperature`, `--top-p` and `--seed`).

Writes a JSON report (settings, `--picsar-evaluator` included, accuracy per scorer with a 95% Wilson interval,
every problem's candidates and picks) to `--output` and prints the accuracy table. Problems whose gold answer
cannot be parsed are left out of the accuracy and counted (`unparseable_gold`). The run record `run.json`
(`procrl.experiment.tracking`) goes into the report's folder, with the metrics `select/<scorer>/accuracy` (also `ci_low`,
`ci_high`, `correct`, `total`, `abstained`; the greedy and oracle rows as `select/greedy/...` and
`select/pass@N (oracle)/...`), `select/mean_sample_accuracy` and `select/unparseable_gold`; also to wandb with
`--report-to wandb`. The library: `procrl.evals.selection` (`run_select`).
"""

from __future__ import annotations

from pathlib import Path

from trl import TrlParser

from procrl.scripts._common import EXIT_USAGE, HelpFormatter, configure_logging, parse_or_exit
from procrl.experiment.tracking import TrackingArguments, numeric_metrics, track_run
from procrl.evals.offline import format_accuracy_table
from procrl.evals.selection import SelectConfig, run_select


def make_parser() -> TrlParser:
    """`TrlParser` over `SelectConfig` and `TrackingArguments` (`--report-to`): `--config x.yaml` sets the defaults,
    flags (dashed or underscored) override."""
    return TrlParser(
        (SelectConfig, TrackingArguments), prog="procrl select", description=__doc__, formatter_class=HelpFormatter
    )


def main(argv: list[str] | None = None) -> int:
    """Run `procrl select`; returns the exit status (0 on success, 2 on bad arguments)."""
    parsed = parse_or_exit(make_parser(), argv)  # SelectConfig.__post_init__, an unknown flag or --config key
    if parsed is None:
        return EXIT_USAGE
    config, tracking = parsed
    configure_logging()
    output_dir = Path(config.output).parent
    with track_run(output_dir, command="select", argv=argv, configs=parsed, report_to=tracking.report_to) as record:
        result = run_select(config)
        record.metrics = run_metrics(result)
    print(format_accuracy_table(result["results"]))
    print(f"report: {config.output}")
    return 0


def run_metrics(result: dict) -> dict[str, float]:
    """The run record's headline metrics of a `run_select` result: every number of each `results` row under
    `select/<row>/`, and of `summary` under `select/`."""
    return numeric_metrics(result["results"], "select/") | numeric_metrics(result["summary"], "select/")


if __name__ == "__main__":
    raise SystemExit(main())
