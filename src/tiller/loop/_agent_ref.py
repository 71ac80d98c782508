"""What a checkpoint carries so another process can continue the run without its code.

An `Agent` holds live objects (a model client, tool functions) and a `RunContext` holds
some too (the approver, the cancel token, the store), so neither can be stored. The
checkpoint carries instead:

- `RunState.agent_ref`: where the agent is defined, `"module:attr"` — an `Agent`, or an
  *agent factory*: a function returning one, called with the run's model string when it
  takes a `model` parameter (and with no arguments otherwise); `load_agent(ref, model=)`
  imports it again. That is what "agent factory" means everywhere (the CLI's `--agent`,
  `tiller serve MODULE:AGENT`, `tiller submit`, workers, evals);
- `RunState.policy`: the run's policy *as data* (`policy_of`): the jail and its limits,
  the phase, the withheld tools, the budget's limits and what the run tree has spent, and
  the loop's serializable options (caps and the built-in review policies), the
  configuration pinned when the run started (`RunContext.pinned_policy`, law 11), and
  the run's mailbox route (`mailbox`: its name, whether it receives, whether it was given
  `message_send`; run state version 6 — an older state has none).
  `run_context_from(state, store=..., approver=...)` rebuilds the `RunContext`, the caller
  giving only what is not data; `options_from(state)` rebuilds the `RunOptions`.

The spent budget is restored with the limits on purpose: a resume must not get a fresh
purse (law 7). A review policy that is not one of the built-ins cannot be rebuilt, and a
resume that would silently drop it would let the run act unreviewed, so `options_from`
refuses it (law 3: policy fails closed) and the caller passes its own `RunOptions`.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..cancel import CancellationToken
from ..conversation import Usage
from ..errors import UsageError
from ..phase import Phase
from ..policy import Approver
from ..state import RunState
from ..store import Bus
from ..tools import SPILL_SUBDIR, Jail, SafetyMode, WebAccess
from ._budget import Budget, Pricing
from ._context import RunContext
from ._mailbox_route import MailboxRoute
from ._options import RunOptions
from ._review import (
    NeverReview,
    PauseEveryStep,
    PauseOnRisk,
    PauseOnTools,
    PauseOnWrites,
    ReviewPolicy,
)

if TYPE_CHECKING:  # `_agent` imports the loop, which may import this module
    from ._agent import Agent

__all__ = [
    "POLICY_VERSION",
    "jail_root_of",
    "load_agent",
    "options_from",
    "policy_of",
    "record_policy",
    "refuse_code_inside",
    "run_context_from",
]

#: Bumped when the shape of `RunState.policy` changes; older shapes are refused by name.
POLICY_VERSION = 1


# ── the agent ────────────────────────────────────────────────────────────────────────


def load_agent(ref: str, *, model: str | None = None, outside: Path | None = None) -> Agent:
    """The `Agent` that `ref` (`"package.module:attr"`, `attr` may be dotted) names: the
    object itself if it is an `Agent`, else what calling it returns — with `model=` when
    a model string is given and the factory takes a `model` parameter (so one factory
    serves runs on different models: the run records its `model_spec`), else with no
    arguments.

    `outside`: the jail of the run the agent is for. Its model can write there, so an
    agent whose code lives there is refused before it is imported (law 11: a resume, an
    approval or a denial in another process would otherwise run what the model wrote, on
    the host).

    Every failure is a `UsageError` saying what to fix (the module cannot be imported or
    fails as it runs, the attribute is missing, the object is not an agent, the factory
    raises, its code is in the jail)."""
    from ._agent import Agent  # here: `_agent` imports the loop, which may import this

    module_name, sep, attr_path = ref.partition(":")
    if not sep or not module_name or not attr_path:
        raise UsageError(
            f"agent reference {ref!r} is not 'module:attr' (for example 'myapp.agents:coder')"
        )
    if outside is not None:
        refuse_code_inside(module_name, outside, ref=ref)
    target: Any = _import(module_name, ref)
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise UsageError(
                f"module {module_name!r} has no attribute {attr_path!r} (agent reference {ref!r})"
            ) from None
    if isinstance(target, Agent):
        if target.ref is None:
            target.ref = ref
        return target
    if not callable(target):
        raise UsageError(
            f"{ref!r} is a {type(target).__name__}, not an Agent or a function returning "
            "one (an agent factory: called with model= when it takes a model parameter)"
        )
    given_model = model is not None and _takes_model(target)
    try:
        built = target(model=model) if given_model else target()
    except TypeError as exc:
        raise UsageError(
            f"calling {ref!r} failed ({exc}); an agent factory takes no arguments, or "
            "only `model` (the model string, e.g. def make(model: str | None = None))"
        ) from exc
    except UsageError:
        raise  # the factory's own, saying what to fix (the coding agent's "needs a model")
    except Exception as exc:
        raise UsageError(f"the agent factory {ref!r} failed: {_failure(exc)}") from exc
    if not isinstance(built, Agent):
        raise UsageError(f"{ref!r}() returned a {type(built).__name__}, not an Agent")
    if built.ref is None:
        built.ref = ref
    if given_model and built.model_spec is None:
        # The run records it, so a resume calls the factory with the same model again
        # (a factory that builds its own Model object left none to record).
        built.model_spec = model
    return built


def refuse_code_inside(module_name: str, jail_root: Path, *, ref: str) -> None:
    """`UsageError` when the top-level package of `module_name` (what importing it runs
    first) is found inside `jail_root`. Looked up without being imported: a top-level
    name's spec is found, not executed."""
    top = module_name.split(".", 1)[0]
    loaded = sys.modules.get(top)
    try:
        spec = loaded.__spec__ if loaded is not None else importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return  # the import itself says what is wrong
    if spec is None:
        return
    places = list(spec.submodule_search_locations or ())
    if spec.origin is not None and spec.has_location:
        places.append(spec.origin)
    root = jail_root.resolve()
    for place in places:
        if Path(place).resolve().is_relative_to(root):
            raise UsageError(
                f"the agent {ref!r} is defined in {place}, inside the run's workspace "
                f"{root}, which the run's model can write: loading it (now, or to resume, "
                "approve or deny the run) would run what the model wrote, on this machine. "
                "Keep the agent's code outside the workspace: install it, or give the run "
                "a workspace that does not contain it (-w DIR)"
            )


