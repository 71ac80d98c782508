"""The bundled example eval: `tiller eval run examples/invoice_eval/eval.py`.

A scripted coding agent fixes 20 seeded bugs in the invoice project, each case in its own
copy, scored by running the copy's tests in the sandbox. It runs offline. The agent, the
cases and the approver live in `tiller.examples.invoice_eval`, so a fleet worker can load
them by name; this file only names the spec.
"""

from tiller.examples.invoice_eval import invoice_eval_spec

spec = invoice_eval_spec()
