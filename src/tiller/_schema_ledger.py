"""The schema-version ledger: every kind of record tiller stores, each version of its
schema, what changed at that version, and the first tiller that wrote it.

A stored record outlives the process that wrote it: a checkpoint is resumed by another
worker, a held approval is decided from another machine, a fleet is upgraded one worker at
a time. So every record carries its `schema_version`, and, from tiller 0.1.0 on, a
`written_by` naming the tiller that wrote it. A reader:

- reads the versions it knows, migrating an older one as it reads it (RunState 1 → 2 → 3,
  file checkpoints 1 → 2), and refuses an older version it cannot read with a message
  naming the version;
- refuses a version newer than it knows (`NewerSchemaError`), naming the tiller that
  wrote it, or "an unknown, newer tiller" when the record does not say, and telling the
  user to upgrade: reading on could misread fields it does not know.

A record without `written_by` (written before it existed) still loads. docs/
schema-versions.md is generated from this ledger (`render_markdown`); a test keeps the
two equal. Add a version here in the same change that writes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "LEDGER",
    "RecordKind",
    "SchemaVersion",
    "current_version",
    "newer_problem",
    "render_markdown",
    "tiller_version",
    "written_by_of",
]


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """One version of one record kind's schema."""

    number: int
    since: str  # the first tiller version that wrote it
    change: str  # what this version changed (for 1: what the record is)


@dataclass(frozen=True, slots=True)
class RecordKind:
    """A kind of stored record: where it lives and its versions, oldest first."""

    name: str
    where: str  # the bucket or file it is stored in
    code: tuple[str, ...]  # the modules (under src/tiller) that write and read it
    versions: tuple[SchemaVersion, ...]
    readable: tuple[int, ...]  # the versions this tiller reads (older ones migrated)

    @property
    def current(self) -> int:
        return self.versions[-1].number


_WRITTEN_BY = "Records written from tiller 0.1.0 on also carry `written_by`."


def _kind(
    name: str, where: str, code: tuple[str, ...], *versions: SchemaVersion
) -> tuple[str, RecordKind]:
    numbers = tuple(version.number for version in versions)
    return name, RecordKind(name, where, code, versions, numbers)


