"""WorldEngine: steps a world with its agents and records every decision to the trace.

Each step: agents act in a canonical order (sorted ids, or a seeded shuffle per step), every
decision and outcome becomes a row, the world's digest and the rows are chained into a state
hash, and the step is committed to the trace in one transaction.

Scheduling:
- ``sequential``: each agent observes the world after the agents before it have acted this step.
- ``simultaneous``: every agent observes one snapshot, then the actions are applied in order.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from vivarium.engine.deciding import Decider, Decision, older_objects_frozen
from vivarium.errors import ConfigError, RunInterrupted
from vivarium.policies.base import AgentPolicy, policy_name
from vivarium.policies.random import RandomBatch
from vivarium.seeding import canonical_json, derive_seed
from vivarium.trace.db import TraceDb
from vivarium.trace.records import GENESIS_HASH, StepRecord, encode_column, hash_record
from vivarium.trace.schema import MAX_AGENTS_PER_STEP
from vivarium.types import ActionResult, RunMetadata
from vivarium.worlds.channel import InMemoryChannel
from vivarium.worlds.registry import ActionRegistry

Scheduling = Literal["sequential", "simultaneous"]
Order = Literal["sorted", "shuffle"]


class WorldEngineConfig(BaseModel):
    """How the engine steps: run id, scheduling, ordering and what observations carry."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    seed: int = Field(
        default=0, ge=0, description="Seeds the per-step shuffle when order='shuffle'."
    )
    deterministic_timestamps: bool = True
    message_history_limit: int = Field(default=20, ge=0)
    scheduling: Scheduling = "sequential"
    order: Order = "sorted"
    batch: bool = Field(
        default=True, description="Let random agents decide in one vectorised batch per step."
    )
    max_concurrency: int = Field(default=16, ge=1, description="Async decisions in flight at once.")
    agent_timeout_s: float | None = Field(
        default=None, gt=0, description="Per-attempt limit for an async decision."
    )
    agent_retries: int = Field(default=0, ge=0, description="Retries after a timeout or error.")
    on_llm_error: Literal["stop", "fallback"] = Field(
        default="stop",
        description="An LLM outage past the retries: stop the run (interrupted, resumable) or "
        "record fallbacks.",
    )


StepCallback = Callable[[int, StepRecord], None]


def _json_or_none(value: dict[str, Any] | None) -> str | None:
    return canonical_json(value) if value else None


def _quoted_names(names: tuple[str, ...]) -> np.ndarray:
    return np.array([json.dumps(name, ensure_ascii=False) for name in names], dtype=object)


def _event_arguments_json(values: np.ndarray, emitting: np.ndarray, t: int) -> str:
    """The JSON array of emit_event arguments (each a JSON string), null where no event.

    Byte-for-byte what ``encode_column`` makes of the canonical JSON of each request's
    arguments on the per-agent path (a test checks the two paths write identical files).
    """
    items = np.full(len(values), "null", dtype=object)
    prefix = '"{\\"seen_time_step\\":' + str(t) + ',\\"value\\":'
    items[emitting] = [f'{prefix}{v}}}"' for v in values[emitting].tolist()]
    return "[" + ",".join(items.tolist()) + "]"


