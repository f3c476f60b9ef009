"""The old home of one graph trial, kept so `ablate.train.run_trial(config)` still works.

The trial engine now lives in `ablate.trial` (see docs/design.md); import from
`ablate.trial.graph` in new code.
"""

from ablate.trial.graph import run_trial, run_trial_full  # noqa: F401