def jail_root_of(state: RunState) -> Path | None:
    """The jail root the run's policy records (None: a state without one)."""
    policy = state.policy or {}
    root = policy.get("jail_root")
    return Path(root) if isinstance(root, str) else None


def _import(module_name: str, ref: str) -> Any:
    """The module, or a `UsageError` saying why it cannot be had."""
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(
            f"cannot import module {module_name!r} of agent reference {ref!r}: {exc}. "
            "Is it installed, or is its directory the current one or on PYTHONPATH?"
        ) from exc
    except Exception as exc:  # the module's own code failed as it ran (or did not parse)
        raise UsageError(
            f"importing module {module_name!r} of agent reference {ref!r} failed: {_failure(exc)}"
        ) from exc


def _failure(exc: BaseException) -> str:
    """`RuntimeError: no config file`; a syntax error with where it is."""
    if isinstance(exc, SyntaxError):
        return f"SyntaxError: {exc.msg} ({exc.filename}, line {exc.lineno})"
    return f"{type(exc).__name__}: {exc}"


def _takes_model(factory: Any) -> bool:
    try:
        return "model" in inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin or a C callable: no signature to read
        return False


# ── the policy as data ───────────────────────────────────────────────────────────────


def policy_of(run_ctx: RunContext, options: RunOptions | None = None) -> dict[str, Any]:
    """`run_ctx`'s serializable policy (and `options`' serializable part), for
    `RunState.policy`. JSON-ready: strings, numbers, lists and dicts only."""
    jail = run_ctx.jail
    budget = run_ctx.budget
    default_spill = jail.root / SPILL_SUBDIR  # as Jail makes it (no filesystem call)
    policy: dict[str, Any] = {
        "version": POLICY_VERSION,
        "jail_root": str(jail.root),
        # Only when chosen: a default spill dir follows the jail if the root is moved.
        "spill_dir": None if jail.spill_dir == default_spill else str(jail.spill_dir),
        "output_budget_bytes": jail.output_budget_bytes,
        "shell_timeout": jail.shell_timeout,
        # The live mode as it was at this checkpoint, and the shell's grants.
        "safety_mode": jail.safety.mode.value,
        "network": jail.network,
        "unsandboxed_shell": jail.unsandboxed_shell,
        # Where web_fetch may connect (tiller.toml [web]), so a resume keeps it.
        "web": jail.web.to_data(),
        "phase": run_ctx.phase.value,
        "withheld": sorted(run_ctx.withheld),
        "compact_at_tokens": run_ctx.compact_at_tokens,
        "budget": {
            "max_steps": budget.max_steps,
            "max_output_tokens": budget.max_output_tokens,
            "max_cost_usd": budget.max_cost_usd,
            "final_answer_reserve": budget.final_answer_reserve,
            "pricing": {
                key: {"input": p.input, "output": p.output, "cached_input": p.cached_input}
                for key, p in budget.pricing.items()
            },
            "spent": {
                "steps": budget.steps,
                "usage": budget.usage.model_dump(),
                "cost_usd": budget.cost_usd,
                "unpriced_models": sorted(budget.unpriced_models),
            },
        },
    }
    if run_ctx.pinned_policy is not None:
        # The configuration read when the run started (law 11): resumes use it as is.
        policy["pinned"] = dict(run_ctx.pinned_policy)
    if run_ctx.mailbox is not None:
        # Who the run is in the mailbox, read once with the rest: every process that
        # continues it attaches the same route (law 11).
        policy["mailbox"] = run_ctx.mailbox.to_data()
    if options is not None:
        policy["options"] = {
            "max_steps": options.max_steps,
            "max_history_tokens": options.max_history_tokens,
            "max_response_bytes": options.max_response_bytes,
            "output_retries": options.output_retries,
            "empty_turn_nudges": options.empty_turn_nudges,
            "max_tokens": options.max_tokens,
            "temperature": options.temperature,
            "review": _review_to_data(options.review_policy),
            # Guardrails and capture sinks are code: a resume passes them again.
            "guardrails": len(options.guardrails),
        }
    return policy


