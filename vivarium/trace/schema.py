"""The trace schema: one SQLite file per run, its columns declared once.

Every column of the file is declared here once, as a ``Column`` of a ``Table``: its SQL type,
how the frames read it (``Kind``) and what it holds. The DDL that creates a trace, the column
types of the frames (``vivarium.trace.frames``) and the schemas the analysis gives empty
frames (``vivarium.analysis.loading``) are all derived from these declarations.

Decisions are rows of the ``decisions`` table, one per agent and step, keyed by
``(step << 24) | seq`` so that they lie in commit order; the ``actions`` view splits the key
into ``step`` and ``seq`` and adds each agent's id. Any SQLite client (the ``sqlite3`` shell, DuckDB, R's DBI) queries them as an ordinary
table; ``arguments``, ``metadata`` and ``result`` are JSON objects (``json_extract`` reads
them). Traces of schema 2 and before stored each step's decisions as JSON arrays in the steps
table; they are still read (``vivarium.trace.frames``), and their ``actions`` view is theirs.

Each LLM call attempt keeps its request and reply (``llm_calls.messages``, ``tools``,
``params``, ``reply``); the texts themselves are in ``llm_texts``, each distinct text once, so
the system prompt and tool specs that every call repeats take their space once per run.

SQL written for the original aam engine runs unchanged: its ``trace`` table is a view here, and
its ``messages`` columns sit beside ours as virtual generated columns (``aam_compat_ddl``).

``PRAGMA application_id`` marks the file as a Vivarium trace and ``PRAGMA user_version`` carries
the schema version, so both checks cost one page read and need no table to exist.

The compatibility promise: a trace written by any version validates, reads into every frame and
exports under every later version, and one of the schema a version writes also resumes. So the
schema changes only by a new ``SCHEMA_VERSION``, never in place, and a new version ships with
the reader of the old: ``READABLE_VERSIONS`` lists every version ever written, and
``tests/golden`` holds genuine traces of each (files of old schemas written by the commit that
last wrote them), with their known hashes; ``tests/trace/test_golden.py`` checks that they
still validate and read, and that a run of this version is still written byte for byte as its
golden file was. The state hash a trace records is covered the same way
(``vivarium.trace.records.chain_hash`` documents its bytes): changing it would make every
existing trace fail validation, so it never changes for rows that already exist; a new column
is hashed only when it holds something (``fallback``, ``routine``). Replacing a golden file is
a decision (``scripts/make_golden.py --force``), not a side effect.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

APPLICATION_ID = 0x56495652  # "VIVR"
# 2: the ``fallback`` column (decisions that produced no usable action) and
# ``transitions.routine`` (a move the workflow declares part of its ordinary loop). Traces of schema 1
# are read with it derived from what they recorded (see vivarium.trace.frames); they cannot
# be resumed by this version.
# 3: decisions are rows of their own table (``decisions``; the ``actions`` view adds the agent's
# id), so SQL from any client reads them without decoding arrays; ``llm_calls`` keep each
# attempt's request and reply (their texts stored once each, in ``llm_texts``);
# ``transitions.reason`` keeps the reason a model gave. Traces of schemas 1 and 2 are read as
# they are (their decisions from the steps' arrays); they cannot be resumed by this version.
# 4: a message of several lines is stored as its lines (``llm_calls.messages`` holds
# ``[fields, line, line, ...]`` for it, see ``vivarium.trace.llm_texts``): the lines a thousand
# prompts share (the step, the recent messages, the instructions) take their space once, and a
# call adds only its own lines and its reply. ``llm_texts`` keeps no digest column (the writer
# knows its texts by their hash in memory; a resume hashes them again). Traces of schema 3 are
# read, and resumed in their own encoding.
SCHEMA_VERSION = 4

READABLE_VERSIONS = (1, 2, 3, 4)
"""Every trace schema version this Vivarium validates, reads and exports: each one ever written.