LEDGER: Mapping[str, RecordKind] = dict(
    [
        _kind(
            "run_state",
            "inside a checkpoint (`tiller-run-checkpoints`) and a suspended `RunResult`",
            ("state.py",),
            SchemaVersion(1, "0.1.0", "`RunState`: messages, step, usage, taint, phase, calls."),
            SchemaVersion(
                2,
                "0.1.0",
                "A tool call carries `provider_id` beside `id`, now always the runtime's "
                '(law 10). A version 1 call reads with `provider_id=""`, keeping its id. '
                + _WRITTEN_BY,
            ),
            SchemaVersion(
                3,
                "0.1.0",
                "One vocabulary (issue 15): the agent's typed state is `agent_state` (was "
                "`state`), a call record's step is `step` (was `turn`), the recorded "
                "policy's budget says `max_steps` and `spent.steps` (was `max_turns`, "
                "`turns`), the stop cause `turn_budget` is `step_budget`. An older state's "
                "keys are renamed as it is read, and `turn_budget` still reads.",
            ),
            SchemaVersion(
                4,
                "0.1.0",
                "Exactly once across a crash and a takeover (issue 16): `folded_steers` and "
                "`folded_mail`, the ids of the steers and the mail folded into the "
                "conversation, so a continued run folds neither again and re-delivers mail "
                "its run claimed but never checkpointed. A version 3 state reads with no "
                "steers folded and `folded_mail` unknown (null: nothing is re-delivered).",
            ),
            SchemaVersion(
                5,
                "0.1.0",
                "`model_calls` (issue 18): the calls the run made to its model, every "
                "attempt counted, so a resumed run's `ModelRequest.run_call` goes on where "
                "it stopped and a scripted model continues the run's script. A version 4 "
                "state reads with `model_calls` equal to its `step`.",
            ),
            SchemaVersion(
                6,
                "0.1.0",
                "`model_calls_history` (issue 18): the count of model calls at which each "
                "conversation length was first answered, so `tiller rewind` puts "
                "`model_calls` back with the conversation. A version 5 state reads with "
                "none; a rewind of it keeps its count.",
            ),
            SchemaVersion(
                7,
                "0.1.0",
                "The recorded policy's `mailbox` (review of issue 18): the run's mailbox "
                "route (`name`, `deliver`, `bucket`, `max_per_turn`, `max_bytes`, "
                "`max_pending`, `send_tool`), so a run started with `--mailbox` keeps its "
                "mailbox and `message_send` when it is approved or resumed in another "
                "process. A version 6 or older state reads with no mailbox.",
            ),
            SchemaVersion(
                8,
                "0.1.0",
                "`trace_context` (issue 20): the W3C `traceparent` every segment of the run "
                "goes under and the previous segment's span, so a resumed run continues "
                "the same trace and links to the span it continues. A version 7 or older state "
                "reads with none.",
            ),
        ),
        _kind(
            "run_checkpoint",
            "`tiller-run-checkpoints`, key `<run_id>`",
            ("store/_checkpoints.py",),
            SchemaVersion(
                1,
                "0.1.0",
                "`{status, state, continued_as?}` around a `RunState`. " + _WRITTEN_BY,
            ),
            SchemaVersion(
                2,
                "0.1.0",
                "`epoch`: the lease epoch of the process that wrote it (fencing, issue 16: "
                "a process whose run was taken over writes nothing more). A version 1 "
                "record reads with epoch 0.",
            ),
            SchemaVersion(
                3,
                "0.1.0",
                "`gen`, new at each write: a durable run writes its state whole only now "
                "and then, and per step a delta of what changed after the record of that "
                "`gen` (`run_checkpoint_steps`, issue 19). A tiller reading version 2 "
                "only would miss those steps, so it refuses the record. A version 2 "
                "record reads as before, with no steps after it.",
            ),
        ),
        _kind(
            "run_checkpoint_steps",
            "`tiller-run-checkpoints`, key `<run_id>/steps/<n>`",
            ("store/_checkpoints.py", "store/_checkpoint_steps.py"),
            SchemaVersion(
                1,
                "0.1.0",
                "A segment of the step deltas after the checkpoint of its `gen`: "
                "`{epoch, gen, first, deltas}` (`first`: the number of its first delta "
                "since the checkpoint), "
                "each delta `{at, messages?, calls?, result_ids?, fields?, extend?}` (keep "
                "the first `at` messages, append these; the call records, result ids and "
                "other fields that changed; `extend`: `{field: [n, items]}`, a list field "
                "kept to its first `n` items with these appended). " + _WRITTEN_BY,
            ),
        ),
        _kind(
            "held_approval",
            "`tiller-approvals`",
            ("store/_approvals.py", "store/_records.py"),
            SchemaVersion(
                1, "0.1.0", "A held call awaiting a person, and its decision. " + _WRITTEN_BY
            ),
        ),
        _kind(
            "outbox_item",
            "`tiller-outbox`",
            ("store/_outbox.py", "store/_records.py"),
            SchemaVersion(
                1,
                "0.1.0",
                "A staged call: arguments as drafted and edited, status, taint. " + _WRITTEN_BY,
            ),
        ),
        _kind(
            "mail",
            "`tiller-mailbox`: `msg/<to>/<id>`, `head/<to>`, `quarantine/...`",
            ("store/_mailbox.py", "store/_records.py"),
            SchemaVersion(
                1,
                "0.1.0",
                "Messages, each recipient's head, and quarantined damaged messages. " + _WRITTEN_BY,
            ),
        ),
        _kind(
            "control",
            "`tiller-control`: `<run_id>/cancel`, `<run_id>/steer/<id>`, the steer head",
            ("store/_control.py", "store/_records.py"),
            SchemaVersion(1, "0.1.0", "Cancel and steer requests for a run. " + _WRITTEN_BY),
        ),
        _kind(
            "run_job",
            "a fleet's run queue (`tiller-runs`): a job's payload",
            ("fleet/_job.py",),
            SchemaVersion(
                1,
                "0.1.0",
                "`{kind, run_id, agent, model, prompt, thread_id, workspace, budget, batch, "
                "submitted_at}`: a run for a worker to start or continue.",
            ),
            SchemaVersion(
                2,
                "0.1.0",
                "`budget.pricing`: the prices the run's budget carries (`{model: {input, "
                "output, cached_input}}`, USD per million tokens), so a worker counts its "
                "dollars and a dollar ceiling stops it. Version 1 is read as version 2 "
                "without prices.",
            ),
            SchemaVersion(
                3,
                "0.1.0",
                "`traceparent` (issue 20): the W3C trace context of the submitter, so a "
                "traced worker's run goes under it. Versions 1 and 2 read without one.",
            ),
        ),
        _kind(
            "run_result",
            "`tiller-run-results`, key `<run_id>`",
            ("fleet/_results.py",),
            SchemaVersion(
                1,
                "0.1.0",
                "How a fleet run ended (or that it waits for a person): status, stop cause, "
                "text, output, usage, cost, steps, error, worker, queue, attempt, batch, the "
                "job's workspace spec, and the stored diff of a snapshot workspace (`diff_ref`). "
                + _WRITTEN_BY,
            ),
        ),
        _kind(
            "fleet_batch",
            "`tiller-fleet-batches`: `<batch>/runs/<run_id>`, `<batch>/cancelled`",
            ("fleet/_batches.py",),
            SchemaVersion(
                1, "0.1.0", "A batch's members, and its cancellation request. " + _WRITTEN_BY
            ),
        ),
        _kind(
            "fleet_worker",
            "`tiller-fleet-workers`, key `<worker name>`",
            ("fleet/_worker_registry.py",),
            SchemaVersion(
                1,
                "0.1.0",
                "A worker's heartbeat: name, host, pid, concurrency, in flight, started, "
                "beat_at, lease, expires_at. " + _WRITTEN_BY,
            ),
        ),
        _kind(
            "event_log_batch",
            "`tiller-run-events`, key `<run_id>/<batch_no>`",
            ("store/_event_log.py",),
            SchemaVersion(
                1, "0.1.0", "`{start, events}`: a batch of the run's AG-UI events. " + _WRITTEN_BY
            ),
        ),
        _kind(
            "file_checkpoint",
            "`tiller-file-checkpoints`: manifests, counters, workspace manifests",
            ("store/_file_manifest.py", "store/_file_checkpoints.py"),
            SchemaVersion(1, "0.1.0", "Manifests of the paths a file tool wrote (`files`)."),
            SchemaVersion(
                2,
                "0.1.0",
                'Workspace manifests (`kind: "workspace"`, before a shell command), '
                "directories, `unsaved` and `chunks` files, the `stat` signature. A version "
                '1 manifest reads as `kind: "files"`. ' + _WRITTEN_BY,
            ),
        ),
        _kind(
            "capture",
            "`tiller-captures` and capture files (JSON or JSON lines)",
            ("capture.py",),
            SchemaVersion(
                1,
                "0.1.0",
                "A header `{run_id}` and per model call the new messages and the response; "
                "tool results. " + _WRITTEN_BY,
            ),
            SchemaVersion(
                2,
                "0.1.0",
                "A model call record's `agent` (issue 18): the request's system prompt, tools "
                "and output schema (`request_shape`), when they changed since the run's "
                "previous record, so a replay diverges on a changed agent. A version 1 "
                "capture reads with no `agent`: it replays unchecked for them.",
            ),
        ),
        _kind(
            "fleet_limit",
            "`tiller-fleet-limits`: `runs`, `calls/<model>`, `rpm/<model>`, `pause/<provider>`",
            ("fleet/_limit_records.py", "fleet/_limits.py"),
            SchemaVersion(
                1,
                "0.1.0",
                "Fleet-wide flow control, by compare-and-set: slot records `{holders: {slot: "
                "[holder, expires_at, token]}}`, a minute window `{window, count}`, a 429 pause "
                "`{until, reason, by}`. " + _WRITTEN_BY,
            ),
        ),
        _kind(
            "lease",
            "any bucket: a run's lease, a worker's claim",
            ("store/_bus.py",),
            SchemaVersion(1, "0.1.0", "`{owner, expires_at}`, written by compare-and-set."),
        ),
        _kind(
            "dead_letter",
            "the `Tiller-Dead-Letter` header of a NATS queue's dead-letter stream "
            "(`TQD_<namespace>-<queue>`), beside the job's payload",
            ("store/_nats.py",),
            SchemaVersion(
                1,
                "0.1.0",
                "`{id, reason, attempt, at}`: why a job will never run again. (Until issue "
                "16, the NATS queue kept a `job` state record per job instead; such a "
                "queue's stream is refused, to be deleted.) " + _WRITTEN_BY,
            ),
        ),
        _kind(
            "sqlite_database",
            "the `meta` table of a `sqlite:///` store",
            ("store/_sqlite.py",),
            SchemaVersion(1, "0.1.0", "The tables of the embedded store."),
            SchemaVersion(
                2,
                "0.1.0",
                "Job queues: dead jobs (termed, or out of deliveries) move from `jobs` to "
                "`dead_letters`, and claims read the `jobs_due` index; a version 1 file is "
                "migrated when opened.",
            ),
            SchemaVersion(
                3,
                "0.1.0",
                "Job queues: a queue's lease and delivery limit are its row of `queues`, "
                "the same for every process (they were each handle's own); an older file is "
                "migrated when opened, its queues starting with the defaults.",
            ),
        ),
        _kind(
            "taint_index",
            "`.tiller/taint.json` in a workspace",
            ("tools/_taint_index.py",),
            SchemaVersion(1, "0.1.0", "The taint of the files tainted runs wrote."),
        ),
        _kind(
            "batch_budget",
            "`tiller-batch-budgets`, keys `<batch_id>` and `<batch_id>/runs/<run_id>`",
            ("fleet/_batch_budget.py",),
            SchemaVersion(
                1,
                "0.1.0",
                "`<batch_id>`: `{batch_id, limits, held, spent, runs_reserved, runs_settled, "
                "runs_reclaimed, pending}`, a batch's shared budget (steps, output tokens, "
                "nano-dollars) and its totals; `<batch_id>/runs/<run_id>`: `{batch_id, run_id, "
                "seq, status, ceilings, final_answer_reserve, spent}`, one run's reservation "
                "(issue 16). " + _WRITTEN_BY,
            ),
        ),
        _kind(
            "eval_case_result",
            "`tiller-eval-results`, key `<eval_id>/cases/<case_id>/e<epoch>`",
            ("evals/_results.py",),
            SchemaVersion(
                1,
                "0.1.0",
                "One run of an eval case in one epoch (issue 17): status (`scored`, "
                "`cancelled`, `not_run`), the case as data, the outcome (text, output, stop "
                "cause, tool trace, transcript, usage, cost, steps, duration, error), the scores "
                "by scorer, what scoring spent (`scoring_usage`, `scoring_cost_usd`: an LLM "
                "judge's calls), and references to the run's capture, its workspace as the run "
                "left it (a snapshot manifest) and its diff. " + _WRITTEN_BY,
            ),
        ),
        _kind(
            "eval_run",
            "`tiller-eval-results`, key `<eval_id>/eval`",
            ("evals/_results.py",),
            SchemaVersion(
                1,
                "0.1.0",
                "An eval's description: its agent, epochs, scorers, case count, budget limits, "
                "when it was started and last run. " + _WRITTEN_BY,
            ),
        ),
        _kind(
            "compaction_audit",
            "`tiller-compactions`, key `<run_id>/<number>`",
            ("loop/_compaction.py",),
            SchemaVersion(1, "0.1.0", "The messages a compaction replaced, and why."),
        ),
        _kind(
            "workspace_diff",
            "`tiller-workspaces`: `diff/<sha256>`, what a fleet run changed in its snapshot",
            ("fleet/_workspace_diff.py",),
            SchemaVersion(
                1,
                "0.1.0",
                "A run's changes against its workspace snapshot (`manifest`): `changes`, "
                "each added, modified or deleted, with a unified text diff or sizes. "
                + _WRITTEN_BY,
            ),
        ),
    ]
)


