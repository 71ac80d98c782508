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

from urllib.parse import parse_qsl, urlsplit

from .. import _public
from ..errors import UsageError

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
    check_namespace,
    wall_clock,
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

_SQLITE_OPTIONS = ("poll_interval", "busy_timeout", "retention")


async def open_bus(
    url: str, *, clock: Clock = wall_clock, namespace: str = "", synced: bool = True
) -> Bus:
    """Open the Bus that `url` names (see the module docstring for the forms).

    `clock` gives lease and job-lease time (inject a fake one in tests); `namespace`
    prefixes every bucket, subject and queue, so users of one file or server stay apart.
    `synced=False` lets a SQLite store commit without syncing to disk (`SqliteBus`: only
    for writes that can be made again; the other stores ignore it).
    """
    check_namespace(namespace)
    parts = urlsplit(url)
    if parts.scheme == "memory":
        if parts.netloc or parts.path or parts.query:
            raise UsageError(f"{url!r}: a memory store takes no location; write 'memory://'")
        return MemoryBus(clock=clock, namespace=namespace, url=url)
    if parts.scheme == "sqlite":
        if parts.netloc or not parts.path.startswith("/") or len(parts.path) < 2:
            raise UsageError(
                f"{url!r}: write 'sqlite:///relative/path.db' or 'sqlite:////absolute/path.db'"
            )
        options: dict[str, float] = {}
        for name, raw in parse_qsl(parts.query, keep_blank_values=True):
            if name not in _SQLITE_OPTIONS:
                known = ", ".join(_SQLITE_OPTIONS)
                raise UsageError(f"{url!r}: unknown option {name!r}; the options are {known}")
            try:
                options[name] = float(raw)
            except ValueError:
                raise UsageError(f"{url!r}: {name} must be a number of seconds") from None
            if not options[name] > 0:
                raise UsageError(f"{url!r}: {name} must be positive")
        return await SqliteBus.open(
            parts.path[1:],
            clock=clock,
            namespace=namespace,
            url=url,
            synced=synced,
            **options,
        )
    if parts.scheme == "nats":
        # Imported here: nats-py is only loaded by programs that use NATS. (The ignore lets
        # this check before the module exists.)
        from ._nats import NatsBus  # type: ignore[import-not-found, unused-ignore]

        bus: Bus = await NatsBus.connect(url, clock=clock, namespace=namespace)
        return bus
    raise UsageError(
        f"{url!r}: unknown store; use 'memory://', 'sqlite:///path.db' or 'nats://host:4222'"
    )


# Front-door names report `tiller` as their module from here on (tiller._public).
_public.rehome(__name__, globals())
