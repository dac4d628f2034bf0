"""StepGap (arXiv 2605.24733; docs/architecture.md "StepGap"): typed step-level evidence-gap labels for search-interleaved traces and the
typed base + shaping reward built on them. Modules: `trace` (trace and label types, Search-R1 tag parsing),
`reward` (EM + λ Σ [base + shaping], per-step rewards), `verifier` (stages A-E), `nli` (NLI backends of stages D-E)
and `evaluate` (verifier metrics: sF1, Q-F1, balanced accuracy, typed macro-F1). The command `procrl stepgap-eval` is
`procrl/scripts/stepgap_eval.py`; the annotated set's builder is `procrl.data_builders.stepgap_annotated`."""
