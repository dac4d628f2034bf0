"""`procrl select`: best-of-N selection with a PUM, PiCSAR, majority vote or a random pick (an accuracy table), and
with `--ks` the best-of-k curves of every selection method from the same samples.

    procrl select --scorer pum,picsar,majority,random --n 8 --dataset svamp --start 0 --end 100 --pum outputs/pum
    procrl select --scorer picsar,picsar_reasoning,picsar_answer --picsar-evaluator gemma3-270m --greedy --n 8
    procrl select --scorer pum,pum_min,pum_last,pum_mean --pum outputs/pum --n 16 --ks 1,2,4,8,16
    procrl select --config configs/results/select_arith_organism.yaml --model /path/to/organism/checkpoint
    python -m procrl.scripts.select --config select.yaml --n 16      # the same; flags override the YAML's keys

Samples `--n` completions per problem with the policy (the generation's own log-probs kept for PiCSAR), picks one
per scorer and reports the accuracy of the picked completions (docs/architecture.md "PUM" Best-of-N, "PiCSAR" best-of-N):

- `pum`: argmax_i U(x, y_i) (the PUM's utility of the full completion, trailing EOS stripped);
- `pum_min`, `pum_last`, `pum_mean`: argmax of the min / last / mean over the step prefixes' utilities U(x, p_k)
  (one step-scoring pass per completion shared by the three; a completion the PUM cannot score fully, e.g. one
  longer than its budget, is never picked);
- `picsar`: argmax of the unnormalised PiCSAR sum log p(r|x) + log p(y|a,x,r) (the paper's selection score);
  `picsar_reasoning` / `picsar_answer`: argmax of log p(r|x) / log p(y|a,x,r) alone (one PiCSAR pass for all
  three). log p(r|x) is the sampler's log-probs; the answer term is teacher-forced by the policy itself, or by
  `--picsar-evaluator MODEL` (a name or path like `--model`: the paper's decoupled evaluator; the samples do not
  change). `--picsar-instruction` (the instruction a; '' = the problem alone), `--picsar-separator` and
  `--picsar-join-space` (the separator's trailing space scored with the answer) set the answer term's input, for a
  policy whose vocabulary lacks the default's words. Completions without an extractable answer are never picked;
- `mean_logprob`: argmax of the mean raw log-prob per completion token (the sampler's: no forward pass);
  `self_certainty`: argmax of the mean over the completion's tokens of KL(U || p_t), the divergence of the policy's
  next-token distribution from uniform (Kang et al. 2025, arXiv 2502.18581; one teacher-forced pass; one pass for
  both columns). Defined for every completion with a token, with or without an answer;
- `majority`: the most frequent extracted answer (ties: the answer that appears first); its first completion;
- `random`: one completion drawn with `random.Random(f"{seed}:{problem_id}")` (reproducible per problem).

Several scorers (comma-separated) select from the SAME samples. Ties always go to the earliest candidate. Each
candidate holds `score_<column>` for every column of the score passes run (any PiCSAR scorer writes
`score_picsar`, `score_picsar_reasoning` and `score_picsar_answer`; any of pum_min/pum_last/pum_mean writes all
three). The table also shows pass@N (some sample is correct: the ceiling of any selector) and the mean accuracy of
one sample; `--greedy` adds one greedy decode per problem (temperature 0, same prompt and `--max-new-tokens`; a
`greedy` entry `{text, extracted, correct}` per problem and a `greedy` row). The samples (token ids and log-probs)
go through procrl's sample store, `cache/` in `--output-dir` (content-addressed rollout shards; the result's
`samples.files` lists the ones it read): a rerun with the same model, engine, prompts and sampling settings (e.g.
with another scorer, or once a PUM is trained) reads them instead of sampling, and a killed run resumes from its
finished shards; the greedy decodes likewise (reused across `--n`, `--temperature`, `--top-p` and `--seed`).

`--ks 1,2,4,8` (each k <= n): the expected accuracy of random, majority vote (self-consistency), longest, every
`score_<column>`'s argmax, greedy (with `--greedy`) and pass@k (the ceiling) when each picks from k of the n
samples: `--subsets` random k-subsets per problem for k < n (seeded by `--seed`, the SAME for every method), the
full set at k == n; the mean over problems with a bootstrap 95% interval over problems (`--resamples`, seed
`--seed`). Also the within-problem AUROC of each score column and of the length (`procrl.evals.bestofn`: over
the problems with both a right and a wrong scored sample, ties 1/2, None scores left out; the mean with a bootstrap
95% interval and the count). So the PiCSAR paper's "PiCSAR@6 beats self-consistency@16" and the PUM paper's
best-of-N comparison read off one table.

Writes into `--output-dir` the run record `run.json` (`procrl.experiment.tracking`): its `result` holds the
settings (`--picsar-evaluator` included), the accuracy per scorer with a 95% Wilson interval, the summary and with
`--ks` the curves (`bestofn`: curves, per-problem values, AUROC); its `files` name `problems.jsonl` (every
problem's candidates and picks, one line per problem) and with `--ks` `table.md` and `curves.png`. Problems whose
gold answer cannot be parsed are left out of the accuracy and counted (`unparseable_gold`). The metrics:
`select/<scorer>/accuracy` (also `ci_low`, `ci_high`, `correct`, `total`, `abstained`; the greedy and oracle rows as
`select/greedy/...` and `select/pass@N (oracle)/...`), `select/mean_sample_accuracy`, `select/unparseable_gold`,
and with `--ks` `bestofn/<method>/acc@<k>` (also `ci_low@<k>`, `ci_high@<k>`), `bestofn/<score>/auroc` (also
`auroc_ci_low`, `auroc_ci_high`, `auroc_problems`),
`bestofn/problems`; also to wandb with `--report-to wandb`. Prints the accuracy table (and the curves' table).
The library: `procrl.evals.selection` (`run_select`), `procrl.evals.bestofn` (`bestofn_curves`).
"""

