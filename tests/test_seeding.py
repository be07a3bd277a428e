"""Seeds and ids: golden values computed here from the published algorithm."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from vivarium import stable_agent_seed
from vivarium.seeding import agent_ids, agent_sort_key, canonical_json, derive_run_id


def reference_seed(master: int, agent_id: str) -> int:
    raw = hashlib.sha256(f"{master}:{agent_id}".encode()).digest()[:8]
    return sum(b << (8 * (7 - i)) for i, b in enumerate(raw))  # big-endian by hand


def test_stable_agent_seed_matches_reference_values() -> None:
    for master in (0, 1, 42, 2**40 + 3):
        for agent in ("agent_000", "agent_001", "agent_999", "alpha_2"):
            assert stable_agent_seed(master, agent) == reference_seed(master, agent)


def test_stable_agent_seed_golden_literal() -> None:
    # The first 8 bytes of sha256(b"42:agent_000"), read big-endian.
    expected = int(hashlib.sha256(b"42:agent_000").hexdigest()[:16], 16)
    assert stable_agent_seed(42, "agent_000") == expected
    assert 0 <= expected < 2**64


@given(st.integers(min_value=0, max_value=2**63 - 1), st.text(min_size=1, max_size=30))
def test_stable_agent_seed_is_unsigned_64_bit_and_pure(master: int, agent: str) -> None:
    seed = stable_agent_seed(master, agent)
    assert 0 <= seed < 2**64
    assert seed == stable_agent_seed(master, agent) == reference_seed(master, agent)


def test_agent_ids_are_padded_to_three_digits_in_index_order() -> None:
    """aam run.py: ``f"agent_{i:03d}"`` whatever the run's size (agent_999, then agent_1000)."""
    assert agent_ids(3) == ["agent_000", "agent_001", "agent_002"]
    ids = agent_ids(1500)
    assert ids[0] == "agent_000" and ids[1000] == "agent_1000" and ids[-1] == "agent_1499"
    assert ids == sorted(ids, key=agent_sort_key)


def test_run_id_is_derived_from_config_text() -> None:
    a = derive_run_id("demo", canonical_json({"seed": 1, "agents": 2}))
    b = derive_run_id("demo", canonical_json({"agents": 2, "seed": 1}))
    c = derive_run_id("demo", canonical_json({"agents": 2, "seed": 2}))
    assert a == b != c
    assert a.startswith("demo-")


# -- the build plan carries every agent's seeds ---------------------------------------------------
def sha_seed(label: str) -> int:
    """The first 8 bytes of SHA-256 of ``label``, big-endian (the published derivation)."""
    return int.from_bytes(hashlib.sha256(label.encode()).digest()[:8], "big")


def mixed_config(steps: int = 3) -> Any:
    from tests.conftest import ROOT
    from vivarium.experiment.config import ExperimentConfig

    return ExperimentConfig(
        name="mixed",
        world="ecology",
        steps=steps,
        seed=11,
        base_dir=str(ROOT),
        llm={"mock": True},
        agents=[
            {"policy": "workflow", "agent": "data/agents/alpha_2"},
            {"policy": "cognitive", "count": 2, "id": "llm"},
            {"policy": "random", "count": 2, "action_space": ["noop", "read_artifact"]},
        ],
    )


def test_the_plan_carries_seeds_derived_from_the_published_algorithm() -> None:
    from vivarium.experiment.plan import agent_plan

    plan = agent_plan(mixed_config())
    assert [p.agent_id for p in plan] == ["agent_002", "agent_003", "alpha_2", "llm_000", "llm_001"]
    for p in plan:
        llm = sha_seed(f"11:llm:{p.agent_id}") & 0x7FFFFFFF
        assert p.seeds.agent == sha_seed(f"11:{p.agent_id}")
        assert p.seeds.llm == llm
        assert p.seeds.workflow_request == sha_seed(f"{llm}:workflow:{p.agent_id}") & 0x7FFFFFFF


def test_every_agent_records_the_seed_its_policy_runs_on(tmp_path: Path) -> None:
    import sqlite3

    from vivarium.experiment.runner import build_engine
    from vivarium.gateways.mock import MockLLMGateway
    from vivarium.trace.db import TraceDb

    sent: list[Any] = []

    class Spy(MockLLMGateway):
        def chat(self, **request: Any) -> Any:
            sent.append(request.get("seed"))
            return super().chat(**request)

        async def achat(self, **request: Any) -> Any:
            sent.append(request.get("seed"))
            return await super().achat(**request)

    config = mixed_config()
    shared: dict[str, Any] = {"gateway": Spy(seed=config.seed)}
    trace = TraceDb(tmp_path / "mixed.sqlite")
    engine = build_engine(config, trace, shared)
    engine.run(config.steps)
    trace.close()
    rows = sqlite3.connect(tmp_path / "mixed.sqlite").execute("SELECT * FROM agents").fetchall()
    recorded = {aid: seed for _, aid, _, seed in rows}
    policies = dict(zip(engine.agent_ids, engine.policies, strict=True))
    assert len(recorded) == 5 and None not in recorded.values()

    requests: dict[str, int] = {}  # the provider seed each LLM agent sends
    for aid, policy in policies.items():
        llm = sha_seed(f"11:llm:{aid}") & 0x7FFFFFFF
        if aid.startswith("agent_"):  # random: its generator's seed
            assert recorded[aid] == str(policy.seed) == str(sha_seed(f"11:{aid}"))
        elif aid.startswith("llm_"):  # cognitive: the seed sent with every request
            assert recorded[aid] == str(policy.request_seed(aid)) == str(llm)
            requests[aid] = llm
        else:  # workflow: its seed, from which the seed of its requests derives
            assert recorded[aid] == str(policy.seed) == str(llm)
            requests[aid] = policy.request_seed(aid)
            assert requests[aid] == sha_seed(f"{llm}:workflow:{aid}") & 0x7FFFFFFF
    assert set(sent) == set(requests.values())


def test_config_validation_does_not_import_the_builders() -> None:
    """Unknown names validate (they are checked when a run is built), and validating a config
    loads no world, policy, workflow, gateway or engine."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import vivarium.experiment.config\n"
        "from vivarium.experiment.config import ExperimentConfig\n"
        "ExperimentConfig(world='mars', policy='genius', agents=[{'policy': 'nobody'}])\n"
        "loaded = [m for m in sys.modules if m.startswith(('vivarium.worlds', 'vivarium.policies',"
        " 'vivarium.workflow', 'vivarium.gateways', 'vivarium.engine'))]\n"
        "assert not loaded, f'config validation imported {loaded}'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_registered_policy_takes_its_seed_from_the_plan(tmp_path: Path) -> None:
    import sqlite3

    from vivarium import Experiment
    from vivarium.experiment.build import POLICIES, policy_factory, register_policy

    def factory(config: Any, agent: Any, shared: dict[str, Any]) -> Any:
        policy = policy_factory("random")(config, agent, shared)
        policy.seed = agent.seeds.llm  # what a user policy runs on: any seed of its plan
        return policy

    register_policy("planned", factory)
    try:
        Experiment(policy="planned", agents=2, steps=1, seed=5).run(tmp_path / "p.sqlite")
    finally:
        POLICIES.pop("planned", None)
    rows = sqlite3.connect(tmp_path / "p.sqlite").execute("SELECT agent_id, seed FROM agents")
    # Not a built-in: the engine records the seed the policy reports.
    assert {aid: seed for aid, seed in rows} == {
        aid: str(sha_seed(f"5:llm:{aid}") & 0x7FFFFFFF) for aid in ("agent_000", "agent_001")
    }
