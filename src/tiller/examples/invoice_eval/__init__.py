"""The bundled example eval: a scripted coding agent fixes 20 seeded bugs in the invoice
project, each case in its own copy, scored by running the copy's tests.

```sh
tiller eval run examples/invoice_eval/eval.py
```

- `cases.jsonl`: a row per case: its id, its prompt, and its bug (`metadata.bug`, the
  exact `old` → `new` replacement in `invoice.py`). The fixtures are made from the
  bundled project (`build_fixtures`, cached by a hash of what they are made of), not
  committed as twenty near-identical copies.
- `invoice_fixer_agent`: the scripted agent (see `_fixer` for what it can and cannot
  fix: four of the twenty cases fail, on purpose and for stated reasons).
- `InvoiceCaseApprover`: what a case's run may do without a person: edit its copy's code,
  run sandboxed commands; not edit the tests.
- `PristineTestsScorer`: the `tests` score: the pristine tests, run against the copy's
  `invoice.py` by a runner outside the copy; files the agent leaves in its copy cannot
  pass it, though a cheating `invoice.py` itself still could (see its docstring).
- `invoice_eval_spec()`: the `EvalSpec` that `examples/invoice_eval/eval.py` names.
"""

from ._approver import InvoiceCaseApprover
from ._fixer import (
    FIXER_SYSTEM_PROMPT,
    SHELL_TOOL,
    TARGET_FILE,
    invoice_fixer_agent,
    invoice_fixer_model,
    invoice_fixer_tools,
    test_command,
)
from ._fixtures import DEMO_REPAIR, PROJECT, InvoiceFixtures, build_fixtures, pristine_file
from ._scorer import PristineTestsScorer
from ._seeded_bug import SeededBug, SeededBugError
from ._spec import (
    AGENT_REFERENCE,
    CASES_FILE,
    invoice_cases,
    invoice_eval_spec,
    tests_pass_scorer,
)

__all__ = [
    "AGENT_REFERENCE",
    "CASES_FILE",
    "DEMO_REPAIR",
    "FIXER_SYSTEM_PROMPT",
    "PROJECT",
    "SHELL_TOOL",
    "TARGET_FILE",
    "InvoiceCaseApprover",
    "InvoiceFixtures",
    "PristineTestsScorer",
    "SeededBug",
    "SeededBugError",
    "build_fixtures",
    "invoice_cases",
    "invoice_eval_spec",
    "invoice_fixer_agent",
    "invoice_fixer_model",
    "invoice_fixer_tools",
    "pristine_file",
    "test_command",
    "tests_pass_scorer",
]
