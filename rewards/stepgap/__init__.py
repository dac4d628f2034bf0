"""StepGap (arXiv 2605.24733; DESIGN §4): typed step-level evidence-gap labels for search-interleaved traces and the
typed base + shaping reward built on them. Modules: `trace` (trace and label types, Search-R1 tag parsing),
`reward` (EM + λ Σ [base + shaping], per-step rewards), `verifier` (stages A-E)."""