A new ``SCHEMA_VERSION`` is added here and none is ever removed; each has golden traces under
``tests/golden`` that the tests read (only ``RESUMABLE_VERSIONS`` are resumed).
"""

RESUMABLE_VERSIONS = (3, 4)
"""The schema versions a resume continues, each in its own format (a run started before an
upgrade finishes as the file it began). Older files are read, never continued."""

# Row ids are derived from (step, seq): a resumed run rewrites exactly the rows it replaces.
SEQ_BITS = 24
MAX_AGENTS_PER_STEP = 1 << SEQ_BITS

Kind = Literal["int", "float", "text", "category", "bool", "flag", "agent"]
"""How a frame reads a column.

``int`` and ``float`` are 64-bit numbers, ``text`` a string, ``category`` a string repeated
often enough to be stored as a dictionary (categorical), ``bool`` an integer read as a boolean,
``flag`` a boolean whose null means false, and ``agent`` an ``agent_idx`` that the frame shows
as the agent's ``agent_id`` (categorical).
"""


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a trace table: how SQLite stores it and how its frame reads it.

    Attributes:
        name: The column's name in the file.
        sql: Its type and constraints as written in ``CREATE TABLE`` (``"INTEGER NOT NULL"``).
        kind: How the frames read it; None leaves it out of the table's frame.
        doc: What it holds.
        since: The schema version that added it: a file of an older version lacks it.
        until: The last schema version that had it (None: it is still written).
    """

    name: str
    sql: str
    kind: Kind | None
    doc: str
    since: int = 1
    until: int | None = None

    def in_version(self, version: int) -> bool:
        """Whether a file of schema ``version`` has the column."""
        return self.since <= version and (self.until is None or version <= self.until)

    @property
    def frame_name(self) -> str:
        """The column's name in a frame: an ``agent`` column shows the agent's ``agent_id``."""
        return "agent_id" if self.kind == "agent" else self.name


@dataclass(frozen=True, slots=True)
class Table:
    """A trace table: its columns, in blocks that the DDL separates by a blank line.

    Attributes:
        name: The table's name.
        blocks: The columns in file order, grouped for the reader of the DDL.
        doc: What one row is.
    """

    name: str
    blocks: tuple[tuple[Column, ...], ...]
    doc: str
    constraints: tuple[str, ...] = ()

    @property
    def columns(self) -> tuple[Column, ...]:
        """Every column this version writes, in file order."""
        return self.columns_of(SCHEMA_VERSION)

    def columns_of(self, version: int) -> tuple[Column, ...]:
        """The columns a file of schema ``version`` has, in file order."""
        return tuple(c for block in self.blocks for c in block if c.in_version(version))

    @property
    def frame_columns(self) -> tuple[Column, ...]:
        """The columns the table's frame reads, in frame order."""
        return tuple(column for column in self.columns if column.kind is not None)

    @property
    def primary_key(self) -> str:
        """The column that orders the rows (frames are read in its order)."""
        return next(c.name for c in self.columns if "PRIMARY KEY" in c.sql)

    def ddl(self, version: int | None = None) -> str:
        """The ``CREATE TABLE`` statement of the table (as schema ``version`` had it)."""
        version = SCHEMA_VERSION if version is None else version
        blocks = [[c for c in block if c.in_version(version)] for block in self.blocks]
        body = ",\n\n".join(
            ",\n".join(f"    {column.name} {column.sql}" for column in block)
            for block in blocks
            if block
        )
        for constraint in self.constraints:
            body += f",\n\n    {constraint}"
        return f"CREATE TABLE {self.name} (\n{body}\n);"


def _table(name: str, doc: str, *columns: Column) -> Table:
    return Table(name, (columns,), doc)


META = _table(
    "meta",
    "One setting a resume needs (e.g. the LLM settings), as text.",
    Column("key", "TEXT PRIMARY KEY", None, "The setting's name."),
    Column("value", "TEXT NOT NULL", None, "Its value."),
)

