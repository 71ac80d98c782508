"""Durable state: the Bus (revisioned KV with leases, pub/sub, job queue) and its backends.

`open_bus(url)` picks the backend from the URL:

- `memory://` — `MemoryBus`, one process, nothing survives it (tests);
- `sqlite:///relative/path.db`, `sqlite:////absolute/path.db`, `sqlite:///~/.tiller/tiller.db`
  — `SqliteBus`, the embedded default; options as a query string:
  `?poll_interval=0.05&busy_timeout=5&retention=60` (seconds);
- `nats://host:port` — `NatsBus` on NATS JetStream (imported on first use).

See `tiller.store._bus` for the contract every backend keeps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import _public

if TYPE_CHECKING:
    # For tiller's own packages (not API; not in __all__).
    from ._approvals import APPROVALS_BUCKET as APPROVALS_BUCKET
    from ._approvals import (
        AlreadyDecided,
        ApprovalFromNewerTiller,
        ApprovalStatus,
        ApprovalStore,
        HeldApproval,
        MalformedApproval,
        UnknownApproval,
    )

    # For tiller's own packages (not API; not in __all__).
    from ._bus import DEFAULT_LEASE as DEFAULT_LEASE
    from ._bus import DEFAULT_MAX_DELIVER as DEFAULT_MAX_DELIVER
    from ._bus import (
        Bus,
        BusClosed,
        BusMessage,
        Clock,
        DeadLetter,
        Entry,
        Job,
        JobLeaseLost,
        JobQueue,
        KeyValue,
        Lease,
        NotFound,
        QueueDepth,
        QueueOptions,
        RevisionConflict,
        StoreError,
        StoreUnavailable,
        Subscription,
    )
    from ._bus import check_subject as check_subject
    from ._bus import decode_key as decode_key
    from ._bus import encode_key as encode_key
    from ._bus import encoded_prefix as encoded_prefix
    from ._checkpoints import DEFAULT_BUCKET as DEFAULT_BUCKET
    from ._checkpoints import (
        AlreadyResumed,
        Checkpoint,
        CheckpointFromNewerTiller,
        CheckpointStore,
        LeaseLost,
        RunStillRunning,
    )

    # For tiller's own packages (not API; not in __all__).
    from ._checkpoints import CallLog as CallLog
    from ._checkpoints import Status as Status
    from ._control import CONTROL_BUCKET as CONTROL_BUCKET
    from ._control import ControlStore, MalformedControl
    from ._control import ControlWatcher as ControlWatcher
    from ._durability import RunDurability, StoreDurability
    from ._event_log import EventLog, EventLogFromNewerTiller

    # For tiller's own packages (not API; not in __all__).
    from ._event_log import EventLogWriter as EventLogWriter
    from ._file_checkpoints import FILE_BLOBS_BUCKET as FILE_BLOBS_BUCKET
    from ._file_checkpoints import FILE_CHECKPOINTS_BUCKET as FILE_CHECKPOINTS_BUCKET
    from ._file_checkpoints import FileCheckpoints
    from ._file_manifest import (
        FileCheckpointFromNewerTiller,
        FileRestoreFailed,
        MalformedFileCheckpoint,
        RestoreReport,
    )

    # For tiller's own packages (not API; not in __all__): the records and the confined walk,
    # store and write of file checkpoints, which fleet workspaces (snapshots of fixtures) reuse.
    from ._file_manifest import FileRecord as FileRecord
    from ._file_manifest import decode_records as decode_records
    from ._file_manifest import encode_records as encode_records

    # For tiller's own packages (not API; not in __all__).
    from ._mailbox import MAILBOX_BUCKET as MAILBOX_BUCKET
    from ._mailbox import (
        MailboxFull,
        MailboxStore,
        MailClaim,
        MailIdentity,
        MailMessage,
        MailStatus,
        MalformedMail,
        MessageTooLarge,
        QuarantinedMail,
    )
    from ._mailbox import check_mail_name as check_mail_name
    from ._memory import MemoryBus
    from ._open import open_bus

    # For tiller's own packages (not API; not in __all__).
    from ._outbox import OUTBOX_BUCKET as OUTBOX_BUCKET
    from ._outbox import (
        MalformedOutboxItem,
        OutboxItem,
        OutboxItemFromNewerTiller,
        OutboxResult,
        OutboxStatus,
        OutboxStatusError,
        OutboxStore,
        UnknownOutboxItem,
    )
    from ._records import MalformedRecord, RecordFromNewerTiller

    # For tiller's own packages (not API; not in __all__): versioned records of their own.
    from ._records import Record as Record
    from ._records import create_or_get as create_or_get
    from ._records import decode_record as decode_record
    from ._records import encode_record as encode_record
    from ._sqlite import SqliteBus

    # For tiller's own packages (not API; not in __all__).
    from ._workspace_checkpoints import CHUNK_BYTES as CHUNK_BYTES
    from ._workspace_checkpoints import MAX_SNAPSHOT_READ_BYTES as MAX_SNAPSHOT_READ_BYTES
    from ._workspace_checkpoints import Decided as Decided
    from ._workspace_checkpoints import WorkspaceOutcome as WorkspaceOutcome
    from ._workspace_checkpoints import WorkspaceRecorder as WorkspaceRecorder
    from ._workspace_checkpoints import restore_workspace as restore_workspace
    from ._workspace_fs import UnsafePath as UnsafePath
    from ._workspace_fs import open_file as open_file
    from ._workspace_fs import set_mode as set_mode
    from ._workspace_fs import walk_workspace as walk_workspace

__all__ = [
    "AlreadyDecided",
    "AlreadyResumed",
    "ApprovalFromNewerTiller",
    "ApprovalStatus",
    "ApprovalStore",
    "Bus",
    "BusClosed",
    "BusMessage",
    "Checkpoint",
    "CheckpointFromNewerTiller",
    "CheckpointStore",
    "Clock",
    "ControlStore",
    "DeadLetter",
    "Entry",
    "EventLog",
    "EventLogFromNewerTiller",
    "FileCheckpointFromNewerTiller",
    "FileCheckpoints",
    "FileRestoreFailed",
    "HeldApproval",
    "Job",
    "JobLeaseLost",
    "JobQueue",
    "KeyValue",
    "Lease",
    "LeaseLost",
    "MailClaim",
    "MailIdentity",
    "MailMessage",
    "MailStatus",
    "MailboxFull",
    "MailboxStore",
    "MalformedApproval",
    "MalformedControl",
    "MalformedFileCheckpoint",
    "MalformedMail",
    "MalformedOutboxItem",
    "MalformedRecord",
    "MemoryBus",
    "MessageTooLarge",
    "NotFound",
    "OutboxItem",
    "OutboxItemFromNewerTiller",
    "OutboxResult",
    "OutboxStatus",
    "OutboxStatusError",
    "OutboxStore",
    "QuarantinedMail",
    "QueueDepth",
    "QueueOptions",
    "RecordFromNewerTiller",
    "RestoreReport",
    "RevisionConflict",
    "RunDurability",
    "RunStillRunning",
    "SqliteBus",
    "StoreDurability",
    "StoreError",
    "StoreUnavailable",
    "Subscription",
    "UnknownApproval",
    "UnknownOutboxItem",
    "open_bus",
]

#: Where each name lives. A name's module is imported the first time the name is asked
#: for (PEP 562), so importing one name does not import the whole namespace (DESIGN §10).
_HOMES = {
    "._approvals": (
        "APPROVALS_BUCKET",
        "AlreadyDecided",
        "ApprovalFromNewerTiller",
        "ApprovalStatus",
        "ApprovalStore",
        "HeldApproval",
        "MalformedApproval",
        "UnknownApproval",
    ),
    "._bus": (
        "DEFAULT_LEASE",
        "DEFAULT_MAX_DELIVER",
        "Bus",
        "BusClosed",
        "BusMessage",
        "Clock",
        "DeadLetter",
        "Entry",
        "Job",
        "JobLeaseLost",
        "JobQueue",
        "KeyValue",
        "Lease",
        "NotFound",
        "QueueDepth",
        "QueueOptions",
        "RevisionConflict",
        "StoreError",
        "StoreUnavailable",
        "Subscription",
        "check_subject",
        "decode_key",
        "encode_key",
        "encoded_prefix",
    ),
    "._checkpoints": (
        "DEFAULT_BUCKET",
        "AlreadyResumed",
        "Checkpoint",
        "CheckpointFromNewerTiller",
        "CheckpointStore",
        "LeaseLost",
        "RunStillRunning",
        "CallLog",
        "Status",
    ),
    "._control": ("CONTROL_BUCKET", "ControlStore", "MalformedControl", "ControlWatcher"),
    "._durability": ("RunDurability", "StoreDurability"),
    "._event_log": ("EventLog", "EventLogFromNewerTiller", "EventLogWriter"),
    "._file_checkpoints": ("FILE_BLOBS_BUCKET", "FILE_CHECKPOINTS_BUCKET", "FileCheckpoints"),
    "._file_manifest": (
        "FileCheckpointFromNewerTiller",
        "FileRestoreFailed",
        "MalformedFileCheckpoint",
        "RestoreReport",
        "FileRecord",
        "decode_records",
        "encode_records",
    ),
    "._mailbox": (
        "MAILBOX_BUCKET",
        "MailboxFull",
        "MailboxStore",
        "MailClaim",
        "MailIdentity",
        "MailMessage",
        "MailStatus",
        "MalformedMail",
        "MessageTooLarge",
        "QuarantinedMail",
        "check_mail_name",
    ),
    "._memory": ("MemoryBus",),
    "._open": ("open_bus",),
    "._outbox": (
        "OUTBOX_BUCKET",
        "MalformedOutboxItem",
        "OutboxItem",
        "OutboxItemFromNewerTiller",
        "OutboxResult",
        "OutboxStatus",
        "OutboxStatusError",
        "OutboxStore",
        "UnknownOutboxItem",
    ),
    "._records": (
        "MalformedRecord",
        "RecordFromNewerTiller",
        "Record",
        "create_or_get",
        "decode_record",
        "encode_record",
    ),
    "._sqlite": ("SqliteBus",),
    "._workspace_checkpoints": (
        "CHUNK_BYTES",
        "MAX_SNAPSHOT_READ_BYTES",
        "Decided",
        "WorkspaceOutcome",
        "WorkspaceRecorder",
        "restore_workspace",
    ),
    "._workspace_fs": ("UnsafePath", "open_file", "set_mode", "walk_workspace"),
}

# Hidden from type checkers, which see the names through the imports above: a visible
# module `__getattr__` would make every misspelt `tiller.store.X` type-check.
if not TYPE_CHECKING:
    __getattr__ = _public.lazy_names(__name__, globals(), _HOMES)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
