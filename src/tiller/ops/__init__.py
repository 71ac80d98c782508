"""Operations on durable runs, shared by the `tiller` command and the server: a person
approves or denies a held call, a suspended run is resumed with the decisions, a crashed
one recovered, runs and held calls listed, uncertain calls reconciled and stale records
settled. Each takes the store (a `tiller.store.Bus`) and returns data; printing is the
caller's.

`recover` itself (continuing a crashed run, given its agent) lives in `tiller.loop`, beside
`Agent.resume`; `recover_run` here is the operation around it: the agent loaded from the
checkpoint and the run's pinned policy restored.
"""

from ._approvals import Decided, approve, deny, held_approvals

# For tiller's own packages (not API; not in __all__): the steps the CLI and the server
# take around the operations, and the texts the operations write for a person.
from ._approvals import decided_records as decided_records
from ._approvals import decision_of as decision_of
from ._arguments import check_arguments as check_arguments
from ._buckets import Buckets
from ._continue import folded_steers as folded_steers
from ._continue import recover_run, resume_decided, resume_run
from ._pinned import pinned_agent as pinned_agent
from ._pinned import pinned_policy_of as pinned_policy_of
from ._reconcile import DONE_DEFAULT as DONE_DEFAULT
from ._reconcile import FAILED_DEFAULT as FAILED_DEFAULT
from ._reconcile import CallVerdict, Reconciled, reconcile
from ._runs import list_runs, uncertain_calls
from ._settle import CANCELLED_CALL as CANCELLED_CALL
from ._settle import close_cancelled
from ._settle import expire_held as expire_held

__all__ = [
    "Buckets",
    "CallVerdict",
    "Decided",
    "Reconciled",
    "approve",
    "close_cancelled",
    "deny",
    "held_approvals",
    "list_runs",
    "reconcile",
    "recover_run",
    "resume_decided",
    "resume_run",
    "uncertain_calls",
]