RUNS = _table(
    "runs",
    "The run: what was asked and how far it got (one row).",
    Column("run_id", "TEXT PRIMARY KEY", None, "Derived from the config's canonical JSON."),
    Column("name", "TEXT NOT NULL", None, "The experiment's name."),
    Column("world", "TEXT NOT NULL", None, "The world's name."),
    Column("policy", "TEXT NOT NULL", None, "The policy name, or names joined by commas."),
    Column("seed", "TEXT NOT NULL", None, "The run's seed."),
    Column("agents", "INTEGER NOT NULL", None, "Number of agents."),
    Column("steps", "INTEGER NOT NULL", None, "Steps asked for."),
    Column("scheduling", "TEXT NOT NULL", None, "How agents take turns within a step."),
    Column("vivarium_version", "TEXT NOT NULL", None, "The version that wrote the run."),
    Column("config_json", "TEXT NOT NULL", None, "The config, as canonical JSON."),
    Column("status", "TEXT NOT NULL", None, "running, complete, interrupted or failed."),
    Column("steps_done", "INTEGER NOT NULL", None, "Steps committed so far."),
    Column("error", "TEXT", None, "Why the run stopped, when it failed."),
    Column("created_at", "TEXT", None, "When the run started (null when deterministic)."),
    Column("finished_at", "TEXT", None, "When it ended (null when deterministic or running)."),
)

AGENTS = _table(
    "agents",
    "One agent of the run.",
    Column("agent_idx", "INTEGER PRIMARY KEY", "int", "The agent's index in the run."),
    Column("agent_id", "TEXT NOT NULL UNIQUE", "text", "The agent's name."),
    Column("policy", "TEXT NOT NULL", "category", "The agent's policy."),
    Column("seed", "TEXT", "text", "The agent's own seed."),
)

# One decision per agent and step, in reading order (as the actions view and frame show it).
# Stored per step in the steps table, as one JSON array per column over the step's agents.
DECISIONS = (
    Column("agent_idx", "TEXT", "agent", "Who decided (an index into agents)."),
    Column("action", "TEXT", "category", "The action's name."),
    Column("arguments", "TEXT", "text", "Its arguments, as JSON."),
    Column("reasoning", "TEXT", "text", "The reasoning the policy gave, if any."),
    Column("metadata", "TEXT", "text", "What the policy recorded with it, as JSON."),
    Column("success", "TEXT", "bool", "Whether the world applied it."),
    Column("fallback", "TEXT", "flag", "The decision produced no usable action.", since=2),
    Column("result", "TEXT", "text", "What the world answered."),
    Column("error", "TEXT", "text", "Why the world refused it."),
)

# In file order: a column added by a later schema version comes after the others.
STORED_DECISIONS = tuple(
    replace(column, kind=None) for column in sorted(DECISIONS, key=lambda c: c.since)
)

# The decisions table's own columns, and the stored type of each decision column there. The
# step and the place in it are the key's two parts (the ``actions`` view splits them): not
# stored twice, and two values fewer to write per decision. ``success`` and ``fallback`` have
# the common value as default, so a step writes them only when some row differs.
_ROW_SQL = {
    "agent_idx": "INTEGER NOT NULL",
    "action": "TEXT NOT NULL",
    "success": "INTEGER NOT NULL DEFAULT 1",
    "fallback": "INTEGER NOT NULL DEFAULT 0",
}
SEQ_MASK = (1 << SEQ_BITS) - 1
DECISION_ROWS = Table(
    "decisions",
    (
        (
            Column(
                "id",
                "INTEGER PRIMARY KEY",
                None,
                f"(step << {SEQ_BITS}) | seq: the step and the place in its commit order.",
                since=3,
            ),
        ),
        tuple(
            replace(column, sql=_ROW_SQL.get(column.name, "TEXT"), kind=None, since=3)
            for column in DECISIONS
        ),
    ),
    "One decision of one agent at one step (read it with its agent id through ``actions``).",
)