from __future__ import annotations

from pathlib import Path

from trl import TrlParser

from procrl.evals.bestofn import (
    bestofn_curves,
    bestofn_table,
    curve_metrics,
    parse_contrasts,
    plot_bestofn,
    samples_from_problems,
)
from procrl.evals.offline import format_accuracy_table
from procrl.evals.selection import SelectConfig, run_select
from procrl.experiment.tracking import TrackingArguments, numeric_metrics, track_run
from procrl.scripts._common import EXIT_USAGE, HelpFormatter, configure_logging, parse_or_exit

TABLE_FILE, PLOT_FILE = "table.md", "curves.png"


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
    output_dir = Path(config.output_dir)
    table = None
    with track_run(output_dir, command="select", argv=argv, configs=parsed, report_to=tracking.report_to) as run:
        result = run_select(config)
        problems = result.pop("problems")
        run.write_rows("problems", problems)
        if config.k_list:
            samples = samples_from_problems(problems, config.n)
            result["bestofn"] = bestofn_curves(
                samples,
                config.k_list,
                subsets=config.subsets,
                seed=config.seed,
                resamples=config.resamples,
                contrasts=parse_contrasts(config.contrasts),
            )
            table = bestofn_table(result["bestofn"])
            (output_dir / TABLE_FILE).write_text(table)
            run.files["table"] = str(output_dir / TABLE_FILE)
            run.files["curves"] = str(plot_bestofn(result["bestofn"], output_dir / PLOT_FILE))
        run.result = result
        run.metrics = run_metrics(result)
    print(format_accuracy_table(result["results"]))
    if table is not None:
        print(f"\n{table}")
    print("\n".join(f"{role}: {path}" for role, path in {"run": run.path, **run.files}.items()))
    return 0


def run_metrics(result: dict) -> dict[str, float]:
    """The run record's headline metrics of a `run_select` result: every number of each `results` row under
    `select/<row>/`, of `summary` under `select/`, and with curves (`result["bestofn"]`) their
    `procrl.evals.bestofn.curve_metrics`."""
    metrics = numeric_metrics(result["results"], "select/") | numeric_metrics(result["summary"], "select/")
    return metrics | (curve_metrics(result["bestofn"]) if "bestofn" in result else {})


if __name__ == "__main__":
    raise SystemExit(main())