class WorldEngine:
    """Runs ``agents`` (id -> policy) in ``world`` and writes each step to ``trace_db``."""

    def __init__(
        self,
        config: WorldEngineConfig,
        agents: Mapping[str, AgentPolicy],
        world: Any | None = None,
        trace_db: TraceDb | None = None,
        *,
        channel: InMemoryChannel | None = None,
        metadata: RunMetadata | None = None,
        checkpoint_every: int | None = None,
    ) -> None:
        if not agents:
            raise ConfigError("a run needs at least one agent")
        if len(agents) > MAX_AGENTS_PER_STEP:
            raise ConfigError(f"at most {MAX_AGENTS_PER_STEP} agents per run")
        for agent_id, policy in agents.items():
            if not callable(getattr(policy, "decide", None)):
                raise ConfigError(f"policy for {agent_id} has no decide() method")
        self.config = config
        self.agent_ids = sorted(agents)
        self.policies = [agents[a] for a in self.agent_ids]
        self.world = (
            world
            if world is not None
            else channel or InMemoryChannel(message_history_limit=config.message_history_limit)
        )
        _hand_world_actions(self.world, self.policies)
        self.trace_db = trace_db
        self.metadata = metadata
        self.state_hash = GENESIS_HASH
        self.next_step = 0
        self._batch: RandomBatch | None = None
        self._batch_checked = False
        self._run_started = False
        self._json_cache: dict[tuple[str, int], Any] = {}
        self._stateful = [bool(getattr(p, "uses_agent_state", False)) for p in self.policies]
        self.agent_states: dict[int, Any] = {}
        self._charge_tokens = getattr(self.world, "record_llm_usage", None)
        self._over_quota = getattr(self.world, "over_llm_quota", None)
        self.checkpoint_every = checkpoint_every
        self.decider = Decider(
            config.run_id,
            self.agent_ids,
            self.policies,
            max_concurrency=config.max_concurrency,
            timeout_s=config.agent_timeout_s,
            retries=config.agent_retries,
            on_llm_error=config.on_llm_error,
        )

    # -- ordering -----------------------------------------------------------------------------
    def order(self, time_step: int) -> list[int]:
        """Agent indices in commit order for a step."""
        idx = list(range(len(self.agent_ids)))
        if self.config.order == "shuffle":
            random.Random(derive_seed(self.config.seed, "order", time_step)).shuffle(idx)
        return idx

    # -- the batch path -----------------------------------------------------------------------
    def _batch_decider(self) -> RandomBatch | None:
        if not self._batch_checked:
            self._batch_checked = True
            batch_actions = getattr(self.world, "batch_actions", None)
            if (
                self.config.batch
                and callable(batch_actions)
                and RandomBatch.supports(self.policies, batch_actions())
            ):
                self._batch = RandomBatch(self.policies)  # type: ignore[arg-type]
        return self._batch

    def _step_batch(self, t: int, batch: RandomBatch, record: StepRecord) -> None:
        """All random agents in one vectorised draw; the stored JSON is built directly."""
        codes, values = batch.decide()
        n = len(codes)
        if self.config.order == "shuffle":
            order = self.order(t)
            codes, values = codes[order], values[order]
            agent_json = encode_column(order)
        else:
            agent_json = self._cached_json("agents", n, lambda: encode_column(list(range(n))))
        quoted = self._cached_json("names", 0, lambda: _quoted_names(batch.action_space))
        emitting = values >= 0
        record.n_actions = n
        record.encoded = (
            agent_json,
            "[" + ",".join(quoted[codes].tolist()) + "]",
            _event_arguments_json(values, emitting, t) if emitting.any() else None,
            None,
            None,
            self._cached_json("ones", n, lambda: encode_column([1] * n)),
            None,
            None,
            None,  # fallback: random agents always act
        )
        counts = np.bincount(codes, minlength=len(batch.action_space)).tolist()
        self.world.apply_batch(dict(zip(batch.action_space, counts, strict=True)))

    def _cached_json(self, kind: str, n: int, make: Callable[[], Any]) -> Any:
        key = (kind, n)
        if key not in self._json_cache:
            self._json_cache[key] = make()
        return self._json_cache[key]

    # -- the general path ---------------------------------------------------------------------
    def _observe(self, idx: int, t: int) -> dict[str, Any]:
        observation = self.world.observe(self.agent_ids[idx], t)
        if self._stateful[idx]:
            observation = {**observation, "agent_state": self.agent_states.get(idx)}
        return observation

    def _commit(self, idx: int, t: int, decision: Decision, record: StepRecord) -> None:
        record.llm_calls.extend(call.row(idx) for call in decision.calls)
        request = decision.request
        if request is None:  # the policy failed: a fallback noop, never applied to the world
            record.add_action(
                idx, "noop", None, None, None, False, None, decision.error, fallback=True
            )
            return
        if "agent_state" in request.metadata or "transitions" in request.metadata:
            # Agent state is the engine's to keep (and checkpoint); transitions get their own
            # table. Neither is repeated in the action's metadata.
            metadata = dict(request.metadata)
            state = metadata.pop("agent_state", None)
            if self._stateful[idx]:
                self.agent_states[idx] = state
            for tr in metadata.pop("transitions", None) or []:
                record.transitions.append(
                    (
                        idx,
                        tr.get("from_state"),
                        str(tr.get("to_state")),
                        tr.get("trigger"),
                        1 if tr.get("routine") else 0,
                    )
                )
            request = request.model_copy(update={"metadata": metadata})
        if decision.calls and self._charge_tokens is not None:
            tokens = sum(
                (c.prompt_tokens or 0) + (c.completion_tokens or 0) for c in decision.calls
            )
            self._charge_tokens(self.agent_ids[idx], tokens)
        if request.agent_id != self.agent_ids[idx] or request.time_step != t:
            result = ActionResult.failed(
                f"request names agent {request.agent_id!r} at step {request.time_step}, "
                f"expected {self.agent_ids[idx]!r} at step {t}"
            )
        else:
            try:
                result = self.world.apply(request)
            except Exception as exc:  # a world bug must not lose the run
                result = ActionResult.failed(f"world error: {type(exc).__name__}: {exc}")
        if request.metadata.get("parse_path") == "fallback":
            # The policy had no usable action (an unusable reply, a failed workflow step): the
            # world saw its noop, and the row has the one layout of every fallback, the same as
            # a policy error's: not a success, the reason in ``error``, ``fallback`` set.
            metadata = dict(request.metadata)
            reason = metadata.pop("fallback_reason", None) or "no usable action"
            record.add_action(
                idx,
                request.action_name,
                _json_or_none(request.arguments),
                request.reasoning,
                _json_or_none(metadata),
                False,
                None,
                str(reason),
                fallback=True,
            )
            return
        record.add_action(
            idx,
            request.action_name,
            _json_or_none(request.arguments),
            request.reasoning,
            _json_or_none(request.metadata),
            result.success,
            _json_or_none(result.result),
            result.error,
        )

    def _step_general(self, t: int, record: StepRecord, agents: list[int] | None = None) -> None:
        order = self.order(t)
        if agents is not None:
            chosen = set(agents)
            order = [idx for idx in order if idx in chosen]

        decider = self.decider
        if self.config.scheduling == "sequential":
            for idx in order:
                if (barred := self._barred(idx)) is not None:
                    record.add_action(idx, "noop", None, None, None, False, None, barred)
                    continue
                self._commit(idx, t, decider.decide_sync(idx, t, self._observe(idx, t)), record)
        else:
            bars = {idx: barred for idx in order if (barred := self._barred(idx)) is not None}
            items = [(idx, self._observe(idx, t)) for idx in order if idx not in bars]
            decided = dict(
                zip([idx for idx, _ in items], decider.decide_many(t, items), strict=True)
            )
            for idx in order:
                if idx in bars:
                    record.add_action(idx, "noop", None, None, None, False, None, bars[idx])
                else:
                    self._commit(idx, t, decided[idx], record)

    def _barred(self, idx: int) -> str | None:
        """Why an agent may not decide this step (no model call is made), or None.

        A world with LLM-token quotas says so before the call (``over_llm_quota``), not after
        the tokens are spent; the row records the reason, and the world sees no action.
        """
        if self._over_quota is None:
            return None
        reason = self._over_quota(self.agent_ids[idx])
        return None if reason is None else f"{reason}: no model call"

    # -- stepping -----------------------------------------------------------------------------
    def _ensure_run_recorded(self, steps: int) -> None:
        if self._run_started or self.trace_db is None:
            self._run_started = True
            return
        meta = self.metadata or RunMetadata(
            run_id=self.config.run_id,
            name=self.config.run_id,
            world=getattr(self.world, "name", type(self.world).__name__),
            policy=",".join(sorted({policy_name(p) for p in self.policies})),
            seed=self.config.seed,
            agents=len(self.agent_ids),
            steps=steps,
            scheduling=self.config.scheduling,
            vivarium_version=_version(),
            config=self.config.model_dump(),
        )
        self.trace_db.begin_run(
            meta,
            [
                (i, aid, policy_name(p), _agent_seed(p, aid))
                for i, (aid, p) in enumerate(zip(self.agent_ids, self.policies, strict=True))
            ],
        )
        self._run_started = True

    def step(
        self,
        t: int | None = None,
        *,
        agents: list[int] | None = None,
        clock: float | None = None,
    ) -> StepRecord:
        """Run one step (the next one by default) and commit it to the trace.

        ``agents`` limits the step to some agents (autonomous runs: those whose turn it is);
        ``clock`` is the run's clock at this step, recorded with it.
        """
        t = self.next_step if t is None else t
        _check_step_args(t, agents, len(self.agent_ids))
        if t != self.next_step:
            raise ConfigError(f"step {t} requested, but the next step is {self.next_step}")
        self._ensure_run_recorded(t + 1)
        record = StepRecord(step=t, clock=clock)
        batch = self._batch_decider() if agents is None else None
        if batch is not None:
            self._step_batch(t, batch, record)
        else:
            self._step_general(t, record, agents)
        take = getattr(self.world, "take_messages", None)
        if take is not None:
            record.messages = take()
        record.world_digest = self.world.state_digest()
        self.state_hash = record.state_hash = hash_record(self.state_hash, record)
        self.next_step = t + 1
        if self.trace_db is not None:
            self.trace_db.write_step(record)
            if self.checkpoint_every and (t + 1) % self.checkpoint_every == 0:
                self.write_checkpoint()
        return record

    # -- checkpoints --------------------------------------------------------------------------
    def checkpoint_state(self) -> dict[str, Any]:
        """World and agent state after the last committed step: enough to resume from here."""
        if self._batch is not None:
            self._batch.sync_policies()
        agents: dict[str, Any] = {}
        for idx, (agent_id, policy) in enumerate(zip(self.agent_ids, self.policies, strict=True)):
            get_state = getattr(policy, "get_state", None)
            agents[agent_id] = {
                "engine": self.agent_states.get(idx),
                "policy": get_state() if callable(get_state) else None,
            }
        snapshot = getattr(self.world, "snapshot", None)
        return {
            "world": snapshot() if callable(snapshot) else None,
            "agents": agents,
        }

    def write_checkpoint(self) -> None:
        assert self.trace_db is not None
        state = self.checkpoint_state()
        self.trace_db.write_checkpoint(
            self.next_step - 1,
            self.state_hash,
            canonical_json(state["world"]),
            canonical_json(state["agents"]),
        )

    def restore(self, step: int, state_hash: str, world_state: Any, agent_states: Any) -> None:
        """Continue after ``step`` from a checkpoint (world, agents, hash chain)."""
        restore = getattr(self.world, "restore", None)
        if world_state is not None:
            if not callable(restore):
                raise ConfigError(f"world {type(self.world).__name__} cannot restore a checkpoint")
            restore(world_state)
        for idx, (agent_id, policy) in enumerate(zip(self.agent_ids, self.policies, strict=True)):
            saved = agent_states.get(agent_id)
            if saved is None:
                raise ConfigError(f"checkpoint at step {step} has no state for {agent_id}")
            if saved.get("engine") is not None:
                self.agent_states[idx] = saved["engine"]
            set_state = getattr(policy, "set_state", None)
            if saved.get("policy") is not None and callable(set_state):
                set_state(saved["policy"])
        self._batch = None
        self._batch_checked = False
        self.state_hash = state_hash
        self.next_step = step + 1
        self._run_started = True

    def run(
        self,
        steps: int,
        *,
        progress: Any | None = None,
        on_step: StepCallback | None = None,
        finish: bool = True,
    ) -> str:
        """Run ``steps`` more steps; returns the final state hash. ``progress`` is a tqdm-like bar."""
        if not _is_count(steps):
            # Refused before anything is recorded: run(-1) must not leave a "complete" run.
            raise ConfigError(f"steps: {steps!r} is not a number of steps (0 or more)")
        self._ensure_run_recorded(self.next_step + steps)
        with self._finishing(finish), older_objects_frozen(self.decider.any_async):
            for _ in range(steps):
                record = self.step()
                if progress is not None:
                    progress.update(1)
                if on_step is not None:
                    on_step(record.step, record)
        return self.state_hash

    def run_autonomous(
        self, config: Any, *, progress: Any | None = None, finish: bool = True
    ) -> str:
        """Let agents act on their own clocks for ``config.duration`` (see engine.autonomous)."""
        from vivarium.engine.autonomous import run_autonomous

        self._ensure_run_recorded(0)
        with (
            self._finishing(finish, autonomous=True),
            older_objects_frozen(self.decider.any_async),
        ):
            run_autonomous(self, config, progress=progress)
        return self.state_hash

    @contextlib.contextmanager
    def _finishing(self, finish: bool, autonomous: bool = False) -> Iterator[None]:
        """Record how the run ended (complete, failed, interrupted), whatever happens."""
        status, error = "complete", None
        try:
            yield
        except BaseException as exc:
            status, error = "failed", f"{type(exc).__name__}: {exc}"
            if isinstance(exc, KeyboardInterrupt):
                status = "interrupted"
            elif isinstance(exc, RunInterrupted):
                # The LLM infrastructure failed: the step was not committed; resume redoes it.
                status, error = "interrupted", exc.reason
            raise
        finally:
            if self._batch is not None:
                self._batch.sync_policies()
            if self.trace_db is not None and finish:
                try:
                    self.trace_db.finish_run(
                        status, error, steps=self.next_step if autonomous else None
                    )
                except Exception:
                    if status == "complete":
                        raise