_STEP_COLUMNS = (
    Column("step", "INTEGER PRIMARY KEY", "int", "The step number, from 0."),
    Column("n_actions", "INTEGER NOT NULL", "int", "Decisions taken in the step."),
    Column("n_messages", "INTEGER NOT NULL", "int", "Messages posted in the step."),
    Column("world_digest", "TEXT NOT NULL", "text", "Digest of the world's state."),
    Column("state_hash", "TEXT NOT NULL", "text", "Hash chained over every step."),
    Column("wall_time", "TEXT", "text", "When it was committed (null if deterministic)."),
    Column("clock", "REAL", "float", "The world's clock, for worlds that keep one."),
)

STEPS = Table(
    "steps",
    (_STEP_COLUMNS,),
    "One step: how many decisions and messages, the world's digest and the chained hash.",
)

STEPS_V2 = Table(
    "steps",
    (
        (*_STEP_COLUMNS, STORED_DECISIONS[0]),  # who decided; the block after: what they decided
        STORED_DECISIONS[1:],
    ),
    "One step, with its decisions as JSON arrays (schema 2 and before; read by the frames).",
)

# The actions view's own columns (the rest are DECISIONS).
ACTION_STEP = Column("step", "INTEGER", "int", "The step of the decision.")
ACTION_SEQ = Column("seq", "INTEGER", "int", "Its position in the step's commit order.")

MESSAGES = _table(
    "messages",
    "One message posted to a channel.",
    Column("id", "INTEGER PRIMARY KEY", None, f"(step << {SEQ_BITS}) | seq."),
    Column("step", "INTEGER NOT NULL", "int", "The step it was posted in."),
    Column("seq", "INTEGER NOT NULL", "int", "Its order within the step."),
    Column("author_id", "TEXT NOT NULL", "category", "The agent who posted it."),
    Column("channel", "TEXT NOT NULL", "category", "The channel it was posted to."),
    Column("content", "TEXT NOT NULL", "text", "The message."),
)

LLM_CALLS = _table(
    "llm_calls",
    "One attempt of an LLM call.",
    Column("id", "INTEGER PRIMARY KEY", None, "Insertion order."),
    Column("step", "INTEGER NOT NULL", "int", "The step of the call."),
    Column("agent_idx", "INTEGER NOT NULL", "agent", "The agent who called."),
    Column("attempt", "INTEGER NOT NULL", "int", "1 for the first try, 2 for a retry, ..."),
    Column("model", "TEXT", "category", "The model asked."),
    Column("request_hash", "TEXT", "text", "Hash of the request (the cache key)."),
    Column("prompt_tokens", "INTEGER", "int", "Tokens in the prompt."),
    Column("completion_tokens", "INTEGER", "int", "Tokens in the reply."),
    Column("cost", "REAL", "float", "Cost in USD, as the provider reported it."),
    Column("latency_ms", "REAL", "float", "How long the call took."),
    Column("cache_hit", "INTEGER", "bool", "Whether the reply came from the cache."),
    Column("finish_reason", "TEXT", "category", "Why the model stopped."),
    Column("error", "TEXT", "text", "Why the attempt failed."),
    Column(
        "messages",
        "TEXT",
        None,
        "The messages sent, in order, as a JSON array: an llm_texts id for a message stored "
        "whole, [id of its other fields, id of each line of its content] for one of several "
        "lines (schema 4).",
        since=3,
    ),
    Column("tools", "INTEGER", None, "The tools offered: an llm_texts id (null: none).", 3),
    Column(
        "params",
        "TEXT",
        None,
        "Every other request field sent (model, tool_choice, temperature, ...), as JSON.",
        since=3,
    ),
    Column("reply", "INTEGER", None, "The reply as received: an llm_texts id.", since=3),
)

