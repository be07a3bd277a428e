"""What a run is: every input its identity covers, gathered in one place.

A run id derives from its config (``ExperimentConfig.identity``), and a config is plain data:
the code and values a run reads reach its identity from here. This module says what counts,
and ``vivarium.experiment.digest`` how each piece of code or value is digested:

- a world or policy given as an object is named by its reference now (``objects``:
  ``module.qualname@digest``, taken again when a run starts);
- a registered world or policy adds its factory's digest (``registered_digests``), an
  experiment's reporters theirs (``reporter_digests``): ``code_digests`` in the identity;
- declared ``inputs`` and ``input_files`` (their content) are the config's own fields;
- what user code reads that cannot be digested is named (``opaque_inputs``), and such a run is
  never reused;
- the source of Vivarium's own worlds and policies is recorded beside the run id, not in it
  (``package_code_digest``): a finished trace made by other code is not replaced silently,
  and a resume by changed code is refused (``changed_code``).

The config cannot import this module (it sits above the config, the registries and the
objects it reads), so at import it adds its sources to every config's identity
(``config.add_code_digests``, ``config.add_identity_sources``); ``vivarium.experiment``
imports it first thing, so no config is identified without them.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from vivarium.experiment.build import POLICIES, WORLDS, sent_digest, was_sent
from vivarium.experiment.config import add_code_digests, add_identity_sources
from vivarium.experiment.digest import digest_code, say_opaque
from vivarium.experiment.objects import current_reference

if TYPE_CHECKING:
    from vivarium.experiment.config import ExperimentConfig

__all__ = [
    "BEHAVIOUR_CODE",
    "CODE_META_KEY",
    "changed_code",
    "factory_digest",
    "opaque_inputs",
    "package_code_digest",
    "registered_digests",
    "reporter_digests",
]


# -- the code of registered factories -----------------------------------------------------------
# A registered name says nothing of the code behind it, so its digest joins the run's identity
# (``ExperimentConfig.code_digests``), as a class given as an object is named by its digest.


def factory_digest(kind: str, name: str, factory: Any) -> str:
    """The digest of a registered factory's code and of every value it reads, as they are now.

    See ``vivarium.experiment.digest``: the factory's code, what it reaches (the classes and functions
    it calls, their closures and defaults) and every module-level value any of them reads,
    by value. Taken when a run starts (once per ``identity.snapshot``), so a global changed
    after registering (a notebook cell run again) names a new run.

    Args:
        kind: ``"world"`` or ``"policy"``.
        name: The registered name (a digest a sweep sent for it is used: ``keep_sent_digest``).
        factory: The registered factory.

    Returns:
        16 hex digits.
    """
    sent = sent_digest(kind, name, factory)
    if sent is not None:
        return sent
    found = digest_code(factory)
    say_opaque(f"{kind} '{name}'", found, stacklevel=5)
    return found.digest


def registered_opaque(config: ExperimentConfig) -> tuple[str, ...]:
    """What the registered factories ``config`` uses read that cannot be digested."""
    out: list[str] = []
    for kind, name, table in _used_names(config):
        factory = table.get(name)
        if factory is not None and not was_sent(kind, name):
            out += [f"{kind} '{name}': {p}" for p in digest_code(factory).opaque]
    return tuple(out)


def _used_names(config: ExperimentConfig) -> list[tuple[str, str, Mapping[str, Any]]]:
    used: list[tuple[str, str, Mapping[str, Any]]] = [("world", config.world, WORLDS)]
    if isinstance(config.agents, list):
        used += [("policy", group.policy, POLICIES) for group in config.agents]
    else:
        used.append(("policy", config.policy, POLICIES))
    return used


def registered_digests(config: ExperimentConfig) -> dict[str, str]:
    """The code digest of each registered world and policy ``config`` uses, by kind and name.

    Args:
        config: The experiment config.

    Returns:
        ``{"world:<name>": digest, "policy:<name>": digest}`` for the names registered in
        this process (built-in names and objects are not: an object's name holds its digest).
    """
    found = {}
    for kind, name, table in _used_names(config):
        factory = table.get(name)
        if factory is not None:
            found[f"{kind}:{name}"] = factory_digest(kind, name, factory)
    return found


def reporter_digests(config: ExperimentConfig) -> dict[str, str]:
    """The digest of each experiment reporter in force (``Experiment(model_reporters=...)``).

    A reporter's values are in the trace, so its code (and what it reads) is part of the run's
    identity, as a world's own reporters are through the world's class. Only runs that have
    some say so. A sweep's worker uses the digests the sweep process sent.
    """
    from vivarium.engine.reporters import active_reporters, sent_reporter_digests

    sent = sent_reporter_digests()
    if sent is not None:
        return dict(sent)
    active = active_reporters()
    if not active:
        return {}
    out = {}
    for kind, table in zip(("model", "agent"), active, strict=True):
        for name, reporter in sorted(table.items()):
            found = digest_code(reporter)
            say_opaque(f"{kind}_reporters['{name}']", found, stacklevel=5)
            out[f"reporter:{kind}:{name}"] = found.digest
    return out


def _reporters_opaque() -> tuple[str, ...]:
    from vivarium.engine.reporters import active_reporters, sent_reporter_digests

    active = active_reporters()
    if not active or sent_reporter_digests() is not None:
        return ()
    return tuple(
        f"{kind}_reporters['{name}']: {phrase}"
        for kind, table in zip(("model", "agent"), active, strict=True)
        for name, reporter in sorted(table.items())
        for phrase in digest_code(reporter).opaque
    )


def opaque_inputs(config: ExperimentConfig) -> tuple[str, ...]:
    """What the user code ``config`` uses reads that cannot be digested (``vivarium.experiment.digest``).

    Its objects, its registered factories and the experiment's reporters, one phrase each.
    """
    from vivarium.experiment.objects import display_name
    from vivarium.experiment.objects import opaque_inputs as object_opaque

    names = [config.world, config.policy]
    if isinstance(config.agents, list):
        names += [group.policy for group in config.agents]
    out = [
        f"{display_name(name)}: {phrase}"
        for name in dict.fromkeys(names)
        for phrase in object_opaque(name)
    ]
    return (*out, *registered_opaque(config), *_reporters_opaque())


add_code_digests(registered_digests)
add_code_digests(reporter_digests)
add_identity_sources(current_reference, opaque_inputs)


# -- the code of the built-in worlds and policies (recorded beside the run id) ------------------------------------------------
CODE_META_KEY = "vivarium_code"
"""The trace ``meta`` key under which a run records ``package_code_digest()``."""

BEHAVIOUR_CODE = ("policies", "worlds", "workflow", "memory.py")
"""The parts of the package whose code decides what agents do (their source is digested)."""


@functools.cache
def package_code_digest() -> str:
    """The version and a digest of the source of Vivarium's built-in worlds and policies.

    A run id derives from the config alone, so the same config run by edited package code
    (a prompt changed in ``vivarium/policies/prompting.py``) has the same id and a different
    trace. The digest is recorded with each run (``CODE_META_KEY``, outside the run id, which
    stays what it was), and a finished trace made by other code is not replaced without
    ``overwrite`` (``vivarium.experiment.paths.trace_path``). Read once per process: the modules are
    imported once too.

    Returns:
        ``<version>+<16 hex digits>``.
    """
    from pathlib import Path

    from vivarium._version import __version__

    root = Path(__file__).resolve().parent.parent  # the vivarium package
    h = hashlib.sha256()
    for part in BEHAVIOUR_CODE:
        where = root / part
        files = sorted(where.rglob("*.py")) if where.is_dir() else [where]
        for file in files:
            if file.is_file():
                h.update(file.relative_to(root).as_posix().encode() + b"\0")
                h.update(file.read_bytes() + b"\0")
    return f"{__version__}+{h.hexdigest()[:16]}"


def changed_code(recorded: Mapping[str, str], config: ExperimentConfig) -> str | None:
    """The registered world or policy (or reporter) whose code differs from what a run recorded.

    Args:
        recorded: The run's recorded ``code_digests``.
        config: The run's config, as it is resumed.

    Returns:
        ``"policy 'name'"`` for the first changed one, or None (a name no longer registered is
        left to ``check_names``, which says so).
    """
    if config.input_files:  # declared input files: their content as recorded
        now = config.current_input_digests()
        for path in config.input_files:
            if config.input_digests.get(path) not in (None, now.get(path)):
                return f"input file {path}"
    current = config.current_code_digests()
    for key, digest in sorted(recorded.items()):
        if key in current and current[key] != digest:
            kind, _, name = key.partition(":")
            if kind == "reporter":
                which, _, name = name.partition(":")
                return f"{which}_reporters['{name}']"
            return f"{kind} '{name}'"
    return None
