"""The trace schema: one SQLite file per run, marked so that foreign files are recognised.

Decisions are stored one step per row: each action column is a JSON array over the step's
agents, in commit order (NULL when every value in it is null). A single insert per step keeps
a 1,000-agent step at one B-tree insert instead of a thousand, and the ``actions`` view turns
the arrays back into one row per decision for anyone who queries the file with SQL.

``PRAGMA application_id`` marks the file as a Vivarium trace and ``PRAGMA user_version`` carries
the schema version, so both checks cost one page read and need no table to exist.
"""

from __future__ import annotations

APPLICATION_ID = 0x56495652  # "VIVR"
# 2: the ``fallback`` column (decisions that produced no usable action) and
# ``transitions.routine`` (a move the workflow declares part of its ordinary loop). Traces of schema 1
# are read with it derived from what they recorded (see vivarium.trace.frames); they cannot
# be resumed by this version.
SCHEMA_VERSION = 2

# Row ids are derived from (step, seq): a resumed run rewrites exactly the rows it replaces.
SEQ_BITS = 24
MAX_AGENTS_PER_STEP = 1 << SEQ_BITS


DDL = """
CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    world TEXT NOT NULL,
    policy TEXT NOT NULL,
    seed TEXT NOT NULL,
    agents INTEGER NOT NULL,
    steps INTEGER NOT NULL,
    scheduling TEXT NOT NULL,
    vivarium_version TEXT NOT NULL,
    config_json TEXT NOT NULL,
    status TEXT NOT NULL,
    steps_done INTEGER NOT NULL,
    error TEXT,
    created_at TEXT,
    finished_at TEXT
);
CREATE TABLE agents (
    agent_idx INTEGER PRIMARY KEY,
    agent_id TEXT NOT NULL UNIQUE,
    policy TEXT NOT NULL,
    seed TEXT
);
CREATE TABLE steps (
    step INTEGER PRIMARY KEY,
    n_actions INTEGER NOT NULL,
    n_messages INTEGER NOT NULL,
    world_digest TEXT NOT NULL,
    state_hash TEXT NOT NULL,
    wall_time TEXT,
    clock REAL,
    agent_idx TEXT,

    action TEXT,
    arguments TEXT,
    reasoning TEXT,
    metadata TEXT,
    success TEXT,
    result TEXT,
    error TEXT,
    fallback TEXT
);
CREATE VIEW actions AS
SELECT
    (s.step << 24) | j.key AS id,
    s.step AS step,
    j.key AS seq,
    j.value AS agent_idx,
    a.agent_id AS agent_id,
    json_extract(s.action, '$[' || j.key || ']') AS action,
    json_extract(s.arguments, '$[' || j.key || ']') AS arguments,
    json_extract(s.reasoning, '$[' || j.key || ']') AS reasoning,
    json_extract(s.metadata, '$[' || j.key || ']') AS metadata,
    json_extract(s.success, '$[' || j.key || ']') AS success,
    COALESCE(json_extract(s.fallback, '$[' || j.key || ']'), 0) AS fallback,
    json_extract(s.result, '$[' || j.key || ']') AS result,
    json_extract(s.error, '$[' || j.key || ']') AS error
FROM steps AS s
JOIN json_each(s.agent_idx) AS j
LEFT JOIN agents AS a ON a.agent_idx = j.value;
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    step INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    author_id TEXT NOT NULL,
    channel TEXT NOT NULL,
    content TEXT NOT NULL
);
CREATE TABLE llm_calls (
    id INTEGER PRIMARY KEY,
    step INTEGER NOT NULL,
    agent_idx INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    model TEXT,
    request_hash TEXT,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    cost REAL,
    latency_ms REAL,
    cache_hit INTEGER,
    finish_reason TEXT,
    error TEXT
);
CREATE TABLE transitions (
    id INTEGER PRIMARY KEY,
    step INTEGER NOT NULL,
    agent_idx INTEGER NOT NULL,
    from_state TEXT,
    to_state TEXT NOT NULL,
    trigger TEXT,
    routine INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE checkpoints (
    step INTEGER PRIMARY KEY,
    state_hash TEXT NOT NULL,
    world_state TEXT NOT NULL,
    agent_states TEXT NOT NULL
);
"""

TABLES = (
    "runs",
    "agents",
    "steps",
    "actions",
    "messages",
    "llm_calls",
    "transitions",
    "checkpoints",
)