LLM_TEXTS = _table(
    "llm_texts",
    "One distinct text of the run's LLM calls (a message, a tools list, a reply), stored once.",
    Column("id", "INTEGER PRIMARY KEY", None, "What llm_calls refers to.", since=3),
    Column("digest", "TEXT NOT NULL UNIQUE", None, "SHA-256 of the body (hex).", 3, until=3),
    Column("body", "TEXT NOT NULL", None, "The text, as canonical JSON (sorted keys).", since=3),
)

TRANSITIONS = _table(
    "transitions",
    "One move of a workflow agent from one state to another.",
    Column("id", "INTEGER PRIMARY KEY", None, "Insertion order."),
    Column("step", "INTEGER NOT NULL", "int", "The step of the move."),
    Column("agent_idx", "INTEGER NOT NULL", "agent", "The agent who moved."),
    Column("from_state", "TEXT", "category", "The state left (null for the first)."),
    Column("to_state", "TEXT NOT NULL", "category", "The state entered."),
    Column("trigger", "TEXT", "text", "What caused the move."),
    Column(
        "routine",
        "INTEGER NOT NULL DEFAULT 0",
        "bool",
        "The workflow declares the move part of its ordinary loop.",
        since=2,
    ),
    Column("reason", "TEXT", "text", "The reason the model gave for the choice.", since=3),
)

CHECKPOINTS = _table(
    "checkpoints",
    "The state a resume starts from, after a step.",
    Column("step", "INTEGER PRIMARY KEY", None, "The step after which it was taken."),
    Column("state_hash", "TEXT NOT NULL", None, "The step's state hash."),
    Column("world_state", "TEXT NOT NULL", None, "The world's state, as JSON."),
    Column("agent_states", "TEXT NOT NULL", None, "The agents' states, as JSON."),
)

# -- reporters (Mesa's model and agent reporters) --------------------------------------------
# Created with the first step of a run that has reporters (``CREATE TABLE IF NOT EXISTS`` in
# that step's transaction), never in ``DDL``: a run without reporters leaves the file exactly as
# it was before they existed, and a trace without these tables reads as empty frames. Step -1
# holds the state before step 0 (as Mesa's DataCollector collects once at init).

MODEL_VARS = Table(
    "model_vars",
    (
        (
            Column(
                "step", "INTEGER NOT NULL", "int", "The step after which it was taken (-1: init)."
            ),
            Column("reporter", "TEXT NOT NULL", "category", "The model reporter's name."),
            Column("kind", "TEXT NOT NULL", None, "int, float, bool, text, json or null."),
            Column("value", "", None, "The value (JSON text when kind is json)."),
        ),
    ),
    "One model reporter's value at one step.",
    ("PRIMARY KEY (step, reporter)",),
)

AGENT_VARS = Table(
    "agent_vars",
    (
        (
            Column(
                "step", "INTEGER NOT NULL", "int", "The step after which it was taken (-1: init)."
            ),
            Column("reporter", "TEXT NOT NULL", "category", "The agent reporter's name."),
            Column(
                "dtype",
                "TEXT NOT NULL",
                None,
                "The numpy dtype of ``data`` ('<f8', '<i8', '|b1'), or json.",
            ),
            Column(
                "data",
                "BLOB NOT NULL",
                None,
                "One value per agent in agent_idx order: packed numbers, or a JSON array.",
            ),
        ),
    ),
    "One agent reporter's values for every agent at one step.",
    ("PRIMARY KEY (step, reporter)",),
)

REPORTER_TABLES = (MODEL_VARS, AGENT_VARS)
"""The reporter tables, created lazily (see above)."""

# -- where a fork's replies came from ---------------------------------------------------------
# Created by the first call a fork serves from its parent's recording (``CREATE TABLE IF NOT
# EXISTS``), never in ``DDL``: every other trace keeps exactly the file layout it always had.
# A call not listed came from the run's own stack: the cassette when ``cache_hit``, else the
# model (``llm_calls`` frames read it so, as their ``source`` column).