def record_policy(
    state: RunState,
    run_ctx: RunContext,
    options: RunOptions | None = None,
    *,
    agent_ref: str | None = None,
) -> RunState:
    """Write `run_ctx`'s policy (and `agent_ref`, if given) into `state`; returns `state`.

    The loop calls this at each checkpoint so the stored budget is current; a caller can
    also stamp a fresh `RunState` before `agent.run_in(ctx, state, ...)`."""
    state.policy = policy_of(run_ctx, options)
    if agent_ref is not None:
        state.agent_ref = agent_ref
    return state


def _stored_policy(state: RunState) -> dict[str, Any]:
    policy = state.policy
    if policy is None:
        raise UsageError(
            f"the checkpoint of run {state.run_id!r} has no stored policy (it was written "
            "without one); pass a RunContext (run_ctx=...) to resume it"
        )
    if policy.get("version") != POLICY_VERSION:
        raise UsageError(
            f"the checkpoint of run {state.run_id!r} stores policy version "
            f"{policy.get('version')!r}; this tiller reads version {POLICY_VERSION}"
        )
    return policy


def run_context_from(
    state: RunState,
    *,
    store: Bus | None,
    approver: Approver | None = None,
    cancel: CancellationToken | None = None,
    workspace: str | Path | None = None,
) -> RunContext:
    """Rebuild the `RunContext` a checkpointed run had, from `state.policy`.

    The caller gives what is not data: the `store`, the `approver` (None: calls that need
    approval are blocked), the `cancel` token. `workspace` replaces the stored jail root
    (the run continues on another machine, where the project lives elsewhere). A run that
    had a mailbox gets its route back, on `store` (without a store, none: a resume
    refuses that, see `tiller.loop.FromCheckpoint`)."""
    policy = _stored_policy(state)
    recorded = policy.get("mailbox")
    route = MailboxRoute.from_data(store, recorded) if recorded and store is not None else None
    root = Path(workspace) if workspace is not None else Path(policy["jail_root"])
    spill = policy.get("spill_dir")
    jail = Jail(
        root,
        spill_dir=spill if spill is not None and workspace is None else None,
        output_budget_bytes=policy["output_budget_bytes"],
        shell_timeout=policy["shell_timeout"],
        # Absent from older checkpoints: the defaults (ask, no network, sandboxed).
        safety=SafetyMode(policy.get("safety_mode", SafetyMode.ASK.value)),
        network=bool(policy.get("network", False)),
        unsandboxed_shell=bool(policy.get("unsandboxed_shell", False)),
        # Absent from older checkpoints: public addresses only.
        web=WebAccess.from_config(policy.get("web") or {}),
    )
    stored = policy["budget"]
    spent = stored["spent"]
    budget = Budget(
        max_steps=stored["max_steps"],
        max_output_tokens=stored["max_output_tokens"],
        max_cost_usd=stored["max_cost_usd"],
        final_answer_reserve=stored["final_answer_reserve"],
        pricing={
            key: Pricing(p["input"], p["output"], p.get("cached_input"))
            for key, p in stored["pricing"].items()
        },
        steps=spent["steps"],
        usage=Usage.model_validate(spent["usage"]),
        cost_usd=spent["cost_usd"],
        unpriced_models=set(spent["unpriced_models"]),
    )
    return RunContext(
        jail=jail,
        approver=approver,
        budget=budget,
        cancel=cancel,
        phase=Phase(policy["phase"]),
        withheld=frozenset(policy["withheld"]),
        compact_at_tokens=policy["compact_at_tokens"],
        store=store,
        pinned_policy=policy.get("pinned"),
        mailbox=route,
    )