def tiller_version() -> str:
    """This tiller's version (`tiller.__version__`, its one home), read on first use:
    the records' modules sit below the package root, which is imported before them."""
    from . import __version__

    return __version__


def current_version(kind: str) -> int:
    return LEDGER[kind].current


def written_by_of(record: Mapping[str, object]) -> str | None:
    """The `written_by` a raw record carries (None when it predates the field)."""
    writer = record.get("written_by")
    return writer if isinstance(writer, str) and writer else None


def newer_problem(written_by: str | None) -> str:
    """What to add when refusing a record whose schema is newer than this tiller knows:
    who wrote it, and what to do. Readers put it after their own "schema version N; this
    tiller reads M"."""
    writer = f"tiller {written_by}" if written_by else "an unknown, newer tiller"
    return (
        f"it was written by {writer} (this is tiller {tiller_version()}): upgrade tiller to read it"
    )


def render_markdown() -> str:
    """docs/schema-versions.md, from the ledger."""
    lines = [
        "# Schema versions",
        "",
        "<!-- Generated from src/tiller/_schema_ledger.py (render_markdown); "
        "tests/test_schema_ledger.py keeps it equal. Edit the ledger, not this file. -->",
        "",
        "Every record tiller stores carries a `schema_version`, and from tiller 0.1.0 on a",
        "`written_by` (the tiller that wrote it). An older version is migrated as it is read",
        "or refused; a newer one is refused with `NewerSchemaError`, naming the tiller that",
        "wrote it: upgrade tiller to read it.",
    ]
    for kind in LEDGER.values():
        readable = ", ".join(str(number) for number in kind.readable)
        lines += [
            "",
            f"## `{kind.name}`",
            "",
            f"Where: {kind.where}. Written and read by "
            + ", ".join(f"`{module}`" for module in kind.code)
            + f". This tiller writes version {kind.current} and reads {readable}.",
            "",
            "| version | first written by | what changed |",
            "|---|---|---|",
        ]
        lines += [
            f"| {version.number} | {version.since} | {version.change} |"
            for version in kind.versions
        ]
    return "\n".join(lines) + "\n"