LLM_CALL_SOURCES = _table(
    "llm_call_sources",
    "Where the reply of an llm_calls row came from, when not from the run's own stack.",
    Column("id", "INTEGER PRIMARY KEY", None, "The llm_calls row."),
    Column("source", "TEXT NOT NULL", "category", "parent: the fork's parent's recording."),
)

CALL_SOURCE = Column(
    "source",
    "",
    "category",
    "Where the reply came from: model, cache (the cassette), or parent (a fork's parent's "
    "recording; llm_call_sources). A frame column, read from those two.",
)

# -- interruptions (a run's history, not its result) ------------------------------------------
# Created by the first interruption of a run (``CREATE TABLE IF NOT EXISTS``), never in ``DDL``:
# a run never interrupted keeps exactly the file layout it always had. A resumed run's other
# tables equal an uninterrupted run's (see ``vivarium.experiment.runner.resume_run``); this one says what
# happened on the way. Its ``recorded_at`` is wall-clock time on purpose: when a run stopped is
# history, as a log line is, not a result, so it is outside the state hash and the rest of
# the file (which stays byte-identical across machines and reruns).

INTERRUPTIONS = _table(
    "interruptions",
    "One time the run stopped before its end, and what that stop discarded.",
    Column("id", "INTEGER PRIMARY KEY", None, "In the order they happened."),
    Column(
        "step",
        "INTEGER NOT NULL",
        "int",
        "The first step not committed: where the run stopped and where a resume goes on.",
    ),
    Column(
        "ended",
        "TEXT NOT NULL",
        "category",
        "interrupted (Ctrl-C, SIGTERM, an LLM outage), failed (an error), or killed (the "
        "process ended without recording it; found by the next resume).",
    ),
    Column("reason", "TEXT", "text", "Why, as the run record's error said it."),
    Column(
        "recorded_at", "TEXT NOT NULL", "text", "When it was recorded (UTC ISO 8601, wall clock)."
    ),
    Column(
        "decisions",
        "INTEGER NOT NULL",
        "int",
        "Decisions of that step taken before the stop: discarded, the resume takes them again.",
    ),
    Column("llm_calls", "INTEGER NOT NULL", "int", "LLM call attempts of that step, discarded."),
    Column(
        "discarded",
        "TEXT",
        "text",
        "Those attempts as a JSON array (agent_id, attempt, model, request_hash, tokens, "
        "error, reply): what a sampling model answered before the stop is kept here.",
    ),
)
"""A run's interruptions, created lazily (see above)."""


def actions_view_ddl() -> str:
    """The ``CREATE VIEW actions`` statement: the decisions, each with its agent's id.

    The join is on the agents' primary key and adds nothing else, so SQLite leaves it out of
    any query that does not read ``agent_id`` (a count by action scans ``decisions`` alone).
    """
    names = [
        "d.id",
        f"d.id >> {SEQ_BITS} AS step",
        f"d.id & {SEQ_MASK} AS seq",
        "d.agent_idx",
        "a.agent_id",
    ]
    names += [f"d.{c.name}" for c in DECISIONS if c.kind != "agent"]
    select = ",\n".join(f"    {name}" for name in names)
    return (
        f"CREATE VIEW actions AS\nSELECT\n{select}\nFROM decisions AS d\n"
        "LEFT JOIN agents AS a ON a.agent_idx = d.agent_idx;"
    )


