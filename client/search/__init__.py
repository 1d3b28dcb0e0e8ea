"""The tuner's search: a kernel's declared space, read from its source, and a model-free optimiser over it.

- `source`: what a kernel source declares (TUNE_SPACE, TUNE_CONSTRAINTS, its module-level constants), read
  without running it, and the rewrite that sets those constants;
- `space`: the typed space: knobs, their choices and the constraints that rule combinations out;
- `history`: the trials so far, folded from the event log (the one record; nothing is kept elsewhere);
- `optimiser`: Optuna's TPE over the space, its study rebuilt from those trials for every proposal;
- `noise`: which trials count as measured well enough to be the best, and how confidently;
- `declared`: the problem's own starter and solution as text, for a kernel that declares no space;
- `ending`: the phrases a tuner run's end reason starts with, for `status` to recognise.
"""