def options_from(state: RunState, base: RunOptions | None = None) -> RunOptions:
    """The run's `RunOptions` rebuilt from `state.policy` over `base` (its guardrails,
    capture sink, checkpoint bucket and `before_call_recorded` are kept: they are not
    data). Without stored options, `base` as it is."""
    base = base if base is not None else RunOptions()
    stored = (state.policy or {}).get("options")
    if stored is None:
        return base
    if stored.get("guardrails") and not base.guardrails:
        raise UsageError(
            f"run {state.run_id!r} ran with {stored['guardrails']} guardrail(s), which "
            "cannot be stored; pass RunOptions with them to resume it"
        )
    review = _review_from_data(state.run_id, stored["review"])
    return RunOptions(
        max_steps=stored["max_steps"],
        max_history_tokens=stored["max_history_tokens"],
        max_response_bytes=stored["max_response_bytes"],
        guardrails=base.guardrails,
        output_retries=stored["output_retries"],
        empty_turn_nudges=stored["empty_turn_nudges"],
        max_tokens=stored["max_tokens"],
        temperature=stored["temperature"],
        capture_sink=base.capture_sink,
        checkpoint_bucket=base.checkpoint_bucket,
        review_policy=review,
        before_call_recorded=base.before_call_recorded,
    )


def _review_to_data(policy: ReviewPolicy) -> dict[str, Any]:
    if isinstance(policy, NeverReview):
        return {"kind": "never"}
    if isinstance(policy, PauseOnWrites):
        return {"kind": "writes"}
    if isinstance(policy, PauseEveryStep):
        return {"kind": "every_step"}
    if isinstance(policy, PauseOnTools):
        return {"kind": "tools", "names": sorted(policy._names)}
    if isinstance(policy, PauseOnRisk):
        return {"kind": "risk", "minimum": policy.minimum.value}
    kind = type(policy)
    return {"kind": "custom", "type": f"{kind.__module__}.{kind.__qualname__}"}


def _review_from_data(run_id: str, data: dict[str, Any]) -> ReviewPolicy:
    kind = data.get("kind")
    if kind == "never":
        return NeverReview()
    if kind == "writes":
        return PauseOnWrites()
    if kind == "every_step":
        return PauseEveryStep()
    if kind == "tools":
        return PauseOnTools(data["names"])
    if kind == "risk":
        return PauseOnRisk(data["minimum"])
    raise UsageError(
        f"run {run_id!r} was reviewed by {data.get('type', kind)!r}, which cannot be rebuilt "
        "from the checkpoint; pass RunOptions with that review policy to resume it"
    )