def _is_count(value: object) -> bool:
    """A whole number >= 0 (``bool`` is not a count, though Python calls it an int)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_step_args(t: object, agents: list[int] | None, n_agents: int) -> None:
    """``step()`` misuse as one line, before anything runs: a step number that is not a
    count, an agent index that does not exist (a negative one would act as the last agent)."""
    if not _is_count(t):
        raise ConfigError(f"step: {t!r} is not a step number")
    for idx in agents or ():
        if not _is_count(idx) or idx >= n_agents:
            raise ConfigError(f"step: agents: {idx!r} is not an agent index (0..{n_agents - 1})")


def _hand_world_actions(world: Any, policies: list[Any]) -> None:
    """LLM policies describe the actions of the world they act in (``UsesWorldActions``): give
    them its registry now, so a tool the world lacks is refused before the first step."""
    registry = getattr(world, "registry", None)
    if not isinstance(registry, ActionRegistry):
        return
    name = str(getattr(world, "name", None) or type(world).__name__)
    seen: set[int] = set()
    for policy in policies:
        use = getattr(policy, "use_world_actions", None)
        if use is not None and id(policy) not in seen:
            seen.add(id(policy))
            use(registry, name)


def _agent_seed(policy: object, agent_id: str) -> str | None:
    """The seed the agent runs on: the policy's own ``seed``, else (a policy shared by several
    agents, such as an LLM policy with a master seed) the one it derives for this agent."""
    seed = getattr(policy, "seed", None)
    if seed is None:
        per_agent = getattr(policy, "request_seed", None)
        seed = per_agent(agent_id) if callable(per_agent) else None
    return None if seed is None else str(seed)


def _version() -> str:
    from vivarium._version import __version__

    return __version__
