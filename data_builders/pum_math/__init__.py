"""PUM-Math: outcome-grounded prefix preference pairs for the Prefix Utility Model (docs/architecture.md "PUM").

Paper: "From Correctness to Utility: Gain-Based Prefix Evaluation for LLM Reasoning" (arXiv 2606.07190).

Pipeline (`build_pum_math`):

1. problems with a parseable gold answer (`load_math_dataset`); a gold that cannot be parsed is skipped and counted;
2. trajectories: sampled from a policy model (`n_trajectories` per problem; prompted with `prompt_template`) and/or
   the data set's reference solution (GSM8K: one step per line, calculator annotations removed, "#### N" -> "The
   answer is N."); a sampled text the first student's tokenizer encodes with its unknown token (a word-level
   tokenizer's fused words, `maps_to_unknown`) is dropped and counted;
3. prefixes: cuts at step boundaries (`split_steps`) and at token fractions (default 0.25/0.5/0.75 of the
   trajectory's tokens in the FIRST student's tokenizer, moved back to a clean character boundary); a prefix is a
   list of text pieces (whole steps, the last one possibly partial), tokenized piece by piece
   (`tokenize_steps`), so every prefix's ids are a strict prefix of the trajectory's ids. Identical prefix texts
   of one problem are one prefix (counted);
4. student rollouts: every student s continues every prefix p `n_rollouts` times and the bare problem
   `n_rollouts_bare` times; solve rate q_s(x,p) = k/n (the answer of prefix + continuation, checked with
   `is_correct`, each math-verify step under `verify_timeout_s` seconds; a check that runs out counts as wrong and
   is counted in stats.json `verification_timeouts`); gain g_s(x,p) = q_s(x,p) - q_s(x,∅);
5. intrinsic utility G(x,p) = mean_s g_s(x,p)/σ_s, σ_s = population std (ddof 0) of student s's gains over the
   data set (`normalization="student_std"`, the default; "none": σ_s = 1; "problem_zscore": σ_s = std of s's
   gains within the problem, gains centred per problem). A student whose σ_s = 0 is excluded and counted;
6. pairs: vertical (two prefixes of one trajectory) and horizontal (prefixes of two different trajectories of one
   problem whose token lengths differ by at most `horizontal_tolerance` x the longer one); chosen = higher G;
   kept when |ΔG| > κ·sqrt(Var(ΔG)) with Var(ΔG) = (1/M²) Σ_s [v(k_sa, n) + v(k_sb, n)]/σ_s²,
   v = q̃(1 - q̃)/(n + 2), q̃ = (k + 1)/(n + 2) (q_s(x,∅) cancels within a problem; the smoothing keeps 0/n and
   n/n from having zero variance). Ties (ΔG = 0) are dropped, or kept with `is_tie=True` and margin 0.

Output (`output_dir`): `dataset/` (`Dataset.save_to_disk`), `pairs.parquet`, `stats.json`, `gains.png`,
`prefixes.jsonl` (every prefix with its success counts per student, gains, G and `at_step`: whether it ends at a
step boundary), and the resumable rollout cache `cache/`. Columns: `prompt` (problem text), `chosen`, `rejected`
(prefix texts), `margin` (ΔG >= 0, in units of the normalised gain), `pair_type` ("vertical" | "horizontal"),
`problem_id`, `gain_chosen`, `gain_rejected` (G), `n_rollouts` (per prefix and student), plus `is_tie`,
`chosen_tokens`, `rejected_tokens` (first student's tokenizer) and `delta_std` (sqrt Var(ΔG)).

Run (the command is `procrl.scripts.build_pum_data`): `procrl build-pum-data --config configs/pum/build_gsm8k.yaml`,
`accelerate launch -m procrl.scripts.build_pum_data --config ...` (GPUs), `ACCELERATE_USE_CPU=True torchrun
--nproc_per_node 2 -m procrl.scripts.build_pum_data -- --config ...` (CPU), or `launch/build_pum_math.sh`. Rollouts
are sharded over the processes; the pairs are built and written by the main process.

Modules: `config` (`PUMMathConfig`), `stats` (the arithmetic of steps 4-6), `prefixes` (problems, trajectories,
cuts), `sampling` (policy and student rollouts, verified solve counts), `pairs` (candidates, margin filter,
`assemble_pairs`), `pipeline` (`build_pum_math`), `replication` (the replication study), `outputs` (files, plot).
"""

from procrl.data_builders.pum_math.config import (
    NORMALIZATIONS,
    PAIR_TYPES,
    PLAIN_ONE_SHOT_TEMPLATE,
    PLAIN_STOP,
    TRAJECTORY_SOURCES,
    PUMMathConfig,
)
from procrl.data_builders.pum_math.outputs import OUTPUT_COLUMNS, plot_gains, write_outputs
from procrl.data_builders.pum_math.pairs import (
    PairCounts,
    assemble_pairs,
    attach_rates,
    candidate_pairs,
    select_pairs,
)
from procrl.data_builders.pum_math.pipeline import build_pum_math, load_problems, maps_to_unknown
from procrl.data_builders.pum_math.prefixes import Prefix, Problem, Trajectory, cut_trajectory, reference_steps
from procrl.data_builders.pum_math.replication import replicate
from procrl.data_builders.pum_math.sampling import estimate_solve_counts, sample_trajectories
from procrl.data_builders.pum_math.stats import (
    PrefixRates,
    compute_utilities,
    delta_variance,
    intrinsic_utility,
    population_std,
    smoothed_variance,
    student_scales,
)

__all__ = [
    "NORMALIZATIONS",
    "OUTPUT_COLUMNS",
    "PAIR_TYPES",
    "PLAIN_ONE_SHOT_TEMPLATE",
    "PLAIN_STOP",
    "TRAJECTORY_SOURCES",
    "PUMMathConfig",
    "PairCounts",
    "Prefix",
    "PrefixRates",
    "Problem",
    "Trajectory",
    "assemble_pairs",
    "attach_rates",
    "build_pum_math",
    "candidate_pairs",
    "compute_utilities",
    "cut_trajectory",
    "delta_variance",
    "estimate_solve_counts",
    "intrinsic_utility",
    "load_problems",
    "maps_to_unknown",
    "plot_gains",
    "population_std",
    "reference_steps",
    "replicate",
    "sample_trajectories",
    "select_pairs",
    "smoothed_variance",
    "student_scales",
    "write_outputs",
]