def actions_view_v2_ddl() -> str:
    """The ``actions`` view of a schema-2 trace (decoded from the steps' arrays; for tests)."""
    lines = [
        f"(s.step << {SEQ_BITS}) | j.key AS id",
        "s.step AS step",
        "j.key AS seq",
        "j.value AS agent_idx",
        "a.agent_id AS agent_id",
    ]
    for column in DECISIONS:
        if column.kind == "agent":
            continue  # the json_each key and value above
        value = f"json_extract(s.{column.name}, '$[' || j.key || ']')"
        if column.kind == "flag":
            value = f"COALESCE({value}, 0)"
        lines.append(f"{value} AS {column.name}")
    select = ",\n".join(f"    {line}" for line in lines)
    return (
        f"CREATE VIEW actions AS\nSELECT\n{select}\nFROM steps AS s\n"
        "JOIN json_each(s.agent_idx) AS j\n"
        "LEFT JOIN agents AS a ON a.agent_idx = j.value;"
    )


# -- the original aam engine's tables, for SQL written against its traces ---------------------
# Its ``trace`` table (one row per action) is a view over ``actions``; its ``messages`` columns
# are added to ours as virtual generated columns, which take no space in the file (a view cannot
# share the table's name). Both are added when the run is recorded (``aam_compat_ddl``): the
# run id is part of the messages columns.

AAM_MESSAGE_COLUMNS = (
    Column(
        "message_id",
        "TEXT GENERATED ALWAYS AS (CAST(id AS TEXT)) VIRTUAL",
        None,
        "The row id as text (the original: a UUID).",
    ),
    Column(
        "run_id",
        "TEXT GENERATED ALWAYS AS ({run_id}) VIRTUAL",
        None,
        "The run's id (the file holds one run).",
    ),
    Column("time_step", "INTEGER GENERATED ALWAYS AS (step) VIRTUAL", None, "The step."),
    Column(
        "created_at",
        # No declared type: SQLite would hand a REAL-affinity 2.0 back as the integer 2 once sorted.
        "GENERATED ALWAYS AS (step + seq / 1000.0) VIRTUAL",
        None,
        "The original's logical timestamp (REAL): step + seq / 1000 (seq: order in the step).",
    ),
)

AAM_TRACE_COLUMNS = (
    "trace_id",
    "run_id",
    "time_step",
    "agent_id",
    "action_type",
    "info_json",
    "outcome_json",
    "created_at",
    "environment_state_hash",
)
"""The original's ``trace`` table columns, in its order (the ``trace`` view has them)."""


def _json_or_text(value: str, default: str = "NULL") -> str:
    """SQL embedding a stored JSON text in ``json_object`` (text that is not JSON stays text)."""
    return (
        f"CASE WHEN {value} IS NULL THEN {default} "
        f"WHEN json_valid({value}) THEN json({value}) ELSE {value} END"
    )


def trace_view_ddl() -> str:
    """The ``CREATE VIEW trace`` statement: the original's trace table, one row per decision.

    ``info_json`` is the request and ``outcome_json`` the result as the original recorded them
    (keys sorted, no spaces); ``created_at`` is its deterministic timestamp, step + index in
    the commit order / 1000; ``environment_state_hash`` the step's state hash.
    """
    empty = "json('{}')"  # the original's default arguments and metadata
    info = ",\n".join(
        [
            "        'action_name', a.action",
            "        'agent_id', a.agent_id",
            f"        'arguments', {_json_or_text('a.arguments', empty)}",
            f"        'metadata', {_json_or_text('a.metadata', empty)}",
            "        'reasoning', a.reasoning",
            "        'run_id', r.run_id",
            "        'time_step', a.step",
        ]
    )
    outcome = ",\n".join(
        [
            f"        'data', {_json_or_text('a.result')}",
            "        'error', a.error",
            "        'success', json(CASE WHEN a.success THEN 'true' ELSE 'false' END)",
            "        'trace_id', CAST(a.id AS TEXT)",
        ]
    )
    return (
        "CREATE VIEW trace AS\nSELECT\n"
        "    CAST(a.id AS TEXT) AS trace_id,\n"
        "    r.run_id AS run_id,\n"
        "    a.step AS time_step,\n"
        "    a.agent_id AS agent_id,\n"
        "    a.action AS action_type,\n"
        f"    json_object(\n{info}\n    ) AS info_json,\n"
        f"    json_object(\n{outcome}\n    ) AS outcome_json,\n"
        "    a.step + a.seq / 1000.0 AS created_at,\n"
        "    s.state_hash AS environment_state_hash\n"
        "FROM actions AS a\n"
        "JOIN steps AS s ON s.step = a.step\n"
        "CROSS JOIN runs AS r;"
    )


