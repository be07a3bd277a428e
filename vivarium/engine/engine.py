"""WorldEngine: steps a world with its agents and records every decision to the trace.

Each step: agents act in a canonical order (sorted ids, or a seeded shuffle per step), every
decision and outcome becomes a row, the world's digest and the rows are chained into a state
hash, and the step is committed to the trace in one transaction.

Scheduling:
- ``sequential``: each agent observes the world after the agents before it have acted this step.
- ``simultaneous``: every agent observes one snapshot, then the actions are applied in order.

Batch decisions: when the world applies batches (``vivarium.worlds.base.BatchWorld``) and the
policies' class decides them (``vivarium.policies.base.BatchPolicy``, random agents), a step in
which every agent acts is one call to each, and the decisions and outcomes arrive as the
columns the trace stores. The engine knows no world or policy: it reads what they can do from
the capabilities checked when it is built (``vivarium.engine.capabilities``).

Resume: a resumed run re-executes the steps its trace committed (``replay_recorded``): they
run as any step does but are not written, each must hash to the state it recorded (else
``ResumeDiverged``), and their LLM calls are answered from the trace. A checkpoint is written in
the transaction of its step. A run that stops records the stop and what it discarded in the
trace's ``interruptions`` table (``_record_interruption``).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from vivarium.engine.capabilities import check_policies, check_world
from vivarium.engine.deciding import (
    Decider,
    Decision,
    older_objects_frozen,
)
from vivarium.engine.interrupts import interrupts_deferred
from vivarium.engine.lean import lean_eligible, step_lean
from vivarium.engine.reporters import REPORTERS_META_KEY, Reporters, check_resumed
from vivarium.engine.rows import DecisionRows
from vivarium.engine.step_progress import StepProgress
from vivarium.errors import ConfigError, ResumeDiverged, RunInterrupted
from vivarium.policies.base import AgentPolicy, BatchDecider, policy_name, policy_seed
from vivarium.seeding import agent_sort_key, canonical_json, derive_seed
from vivarium.settings import (
    DEFAULT_AGENT_RETRIES,
    DEFAULT_DETERMINISTIC_TIMESTAMPS,
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_MESSAGE_HISTORY_LIMIT,
    DEFAULT_ON_LLM_ERROR,
    DEFAULT_ORDER,
    DEFAULT_SCHEDULING,
)
from vivarium.trace.db import TraceDb
from vivarium.trace.records import GENESIS_HASH, StepRecord, check_messages, hash_record
from vivarium.trace.schema import MAX_AGENTS_PER_STEP
from vivarium.types import RunMetadata
from vivarium.worlds.base import World

Scheduling = Literal["sequential", "simultaneous"]
Order = Literal["sorted", "shuffle"]


class WorldEngineConfig(BaseModel):
    """How the engine steps: run id, scheduling, ordering and what observations carry.

    Each setting is the experiment config's (``vivarium.experiment.config.ExperimentConfig``, where it is
    defined), translated by ``vivarium.experiment.runner.build_engine``; the defaults are the same constants
    of ``vivarium.settings``, so an engine built by hand steps as a run of the default config.
    """

    model_config = ConfigDict(extra="forbid")

    run_id: str
    seed: int = Field(
        default=0, ge=0, description="Seeds the per-step shuffle when order='shuffle'."
    )
    deterministic_timestamps: bool = DEFAULT_DETERMINISTIC_TIMESTAMPS
    message_history_limit: int = Field(default=DEFAULT_MESSAGE_HISTORY_LIMIT, ge=0)
    scheduling: Scheduling = DEFAULT_SCHEDULING
    order: Order = DEFAULT_ORDER
    batch: bool = Field(
        default=True,
        description="Let policies that can (random agents) decide a whole step in one batch.",
    )
    max_concurrency: int = Field(
        default=DEFAULT_MAX_CONCURRENCY, ge=1, description="Async decisions in flight at once."
    )
    agent_timeout_s: float | None = Field(
        default=None, gt=0, description="Per-attempt limit for an async decision."
    )
    agent_retries: int = Field(
        default=DEFAULT_AGENT_RETRIES, ge=0, description="Retries after a timeout or error."
    )
    on_llm_error: Literal["stop", "fallback"] = Field(
        default=DEFAULT_ON_LLM_ERROR,
        description="An LLM outage past the retries: stop the run (interrupted, resumable) or "
        "record fallbacks.",
    )


StepCallback = Callable[[int, StepRecord], None]


class WorldEngine:
    """Runs ``agents`` (id -> policy) in ``world`` and writes each step to ``trace_db``.

    The world and the policies are checked against their contracts here, once
    (``vivarium.worlds.base``, ``vivarium.policies.base``): a missing method is a one-line
    ``ConfigError`` before any step runs, and what else they can do is kept in
    ``world_capabilities`` and ``capabilities`` (one per agent, in agent index order).
    """

    def __init__(
        self,
        config: WorldEngineConfig,
        agents: Mapping[str, AgentPolicy],
        world: World,
        trace_db: TraceDb | None = None,
        *,
        metadata: RunMetadata | None = None,
        checkpoint_every: int | None = None,
        agent_seeds: Mapping[str, int | None] | None = None,
    ) -> None:
        """Check the world and the policies, and get ready to run step 0.

        Args:
            config: How to step (run id, scheduling, order, concurrency).
            agents: Each agent's policy, by agent id (the ids' sorted order is the index).
            world: Where the agents act: anything with the ``World`` methods.
            trace_db: Where each step is recorded; None records nothing.
            metadata: What to record about the run; None derives it from ``config``.
            checkpoint_every: Write a checkpoint after every this many steps (a world that
                cannot ``snapshot()`` its state is refused: its checkpoints would be empty).
            agent_seeds: The seed each agent runs on, recorded in the agents table as given
                (for a run, ``vivarium.experiment.build.recorded_seeds`` decides them all); an agent it
                does not name records what its policy reports (``policy_seed``).

        Raises:
            ConfigError: No agents, too many, a world or policy that breaks its contract, or
                ``checkpoint_every`` for a world without ``snapshot``/``restore``.
        """
        if not agents:
            raise ConfigError("a run needs at least one agent")
        if len(agents) > MAX_AGENTS_PER_STEP:
            raise ConfigError(f"at most {MAX_AGENTS_PER_STEP} agents per run")
        self.config = config
        self.agent_ids = sorted(agents, key=agent_sort_key)  # agent_999, then agent_1000
        self.policies = [agents[a] for a in self.agent_ids]
        self.capabilities = check_policies(self.agent_ids, self.policies)
        self.world = world
        self.world_capabilities = check_world(world)
        if checkpoint_every and not self.world_capabilities.checkpoints:
            # Its checkpoints would hold no world state, and a resume from one would go on
            # from a fresh world. Without checkpoints a resume re-executes the run from its
            # start instead, which needs nothing of the world.
            raise ConfigError(
                f"checkpoint_every={checkpoint_every}: world {type(world).__name__} has no "
                "snapshot()/restore() to save its state; leave checkpoint_every unset (a resume "
                "then re-executes the committed steps) or give the world both methods"
            )
        self._hand_world_actions()
        self.trace_db = trace_db
        self.metadata = metadata
        # The seed each agent runs on, from the build plan, for the trace's agents table; an
        # agent not in it (an engine built by hand) records what its policy reports.
        self.agent_seeds = dict(agent_seeds or {})
        self.state_hash = GENESIS_HASH
        self.next_step = 0
        # A resume's re-execution of committed steps (see ``replay_recorded``), and the step
        # under way (what a stop in its middle discards, for ``interruptions``).
        self._replay: _Replay | None = None
        self._step_record: StepRecord | None = None
        self._batch: BatchDecider | None = None
        self._batch_checked = False
        self._world_batch_actions: frozenset[str] = frozenset()
        self._run_started = False
        self._bar: Any | None = None  # the run's progress bar, while ``run`` runs
        # The one writer of decision rows, whichever path decides a step (engine.rows).
        self.rows = DecisionRows(self.agent_ids, world)
        self._stateful = [c.uses_agent_state for c in self.capabilities]
        self.agent_states: dict[int, Any] = {}
        self.checkpoint_every = checkpoint_every
        # Mesa-style model and agent reporters (the world's, and the experiment's in force).
        caps = self.world_capabilities
        self.reporters = Reporters.of(
            caps.model_reporters, caps.agent_reporters, self.agent_ids, caps.agent_list
        )
        self._init_report: tuple[list[Any], list[Any]] | None = None
        self._reporters_checked = False
        self.decider = Decider(
            config.run_id,
            self.agent_ids,
            self.policies,
            max_concurrency=config.max_concurrency,
            timeout_s=config.agent_timeout_s,
            retries=config.agent_retries,
            on_llm_error=config.on_llm_error,
            capabilities=self.capabilities,
        )
        # Plain sync policies decide on the lean path (the same rows, less per decision).
        self._lean = lean_eligible(
            scheduling=config.scheduling,
            retries=config.agent_retries,
            on_llm_error=config.on_llm_error,
            any_async=self.decider.any_async,
            llm_quota=self.world_capabilities.llm_quota,
        )

    def _hand_world_actions(self) -> None:
        """Hand the world's action registry to the policies that describe actions to a model.

        They describe the actions of the world they act in (``UsesWorldActions``); given the
        registry now, they refuse a tool the world lacks before the first step.
        """
        registry = self.world_capabilities.registry
        if registry is None:
            return
        seen: set[int] = set()
        for policy, caps in zip(self.policies, self.capabilities, strict=True):
            if caps.uses_world_actions and id(policy) not in seen:
                seen.add(id(policy))
                policy.use_world_actions(registry, self.world_capabilities.name)

    # -- ordering -----------------------------------------------------------------------------
    def order(self, time_step: int) -> list[int]:
        """Agent indices in commit order for a step."""
        idx = list(range(len(self.agent_ids)))
        if self.config.order == "shuffle":
            _shuffle(idx, random.Random(derive_seed(self.config.seed, "order", time_step)))
        return idx

    # -- the batch path -----------------------------------------------------------------------
    def _batch_decider(self) -> BatchDecider | None:
        """The decider of whole steps, made before the first step that can use one.

        A batch needs a world that applies batches (``BatchWorld``) and a policy class that
        decides them (``BatchPolicy``, asked about every agent's policy); either may decline.
        """
        if not self._batch_checked:
            self._batch_checked = True
            # One policy class decides for everyone: every agent's policy must be of it.
            if (
                self.config.batch
                and self.world_capabilities.batch
                and len({type(p) for p in self.policies}) == 1
                and self.capabilities[0].batch
            ):
                self._world_batch_actions = frozenset(self.world.batch_actions())
                self._batch = type(self.policies[0]).batch_decider(
                    self.policies, self._world_batch_actions
                )
        return self._batch

    def _step_batch(self, t: int, batch: BatchDecider) -> None:
        """Every agent in one batch: the decisions and outcomes arrive as stored columns."""
        order = self.order(t) if self.config.order == "shuffle" else None
        decisions = batch.decide_batch(t, order)
        n = len(decisions.codes)
        if n != len(self.agent_ids):
            raise ConfigError(
                f"{type(batch).__name__}.decide_batch: {n} rows for {len(self.agent_ids)} agents"
            )
        ids = self.agent_ids if order is None else [self.agent_ids[i] for i in order]
        outcomes = self.world.apply_batch(decisions, ids)
        self.rows.batch(batch, decisions, outcomes, order, self._world_batch_actions)

    # -- the general path ---------------------------------------------------------------------
    def _observe(self, idx: int, t: int) -> dict[str, Any]:
        observation = self.world.observe(self.agent_ids[idx], t)
        if self._stateful[idx]:
            observation = {**observation, "agent_state": self.agent_states.get(idx)}
        return observation

    def _commit(self, idx: int, t: int, decision: Decision, rows: DecisionRows) -> None:
        """Record one agent's decision: its calls, its state and transitions, then its row."""
        rows.calls(idx, decision.calls)
        request = decision.request
        if request is None:  # the policy failed: a fallback noop, never applied to the world
            rows.failed(idx, decision.error)
            return
        if "agent_state" in request.metadata or "transitions" in request.metadata:
            # Agent state is the engine's to keep (and checkpoint); transitions get their own
            # table. Neither is repeated in the action's metadata.
            metadata = dict(request.metadata)
            state = metadata.pop("agent_state", None)
            if self._stateful[idx]:
                self.agent_states[idx] = state
            for transition in metadata.pop("transitions", None) or []:
                rows.transition(idx, transition)
            request = request.model_copy(update={"metadata": metadata})
        if decision.calls and self.world_capabilities.llm_quota:
            tokens = sum(
                (c.prompt_tokens or 0) + (c.completion_tokens or 0) for c in decision.calls
            )
            self.world.record_llm_usage(self.agent_ids[idx], tokens)
        rows.act(idx, request)

    def _step_general(self, t: int, agents: list[int] | None = None) -> None:
        order = self.order(t)
        if agents is not None:
            chosen = set(agents)
            order = [idx for idx in order if idx in chosen]

        decider, rows = self.decider, self.rows
        if self._lean:
            progress = StepProgress(self._bar, t, len(order))
            step_lean(
                t,
                order,
                rows,
                run_id=self.config.run_id,
                agent_ids=self.agent_ids,
                policies=self.policies,
                observe=self.world.observe,
                states=self.agent_states,
                stateful=self._stateful,
                pending=decider.pending,
                commit=self._commit,
                progress=progress if progress.active else None,
            )
            progress.close()
        elif self.config.scheduling == "sequential":
            progress = StepProgress(self._bar, t, len(order))
            tell = progress if progress.active else None  # nothing a decision without a bar
            for done, idx in enumerate(order, start=1):
                if (barred := self._barred(idx)) is None:
                    decision = decider.decide_sync(idx, t, self._observe(idx, t))
                    self._commit(idx, t, decision, rows)
                else:
                    rows.barred(idx, barred)
                if tell is not None:
                    tell(done)
            progress.close()
        else:
            bars = {idx: barred for idx in order if (barred := self._barred(idx)) is not None}
            items = [(idx, self._observe(idx, t)) for idx in order if idx not in bars]
            progress = StepProgress(self._bar, t, len(items))
            tick = (lambda: progress(decider.decided)) if progress.active else None
            decisions = decider.decide_many(t, items, tick)
            progress.close()
            decided = dict(zip([idx for idx, _ in items], decisions, strict=True))
            for idx in order:
                if idx in bars:
                    rows.barred(idx, bars[idx])
                else:
                    self._commit(idx, t, decided[idx], rows)

    def _barred(self, idx: int) -> str | None:
        """Why an agent may not decide this step (no model call is made), or None.

        A world with LLM-token quotas says so before the call (``over_llm_quota``), not after
        the tokens are spent; the row records the reason, and the world sees no action.
        """
        if not self.world_capabilities.llm_quota:
            return None
        reason = self.world.over_llm_quota(self.agent_ids[idx])
        return None if reason is None else f"{reason}: no model call"

    # -- stepping -----------------------------------------------------------------------------
    def _ensure_run_recorded(self, steps: int) -> None:
        if self._run_started or self.trace_db is None:
            self._run_started = True
            return
        meta = self.metadata or RunMetadata(
            run_id=self.config.run_id,
            name=self.config.run_id,
            world=self.world_capabilities.name,
            policy=",".join(sorted({policy_name(p) for p in self.policies})),
            seed=self.config.seed,
            agents=len(self.agent_ids),
            steps=steps,
            scheduling=self.config.scheduling,
            vivarium_version=_version(),
            config=self.config.model_dump(),
        )
        agents = self.agent_rows()
        # Recorded whole or not at all: a Ctrl-C here waits until the run record is committed
        # (then stops the run, which records that it was interrupted).
        with interrupts_deferred():
            if self.reporters is not None:  # their names; the callables stay out of the config
                self.trace_db.set_meta(REPORTERS_META_KEY, canonical_json(self.reporters.names()))
            self.trace_db.begin_run(meta, agents)
            self._run_started = True

    def agent_rows(self) -> list[tuple[int, str, str, str | None]]:
        """The trace's agents rows: (agent index, agent id, policy name, recorded seed)."""
        return [
            (i, aid, policy_name(p), self._recorded_seed(aid, p))
            for i, (aid, p) in enumerate(zip(self.agent_ids, self.policies, strict=True))
        ]

    def _recorded_seed(self, agent_id: str, policy: object) -> str | None:
        """As ``agent_seeds`` gives it; an agent it does not name: as its policy reports it."""
        if agent_id in self.agent_seeds:
            seed = self.agent_seeds[agent_id]
        else:
            seed = policy_seed(policy, agent_id)
        return None if seed is None else str(seed)

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
        if not self._reporters_checked:  # a resume needs the reporters the run recorded
            self._reporters_checked = True
            check_resumed(self.trace_db, self.reporters)
        if t == 0 and self.reporters is not None and self._init_report is None:
            self._init_report = self.reporters.collect(self.world, -1)
        record = self._step_record = StepRecord(step=t, clock=clock)
        self.decider.pending.clear()
        self.rows.begin(record)
        batch = self._batch_decider() if agents is None else None
        if batch is not None:
            self._step_batch(t, batch)
        else:
            self._step_general(t, agents)
        self.rows.end()
        if self.world_capabilities.messages:
            record.messages = self.world.take_messages()
            check_messages(record.messages, t)  # as given, or one line before the step commits
        if self.reporters is not None:  # Mesa-style reporters: init (step -1) with step 0
            self._report(t, record)
        record.world_digest = self.world.state_digest()
        self.state_hash = record.state_hash = hash_record(self.state_hash, record)
        self.next_step = t + 1
        self._step_record = None
        if self._replay is not None and t < self._replay.stop:
            self._replay.check(self, t, record)  # re-executed, not written
        elif self.trace_db is not None:
            checkpoint = None
            if self.checkpoint_every and (t + 1) % self.checkpoint_every == 0:
                # Committed with the step, in one transaction: a stop between the two would
                # leave a trace without a checkpoint an uninterrupted run has.
                state = self.checkpoint_state()
                checkpoint = (canonical_json(state["world"]), canonical_json(state["agents"]))
            self.trace_db.write_step(record, checkpoint)
        return record

    def replay_recorded(
        self,
        state_hashes: list[str],
        calls: Mapping[tuple[int, int], Any] | None = None,
    ) -> None:
        """Re-execute the next steps as a resume does: without writing, checked against the trace.

        The next ``len(state_hashes)`` steps run as any step does (the world, the policies,
        their states, the reporters), but nothing of them is written: they are in the trace
        already. Each step's state hash must be the one it recorded, else ``step`` raises
        ``ResumeDiverged`` (the run is not reproducible from its inputs). Their LLM calls are
        answered from ``calls`` (``vivarium.gateways.recorded``), so a model that samples, or
        a server that is down, gives the replies the agents had. The step after them is the
        first one written.

        Args:
            state_hashes: The state hash each of the next steps recorded, in order.
            calls: (step, agent index) -> the recorded calls of that decision (None: none).
        """
        if not state_hashes:
            return
        self._replay = _Replay(self.next_step + len(state_hashes), state_hashes, self._lean)
        self._lean = False  # the general path sets the answers per decision (same rows)
        self.decider.recorded = {} if calls is None else calls

    def end_replay(self) -> None:
        """Stop re-executing: the next step is recorded (``step`` calls it after the last).

        The recorded calls are let go of (a reader of the trace, if they have ``close``: it
        would hold back the trace's WAL while the run writes).
        """
        replay, self._replay = self._replay, None
        if replay is not None:
            self._lean = replay.lean
        calls, self.decider.recorded = self.decider.recorded, None
        close = getattr(calls, "close", None)
        if close is not None:
            close()

    @property
    def replaying(self) -> bool:
        """Whether the next step is one a resume re-executes without writing."""
        return self._replay is not None

    def _report(self, t: int, record: StepRecord) -> None:
        """Collect the reporters after step ``t`` (and the state before step 0, at step 0)."""
        assert self.reporters is not None
        if self._init_report is not None:  # the state before step 0, taken when it was
            record.model_vars, record.agent_vars = self._init_report
            self._init_report = None
        model_rows, agent_rows = self.reporters.collect(self.world, t)
        record.model_vars += model_rows
        record.agent_vars += agent_rows

    # -- checkpoints --------------------------------------------------------------------------
    def checkpoint_state(self) -> dict[str, Any]:
        """World and agent state after the last committed step: enough to resume from here."""
        if self._batch is not None:
            self._batch.sync_policies()
        agents: dict[str, Any] = {}
        for idx, (agent_id, policy) in enumerate(zip(self.agent_ids, self.policies, strict=True)):
            agents[agent_id] = {
                "engine": self.agent_states.get(idx),
                "policy": policy.get_state() if self.capabilities[idx].stateful else None,
            }
        return {
            "world": self.world.snapshot() if self.world_capabilities.checkpoints else None,
            "agents": agents,
        }

    def write_checkpoint(self) -> None:
        """Record ``checkpoint_state()`` in the trace, after the last committed step."""
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
        if world_state is not None:
            if not self.world_capabilities.checkpoints:
                raise ConfigError(f"world {type(self.world).__name__} cannot restore a checkpoint")
            self.world.restore(world_state)
        for idx, (agent_id, policy) in enumerate(zip(self.agent_ids, self.policies, strict=True)):
            saved = agent_states.get(agent_id)
            if saved is None:
                raise ConfigError(f"checkpoint at step {step} has no state for {agent_id}")
            if saved.get("engine") is not None:
                self.agent_states[idx] = saved["engine"]
            if saved.get("policy") is not None and self.capabilities[idx].stateful:
                policy.set_state(saved["policy"])
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
        with self._finishing(finish), older_objects_frozen(self.decider.any_async):
            # Inside: a Ctrl-C just after the run record is committed still records its end.
            self._ensure_run_recorded(self.next_step + steps)
            self._bar = progress  # a long step says its decisions on it (``StepProgress``)
            try:
                for _ in range(steps):
                    record = self.step()
                    if progress is not None:
                        progress.update(1)
                    if on_step is not None:
                        on_step(record.step, record)
            finally:
                self._bar = None
        return self.state_hash

    def run_autonomous(
        self, config: Any, *, progress: Any | None = None, finish: bool = True
    ) -> str:
        """Let agents act on their own clocks for ``config.duration`` (see engine.autonomous)."""
        from vivarium.engine.autonomous import run_autonomous

        with (
            self._finishing(finish, autonomous=True),
            older_objects_frozen(self.decider.any_async),
        ):
            self._ensure_run_recorded(0)
            run_autonomous(self, config, progress=progress)
        return self.state_hash

    @contextlib.contextmanager
    def _finishing(self, finish: bool, autonomous: bool = False) -> Iterator[None]:
        """Record how the run ended (complete, failed, interrupted), whatever happens.

        The end is recorded and committed with signals held (``interrupts_deferred``): a
        Ctrl-C or SIGTERM that comes meanwhile (a second one, say) cannot cut it off and
        leave the trace ``running``.
        """
        status, error = "complete", None
        recorded: list[bool] = []
        stopped: BaseException | None = None
        try:
            yield
        except BaseException as exc:
            stopped = exc
            status, error = "failed", f"{type(exc).__name__}: {exc}"
            if isinstance(exc, KeyboardInterrupt):  # Ctrl-C, or SIGTERM (engine.interrupts)
                status, error = "interrupted", f"KeyboardInterrupt: {exc}"
            elif isinstance(exc, RunInterrupted):
                # The LLM infrastructure failed: the step was not committed; resume redoes it.
                status, error = "interrupted", exc.reason
            raise
        finally:
            try:
                with interrupts_deferred():
                    self._record_end(status, error, finish, autonomous, stopped)
                    recorded.append(True)
            except KeyboardInterrupt:
                if not recorded:  # the signal came before the block above took hold
                    with interrupts_deferred():
                        self._record_end(status, error, finish, autonomous, stopped)
                raise

    def _record_end(
        self,
        status: str,
        error: str | None,
        finish: bool,
        autonomous: bool,
        stopped: BaseException | None = None,
    ) -> None:
        """Write the run's status and wait until it is committed (see ``_finishing``).

        A run that stops before its end also records the stop in ``interruptions``: where,
        why, and what of the step under way it discards. A refused resume (``ResumeDiverged``)
        is no stop of the run: it records nothing.
        """
        try:
            if self._batch is not None:
                self._batch.sync_policies()
        finally:
            if self.trace_db is not None and finish:
                try:
                    self.trace_db.finish_run(
                        status, error, steps=self.next_step if autonomous else None
                    )
                    if status != "complete" and not isinstance(stopped, ResumeDiverged):
                        self._record_interruption(status, error)
                    self.trace_db.flush()
                except Exception:
                    if status == "complete":
                        raise

    def _record_interruption(self, status: str, error: str | None) -> None:
        """Record in ``interruptions`` that the run stopped at its next step, and what it lost."""
        assert self.trace_db is not None
        record, calls = self._step_record, []
        step = self.next_step
        if self._replay is not None:  # stopped re-executing: nothing of the run is lost
            record, step = None, self._replay.stop
        for idx, made in self.decider.pending if record is not None else ():
            agent_id = self.agent_ids[idx]
            calls += [discarded_call(agent_id, call) for call in made]
        decided = 0 if record is None else len(record.agent_idx) or record.n_actions
        self.trace_db.record_interruption(
            step=step, ended=status, reason=error, decisions=decided, calls=calls
        )


@dataclass(slots=True)
class _Replay:
    """The steps a resume re-executes: the first one written, and what each must hash to."""

    stop: int  # the first step written
    state_hashes: list[str]  # for the steps stop - len(state_hashes) .. stop - 1
    lean: bool  # whether the engine took the lean path before (restored after)

    def check(self, engine: WorldEngine, t: int, record: StepRecord) -> None:
        """Refuse a re-executed step that is not the one recorded; end with the last one.

        Raises:
            ResumeDiverged: The step's state hash is not the recorded one.
        """
        expected = self.state_hashes[t - self.stop + len(self.state_hashes)]
        if record.state_hash != expected:
            raise ResumeDiverged(
                f"step {t} re-executed to state {record.state_hash[:12]}, the trace recorded "
                f"{expected[:12]}",
                step=t,
                record=record,
            )
        if t + 1 >= self.stop:
            engine.end_replay()


def discarded_call(agent_id: str, call: Any) -> dict[str, Any]:
    """One LLM call attempt a stop discarded, as ``interruptions.discarded`` keeps it."""
    return {
        "agent_id": agent_id,
        "attempt": call.attempt,
        "model": call.model,
        "request_hash": call.request_hash,
        "prompt_tokens": call.prompt_tokens,
        "completion_tokens": call.completion_tokens,
        "error": call.error,
        "reply": call.reply,
    }


def _shuffle(items: list[int], rng: random.Random) -> None:
    """``rng.shuffle(items)``, the same permutation from the same draws, at half the cost.

    ``random.Random.shuffle`` calls ``_randbelow`` (a Python method) once per item; its loop is
    inlined here, drawing through the same ``getrandbits``. Checked against ``shuffle`` in
    ``tests/engine/test_lean_path.py``.
    """
    getrandbits = rng.getrandbits
    for i in range(len(items) - 1, 0, -1):
        n = i + 1
        k = n.bit_length()
        j = getrandbits(k)
        while j >= n:
            j = getrandbits(k)
        items[i], items[j] = items[j], items[i]


def _is_count(value: object) -> bool:
    """A whole number >= 0 (``bool`` is not a count, though Python calls it an int)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_step_args(t: object, agents: list[int] | None, n_agents: int) -> None:
    """Refuse ``step()`` misuse in one line, before anything runs.

    A step number that is not a count, or an agent index that does not exist (a negative one
    would act as the last agent).
    """
    if not _is_count(t):
        raise ConfigError(f"step: {t!r} is not a step number")
    for idx in agents or ():
        if not _is_count(idx) or idx >= n_agents:
            raise ConfigError(f"step: agents: {idx!r} is not an agent index (0..{n_agents - 1})")


def _version() -> str:
    from vivarium._version import __version__

    return __version__
