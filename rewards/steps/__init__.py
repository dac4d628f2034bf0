"""Reasoning steps: splitting text into steps and mapping steps to token boundaries (docs/architecture.md "Steps").

Units and conventions used throughout this module:

* **Character spans** (`Step.start`, `Step.end`) are 0-based, end-exclusive offsets into the original text
  (Python `str` indices, i.e. Unicode code points), with `step.text == text[step.start:step.end]`.
* **Steps tile the text**: step k runs from its first character to the first character of step k+1, so the
  separator and any blank lines that follow it sit at the *end* of step k; leading whitespace before the
  first step belongs to step 0 and trailing whitespace to the last step. `"".join(s.text for s in steps)`
  is the text. `Step.stripped` gives the step without surrounding whitespace.
* **Token boundaries** are 0-based, end-exclusive token indices: boundary k is the index one past the last
  token of step k, so `token_ids[:boundaries[k]]` is the prefix through step k. Boundaries are strictly
  increasing and the last one equals the number of ids: tokens after the last step's text (EOS included)
  belong to the last step.

Two cases (docs/architecture.md "Steps"):

* **Text we build** (PUM data, scoring inputs): `tokenize_steps` tokenizes each piece separately and
  concatenates the ids, so every step prefix's ids are a strict prefix of the full ids.
* **Sampled completions**: `token_steps` / `token_step_boundaries` keep the sampled ids and find each
  token's character offsets by (incremental) cumulative decoding; sampled text is never re-encoded
  (SmolLM2 samples one token for "\\n\\n" that re-encodes as two "\\n" tokens).
"""

from procrl.rewards.steps.split import DEFAULT_SEPARATOR, Step, split_steps, step_prefixes
from procrl.rewards.steps.tokens import token_char_offsets, token_step_boundaries, token_steps, tokenize_steps

__all__ = [
    "DEFAULT_SEPARATOR",
    "Step",
    "split_steps",
    "step_prefixes",
    "token_char_offsets",
    "token_steps",
    "token_step_boundaries",
    "tokenize_steps",
]