def aam_compat_ddl(run_id: str, message_columns: set[str], views: set[str]) -> list[str]:
    """The statements that give a trace the original's ``trace`` and ``messages`` columns.

    Args:
        run_id: The run's id (written into the messages' ``run_id`` column).
        message_columns: The columns ``messages`` has already (``PRAGMA table_xinfo``).
        views: The views the file has already.

    Returns:
        What is missing (nothing for a trace that has them: a resume adds them once).
    """
    quoted = "'" + run_id.replace("'", "''") + "'"
    statements = [
        f"ALTER TABLE messages ADD COLUMN {c.name} {c.sql.format(run_id=quoted)}"
        for c in AAM_MESSAGE_COLUMNS
        if c.name not in message_columns
    ]
    if "trace" not in views:
        statements.append(trace_view_ddl())
    return statements


# The tables in the order the DDL creates them (the actions view comes after steps).
SCHEMA: tuple[Table, ...] = (
    META,
    RUNS,
    AGENTS,
    STEPS,
    DECISION_ROWS,
    MESSAGES,
    LLM_CALLS,
    LLM_TEXTS,
    TRANSITIONS,
    CHECKPOINTS,
)


def ddl_of(version: int) -> str:
    """The statements that created a new trace of schema ``version`` (2 or later).

    Older files are read as they are; this writes one (tests check that they still read).
    """
    statements = []
    for declared in SCHEMA:
        if version < 3 and declared is STEPS:
            statements += [STEPS_V2.ddl(version), actions_view_v2_ddl()]
        elif not declared.columns_of(version):
            continue  # a table that version did not have
        else:
            statements.append(declared.ddl(version))
            if declared is DECISION_ROWS:
                statements.append(actions_view_ddl())
    return "\n" + "\n".join(statements) + "\n"


DDL = ddl_of(SCHEMA_VERSION)
"""The statements that create a trace (run once, in one script, on a new file)."""

TABLES = (
    "runs",
    "agents",
    "steps",
    "decisions",
    "actions",
    "messages",
    "llm_calls",
    "llm_texts",
    "transitions",
    "checkpoints",
)
"""The tables (and the ``actions`` view) a user queries with SQL; ``meta`` is the trace's own.

SQL written for the original aam engine also finds its ``trace`` view and ``messages`` columns
(``aam_compat_ddl``)."""

FRAME_NAMES = ("actions", "messages", "llm_calls", "transitions", "steps", "agents")
"""The trace tables that read as frames (``Run.frame(name)``) with columns declared here."""

REPORTER_FRAMES = ("model_vars", "agent_vars")
"""The reporters' frames: a column per reporter, so their columns depend on the run."""


def frame_columns(name: str) -> tuple[Column, ...]:
    """The columns frame ``name`` reads from the file, in frame order.

    Args:
        name: One of ``FRAME_NAMES``.

    Returns:
        The columns; an ``agent`` column shows as ``agent_id`` (see ``Column.frame_name``).

    Raises:
        KeyError: ``name`` is not a frame.
    """
    if name == "actions":
        return (ACTION_STEP, ACTION_SEQ, *DECISIONS)
    if name not in FRAME_NAMES:
        raise KeyError(name)
    if name == "llm_calls":
        return (*table(name).frame_columns, CALL_SOURCE)
    return table(name).frame_columns


def table(name: str) -> Table:
    """The declaration of table ``name``.

    Raises:
        KeyError: the trace has no such table.
    """
    for declared in SCHEMA:
        if declared.name == name:
            return declared
    raise KeyError(name)
