"""``vvm``: the command line. Bad flags or inputs print one line and exit with status 2."""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from vivarium.errors import (
    ConfigError,
    IdentityWarning,
    OverrideWarning,
    ResumedWarning,
    RunHealthWarning,
    RunInterrupted,
    TracePathWarning,
    VivariumError,
    one_line,
)
from vivarium.settings import DEFAULT_AGENTS, DEFAULT_SEED, DEFAULT_STEPS

if TYPE_CHECKING:
    from concurrent.futures import Future

EXIT_USAGE = 2
EXIT_INTERRUPTED = 3  # as `vvm validate` says of an incomplete trace: resumable
_TOP_LEVEL_FLAGS = frozenset({"-h", "--help", "--version"})  # all else without a command: phase1
ON_LLM_ERROR_HELP = (
    "when the LLM server fails past the retries: stop (default; the run is interrupted, "
    "resume it later) or fallback (record a fallback noop and go on)"
)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors that name the subcommand's help, and flags as spelled.

    No abbreviations: argparse would read ``vvm phase1 --agent 3`` (``vvm interview``'s flag)
    as ``--agents 3`` and ``--step 2`` as ``--steps 2``, so a flag of one command given to
    another ran with a meaning nobody asked for. A flag is taken only as it is spelled.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """An ``argparse.ArgumentParser`` that takes no abbreviated flag."""
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _positive(name: str, minimum: int = 1) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, not {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{name} must be >= {minimum}, not {value}")
        return value

    return parse


def _add_run_flags(
    p: argparse.ArgumentParser, *, steps: int | None, agents: int | None, db: bool = True
) -> None:
    """Add the flags every running command shares.

    Every default is None (or the command's own default, for commands without a config file):
    a flag the user did not give never overrides a config's field.
    """
    p.add_argument("--steps", type=_positive("--steps", 0), default=steps, help="steps to run")
    p.add_argument("--agents", type=_positive("--agents"), default=agents, help="number of agents")
    p.add_argument(
        "--seed",
        type=_positive("--seed", 0),
        default=None,
        help=f"master seed (default: {DEFAULT_SEED})",
    )
    if db:
        p.add_argument(
            "--db",
            type=Path,
            default=None,
            help="trace file (default runs/<name>.sqlite, or runs/<run id>.sqlite when that "
            "holds another run)",
        )
        p.add_argument(
            "--overwrite",
            action="store_true",
            help="replace the trace at --db even when it holds another run",
        )
        _add_after_run_flags(p)
    p.add_argument("--run-id", default=None, help="run id (default: derived from the config)")
    p.add_argument(
        "--scheduling", choices=["sequential", "simultaneous"], default=None, help="step semantics"
    )
    p.add_argument("--order", choices=["sorted", "shuffle"], default=None, help="commit order")
    p.add_argument(
        "--message-history",
        type=_positive("--message-history", 0),
        default=None,
        help="messages each observation carries",
    )
    p.add_argument(
        "--nondeterministic-timestamps",
        action="store_true",
        help="record wall-clock times (the trace is then no longer byte-identical across runs)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--checkpoint-every",
        type=_positive("--checkpoint-every"),
        default=None,
        metavar="K",
        help="save world and agent state every K steps: a resume then re-executes fewer steps",
    )


def _add_after_run_flags(p: argparse.ArgumentParser) -> None:
    """Add what happens to the trace after a run: the check (on by default), a Parquet copy."""
    p.add_argument(
        "--no-validate",
        action="store_true",
        help="skip checking the trace after the run (the checks of `vvm validate`)",
    )
    p.add_argument(
        "--export-parquet",
        nargs="?",
        const=True,
        type=Path,
        default=None,
        metavar="DIR",
        help="after the run, write its tables as Parquet files into DIR (alone: into "
        "<trace>_parquet/ beside the trace)",
    )


def _check_folder(what: str, folder: Path) -> None:
    """Refuse a folder path that cannot become one, before the run starts.

    Raises:
        ConfigError: The path is a file, or lies under one.
    """
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{what} {folder}: is a file; give a folder")
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise ConfigError(f"{what} {folder}: {existing} is a file, not a folder")


def _check_export_dir(args: argparse.Namespace) -> None:
    """Refuse an ``--export-parquet`` folder that cannot be one, before the run starts."""
    folder = getattr(args, "export_parquet", None)
    if isinstance(folder, Path):
        _check_folder("--export-parquet", folder)


def _start_check(args: argparse.Namespace, run: Any) -> Future[Any] | None:
    """Start ``vvm validate``'s check of the finished trace (unless ``--no-validate``).

    It reads the file on a thread of its own while the summary and the health are read on
    this one: both are SQLite queries, during which sqlite3 releases the GIL, so on two cores
    the check costs the run little more than the longer of the two.
    """
    if args.no_validate:
        return None
    from concurrent.futures import ThreadPoolExecutor

    from vivarium.trace.validate import validate_trace

    pool = ThreadPoolExecutor(1, thread_name_prefix="vivarium-validate")
    future = pool.submit(validate_trace, run.path)
    pool.shutdown(wait=False)  # the check goes on; its thread ends with it
    return future


def _after_run(args: argparse.Namespace, run: Any, checking: Future[Any] | None) -> int:
    """Say the finished run's check, then export it as Parquet.

    The check is ``vvm validate``'s (complete, numbered, hash chain intact), as started by
    ``_start_check``: None under ``--no-validate``. As in aam, a trace that fails it is not
    exported.

    Returns:
        0; 1 when the trace is corrupt or the export failed; 3 when it is incomplete.
    """
    if checking is not None:
        report = checking.result()
        if not report.ok:
            text = one_line("; ".join(report.lines()))
            print(f"vvm {args.command}: error: the trace failed its check: {text}", file=sys.stderr)
            return 1 if report.status == "corrupt" else EXIT_INTERRUPTED
        print(f"  validated: {report.steps_found} steps, {report.actions} decisions, hash chain ok")
    if args.export_parquet is not None:
        folder = args.export_parquet
        if folder is True:
            folder = run.path.with_name(f"{run.path.stem}_parquet")
        try:
            paths = run.to_parquet(folder)
        except VivariumError as exc:
            print(
                f"vvm {args.command}: error: --export-parquet: {exc} (the run itself is "
                f"complete in {run.path})",
                file=sys.stderr,
            )
            return 1
        print(f"  parquet: {folder}/ ({', '.join(sorted(paths))})")
    return 0


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for flag, field in (
        ("steps", "steps"),
        ("agents", "agents"),
        ("seed", "seed"),
        ("run_id", "run_id"),
        ("scheduling", "scheduling"),
        ("order", "order"),
        ("message_history", "message_history_limit"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            out[field] = value
    if getattr(args, "nondeterministic_timestamps", False):
        out["deterministic_timestamps"] = False
    if getattr(args, "checkpoint_every", None):
        out["checkpoint_every"] = args.checkpoint_every
    duration = getattr(args, "duration", None)
    if duration is not None:
        if not 0 < duration < float("inf"):  # NaN fails both comparisons too
            raise ConfigError(f"--duration must be > 0 and finite, not {duration:g}")
        out["mode"] = "autonomous"
        out["autonomous"] = {"duration": duration}
        if getattr(args, "real_clock", False):
            out["autonomous"]["clock"] = "real"
    return out


def _summarise(run: Any, seconds: float) -> None:
    from vivarium.trace.summary import run_summary

    summary = run_summary(run.path)  # aggregate queries: no frame is built for a summary
    n = summary.decisions
    mix = ", ".join(f"{a}={c}" for a, c in summary.by_action)
    m = run.metadata
    print(f"run {m['run_id']}: {m['steps_done']} steps x {m['agents']} agents -> {n} decisions")
    # Fallbacks (no usable action) are counted apart: they are never successes.
    fell = f"; {summary.fallbacks} fallbacks (no usable action)" if summary.fallbacks else ""
    print(f"  actions: {mix or 'none'}; succeeded {summary.succeeded}/{n}{fell}")
    if seconds > 0 and n >= 10_000:  # below that, start-up time dominates the rate
        print(f"  {n / seconds:,.0f} decisions/s ({seconds:.2f} s)")
    if summary.final_state_hash is not None:
        print(f"  final state hash {summary.final_state_hash}")
    print(f"  trace: {run.path}")
    _warn_health(run)


def _cmd_phase1(args: argparse.Namespace) -> int:
    from vivarium.facade import Experiment

    exp = Experiment(name="phase1", world="channel", policy="random", **_overrides(args))
    if getattr(args, "implicit", False):
        c = exp.config
        print(
            f"vvm: no command given: running `vvm phase1 --steps {c.steps} --agents "
            f"{c.agent_count} --seed {c.seed}` (random agents in the channel world; "
            "`vvm --help` lists the commands)"
        )
    _check_export_dir(args)
    start = time.perf_counter()
    run = exp.run(args.db, overwrite=args.overwrite, progress=False if args.no_progress else None)
    checking = _start_check(args, run)
    _summarise(run, time.perf_counter() - start)
    return _after_run(args, run, checking)


def _cmd_run(args: argparse.Namespace) -> int:
    from vivarium.facade import Experiment

    fields = _overrides(args)
    if args.max_concurrency is not None:
        fields["max_concurrency"] = args.max_concurrency  # the run's own, over llm's
    if args.mock_llm:
        # The mock answers instead of the file's model; its other LLM settings (temperature,
        # max_tokens, force_tool, ...) stay, but not the model's cassette.
        fields["llm"] = {"model": "mock", "mock": True, "cache": None}
    try:
        exp = Experiment.from_file(args.config, **fields)
    except ConfigError:
        _refer_sectioned(args.config)
        raise
    if args.on_llm_error is not None and exp.config.llm is not None:
        exp.config.llm.on_llm_error = args.on_llm_error  # not part of the run's identity
    _key_from_environment(exp.config)
    if args.api_base is not None:
        _set_api_base(exp, args.api_base, args.config)
    _check_export_dir(args)

    start = time.perf_counter()
    run = exp.run(args.db, overwrite=args.overwrite, progress=False if args.no_progress else None)
    checking = _start_check(args, run)
    _summarise(run, time.perf_counter() - start)
    return _after_run(args, run, checking)


def _set_api_base(exp: Any, value: str, path: Path) -> None:
    """Send the config's LLM calls to ``value`` (``vvm run --api-base``), as phase2 and resume do.

    Where calls go is no part of the run's identity: the run id stays the file's.

    Raises:
        ConfigError: The file has no LLM agents, or ``value`` is no server URL (list).
    """
    from pydantic import ValidationError

    from vivarium.experiment.config import describe_errors

    if exp.config.llm is None:
        raise ConfigError(f"--api-base: {path} has no llm section (no LLM agents to send)")
    try:
        exp.config.llm.api_base = value
    except ValidationError as exc:
        raise ConfigError(describe_errors(exc, "--api-base")) from None
    if exp.config.llm.uses_mock:  # the mock calls no server: say so, never ignore it silently
        from vivarium.experiment.overrides import unused_server_note

        warnings.warn(unused_server_note(exp.config.llm.api_bases), OverrideWarning, stacklevel=2)


def _refer_sectioned(path: Path) -> None:
    """Point an aam sectioned config given to ``vvm run`` to ``vvm experiment``.

    Raises:
        ConfigError: The file is aam's sectioned config (run / scheduler / policy).
    """
    from vivarium.experiment.config import load_config_data
    from vivarium.experiment.sections import is_sectioned

    try:
        data = load_config_data(path)
    except ConfigError:
        return  # the original error says what is wrong
    if is_sectioned(data):
        raise ConfigError(
            f"{path} is aam's sectioned config (run / scheduler / policy): run it with "
            f"`vvm experiment --config {path}`"
        )


def _cmd_experiment(args: argparse.Namespace) -> int:
    """Run aam's sectioned JSON config (``vvm experiment --config X.json``), translated.

    See ``vivarium.experiment.sections`` for what each section and key becomes.
    """
    from vivarium.experiment.sections import load_sectioned_config
    from vivarium.facade import Experiment

    items = list(args.override or [])
    if args.run_id is not None:
        items.append(f"run.run_id={json.dumps(args.run_id)}")
    aam = load_sectioned_config(args.config, items)
    config = aam.config
    _key_from_environment(config)
    if args.runs_dir is not None:
        _check_folder("--runs-dir", args.runs_dir)
    elif args.db is None:
        _check_folder(f"{args.config}: run.runs_dir", aam.runs_dir)
    runs_dir = args.runs_dir if args.runs_dir is not None else aam.runs_dir
    _check_export_dir(args)
    llm = config.llm
    answers = "" if llm is None else f", llm={'mock' if llm.uses_mock else llm.model}"
    print(
        f"{args.config}: aam experiment config -> policy={config.policy}, "
        f"agents={config.agent_count}, steps={config.steps}, seed={config.seed}, "
        f"scheduling={config.scheduling} (barrier), order={config.order}, "
        f"max_concurrency={config.decisions_in_flight}{answers}"
    )
    exp = Experiment(config)
    start = time.perf_counter()
    run = exp.run(
        args.db,
        overwrite=args.overwrite,
        folder=runs_dir,
        progress=False if args.no_progress else None,
    )
    checking = _start_check(args, run)
    _summarise(run, time.perf_counter() - start)
    return _after_run(args, run, checking)


def _llm_overrides(args: argparse.Namespace) -> dict[str, Any]:
    llm: dict[str, Any] = {}
    for flag, field in (
        ("model", "model"),
        ("api_base", "api_base"),
        ("api_key", "api_key"),
        ("transport", "transport"),
        ("temperature", "temperature"),
        ("max_tokens", "max_tokens"),
        ("max_concurrency", "max_concurrency"),
        ("rate_limit_rpm", "rate_limit_rpm"),
        ("rate_limit_tpm", "rate_limit_tpm"),
        ("cache", "cache"),
        ("cache_mode", "cache_mode"),
        ("timeout", "timeout"),
        ("num_retries", "num_retries"),
        ("agent_timeout", "agent_timeout"),
        ("agent_retries", "agent_retries"),
        ("mock_latency_ms", "mock_latency_ms"),
        ("system_prompt", "system_prompt"),
        ("on_llm_error", "on_llm_error"),
        ("forced_tool_format", "forced_tool_format"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            llm[field] = str(value) if isinstance(value, Path) else value
    if getattr(args, "mock_llm", False):
        llm["mock"] = True
    if getattr(args, "force_tool", None):
        llm["force_tool"] = True if args.force_tool == "auto" else args.force_tool
    if getattr(args, "no_graph", False):
        llm["graph"] = False
    if "api_key" not in llm and (env_key := _environment_key()) is not None:
        llm["api_key"] = env_key
    return llm


def _environment_key() -> str | None:
    """``VIVARIUM_API_KEY``: the API key of every command that is given none (None: unset)."""
    return os.environ.get("VIVARIUM_API_KEY") or None


def _key_from_environment(config: Any) -> None:
    """Give ``config``'s LLM agents the key ``VIVARIUM_API_KEY`` holds, when it names none.

    The key a flag gives (``--api-key``), else the config's own, else this variable, else the
    provider's own variable (read by the provider): the same order for every command.
    """
    if config.llm is not None and config.llm.api_key is None:
        env_key = _environment_key()
        if env_key is not None:
            config.llm.api_key = env_key  # validated into a secret


def _cmd_phase2(args: argparse.Namespace) -> int:
    from vivarium.facade import Experiment

    llm = _llm_overrides(args)
    if not llm.get("mock") and "model" not in llm:
        # aam called gpt-3.5-turbo here; Vivarium answers offline and says so.
        print(
            "vvm phase2: no --model or --mock-llm given: the deterministic mock LLM answers "
            "(aam called gpt-3.5-turbo; pass --model NAME, with --api-base URL for a local "
            "server, to call a model)"
        )
    if not llm.get("mock") and llm.get("model", "mock") == "mock":
        llm["mock"] = True  # no model named: the deterministic mock answers
    from vivarium.experiment.sections import capped_concurrency

    fields = _overrides(args)
    fields.setdefault("scheduling", "simultaneous")  # LLM calls of one step run concurrently
    # --max-concurrency is the run's own max_concurrency (not its older place in llm), capped
    # by aam's --rate-limit-max-concurrent as aam's sectioned config is.
    pace = capped_concurrency(llm.pop("max_concurrency", None), _rate_limit(args, llm))
    if pace is not None:
        fields["max_concurrency"] = pace
    exp = Experiment(name="phase2", world="channel", policy="cognitive", llm=llm, **fields)
    _check_export_dir(args)
    start = time.perf_counter()
    run = exp.run(args.db, overwrite=args.overwrite, progress=False if args.no_progress else None)
    checking = _start_check(args, run)
    _summarise(run, time.perf_counter() - start)
    calls = run.to_polars("llm_calls")
    if calls.height:
        errors = int(calls["error"].is_not_null().sum())
        tokens = int(
            calls["prompt_tokens"].fill_null(0).sum()
            + calls["completion_tokens"].fill_null(0).sum()
        )
        hits = int(calls["cache_hit"].sum())
        print(f"  llm calls: {calls.height} ({errors} failed, {hits} from cache), {tokens} tokens")
    return _after_run(args, run, checking)


def _rate_limit(args: argparse.Namespace, llm: dict[str, Any]) -> int | None:
    """Apply aam's ``--no-rate-limit`` to ``llm``; return ``--rate-limit-max-concurrent``.

    aam's flags: ``--rate-limit-max-concurrent N`` caps the LLM calls in flight at once. In
    Vivarium every agent of a run shares one gateway, so the cap is the run's
    ``max_concurrency`` (each decision makes its calls one at a time). ``--no-rate-limit``
    drops every limit (requests and tokens per minute, calls at once), as in aam, where it
    wins over the other rate-limit flags; a flag it overrules is named on stderr.

    Returns:
        The cap on calls in flight, or None for none.
    """
    cap = args.rate_limit_max_concurrent
    if not args.no_rate_limit:
        return cap
    dropped = [
        flag
        for flag, key in (
            ("--rate-limit-rpm", "rate_limit_rpm"),
            ("--rate-limit-tpm", "rate_limit_tpm"),
        )
        if llm.pop(key, None) is not None
    ]
    if cap is not None:
        dropped.append("--rate-limit-max-concurrent")
    if dropped:
        print(
            f"vvm phase2: note: --no-rate-limit: {', '.join(dropped)} not applied", file=sys.stderr
        )
    return None


def _warn_health(run: Any) -> None:
    """Print one stderr line when the run is not a clean result.

    It is the warning ``Experiment.run()`` gives in a notebook (every LLM call failed,
    fallbacks, ...), in the same words.
    """
    from vivarium.experiment.runner import health_warning

    text = health_warning(run)
    if text is not None:
        print(f"warning: {text}", file=sys.stderr)


def _cmd_resume(args: argparse.Namespace) -> int:
    from vivarium.facade import Run
    from vivarium.trace.resume import is_complete

    done = Run.open(args.db)
    if is_complete(done):
        m = done.metadata
        print(
            f"run {m['run_id']} in {args.db} is already complete "
            f"({m['steps_done']}/{m['steps']} steps): nothing to resume"
        )
        return 0
    llm = _llm_overrides(args)
    _check_export_dir(args)
    start = time.perf_counter()
    run = done.resume(progress=False if args.no_progress else None, llm=llm or None)
    checking = _start_check(args, run)
    _summarise(run, time.perf_counter() - start)
    return _after_run(args, run, checking)


def _cmd_interview(args: argparse.Namespace) -> int:
    from vivarium.facade import Run

    llm = _llm_overrides(args)  # --api-base, --api-key or VIVARIUM_API_KEY, as every command
    model = llm.pop("model", None)
    asked = Run.open(args.db).interview(
        args.agent, args.step, args.question, model=model, llm=llm or None
    )
    print(asked.answer if asked.answer is not None else "(no text in the answer)")
    where = "the interview log" if asked.replayed else asked.model
    print(f"vvm interview: {args.agent} at step {args.step}, answered by {where}", file=sys.stderr)
    return 0


def parse_set_items(items: list[str] | None) -> dict[str, Any]:
    """``["seed=7", "llm.system_prompt=Be brief."]`` -> config fields (``vvm fork --set``).

    A dotted key sets a key of a section (``llm.temperature=0.7``); values are read as YAML
    scalars or collections (``agents=3``, ``action_space=[noop, emit_event]``), text as text.

    Raises:
        ConfigError: An item is not ``KEY=VALUE``.
    """
    import yaml

    fields: dict[str, Any] = {}
    for item in items or ():
        key, sep, text = item.partition("=")
        parts = [part.strip() for part in key.split(".")]
        if not sep or not all(parts):
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE (a section key as llm.KEY)")
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError:
            value = text
        target = fields
        for part in parts[:-1]:
            inner = target.setdefault(part, {})
            if not isinstance(inner, dict):
                raise ConfigError(f"--set {item!r}: {part} is given as a value and as a section")
            target = inner
        target[parts[-1]] = value
    return fields


def _cmd_fork(args: argparse.Namespace) -> int:
    from vivarium.facade import Run

    parent = Run.open(args.db)
    changes = parse_set_items(args.set)
    llm = _llm_overrides(args)  # how the fork's new calls are made: a server, a key
    if llm and (parent.config is None or parent.config.llm is not None):
        given = changes.get("llm")
        changes["llm"] = {**(given if isinstance(given, dict) else {}), **llm}
    agents = parse_set_items(args.set_agent) or None
    child = parent.fork(args.at_step, db=args.out, agent_changes=agents, **changes)
    start = time.perf_counter()
    run = child.run(progress=False if args.no_progress else None)
    _summarise(run, time.perf_counter() - start)
    fork = run.lineage[0]
    where = (
        "its parent, copied (nothing changed)"
        if run.run_id == parent.run_id
        else (f"a fork of {parent.run_id} at step {fork.fork_step}")
    )
    print(f"  {where}")
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    """Compare two runs (or two sweep folders): exit 0 when identical, 1 when they differ."""
    a, b = Path(args.a), Path(args.b)
    if a.is_dir() != b.is_dir():
        raise ConfigError(f"compare two traces or two sweep folders, not {a} and {b}")
    if a.is_dir():
        from vivarium.sweep.diff import diff_sweeps

        found: Any = diff_sweeps(a, b)
    else:
        from vivarium.trace.diff import diff_runs

        found = diff_runs(a, b)
    print("\n".join(found.lines()))
    return 0 if found.identical else 1


def _cmd_bundle(args: argparse.Namespace) -> int:
    from vivarium.experiment.bundle import make_bundle

    notes = make_bundle(args.paths, args.out, progress=not args.no_progress)
    for note in notes:
        print(f"vvm bundle: note: {note}", file=sys.stderr)
    print(f"bundled: {args.out} (check it anywhere with: vvm verify {args.out})")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    """Re-run a bundle's runs offline: exit 0 when every one matches, 1 otherwise."""
    from vivarium.experiment.bundle import verify_bundle

    check = verify_bundle(args.archive, progress=not args.no_progress, keep=args.keep)
    print("\n".join(check.lines()))
    return 0 if check.ok else 1


def _cmd_export(args: argparse.Namespace) -> int:
    from vivarium.trace.otel import export_otel

    if args.otel is None and args.endpoint is None:
        raise ConfigError("say where the run goes: --otel FILE (OTLP JSON) or --endpoint URL")
    headers = {}
    for item in args.header or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--header {item!r}: expected NAME=VALUE")
        headers[key.strip()] = value
    request = export_otel(
        args.db, args.otel, endpoint=args.endpoint, headers=headers, content=not args.no_content
    )
    spans = len(request["resourceSpans"][0]["scopeSpans"][0]["spans"])
    where = " and ".join(str(w) for w in (args.otel, args.endpoint) if w is not None)
    print(f"exported: {spans} spans (the run, its steps, its LLM calls) to {where}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from vivarium.facade import Run

    written = Run.open(args.db).report(args.out)
    print(f"report: {written} (one self-contained page: open it in any browser, offline)")
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    """Run a sweep: exit 0 when every run is complete, else 1.

    A failed sweep prints one stderr line (the count of failed runs and the first error); the
    summary goes to stdout either way.
    """
    from vivarium.errors import SweepFailed, SweepWarning
    from vivarium.sweep import main_sweep, parse_grid_items

    grid = parse_grid_items(args.grid) if args.grid else None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SweepWarning)  # said below, in one line
            sweep = main_sweep(
                args.config,
                grid,
                args.folder,
                args.backend,
                args.max_workers,
                replications=args.replications,
                paired=True if args.paired else None,
                seed=args.sweep_seed,
                ray_address=args.ray_address,
                progress=False if args.no_progress else None,
                overrides=_overrides(args) or None,
            )
    except SweepFailed as exc:
        if exc.sweep is not None:
            print(exc.sweep.summary())
        print(f"vvm sweep: error: {exc}", file=sys.stderr)
        return 1
    print(sweep.summary())
    if sweep.ok:
        return 0
    print(
        f"vvm sweep: error: {sweep.failed_count} of {len(sweep)} runs failed; first: "
        f"{sweep.first_error}; re-run the same command to retry them",
        file=sys.stderr,
    )
    return 1


def _cmd_figures(args: argparse.Namespace) -> int:
    from vivarium.paper import make_figures

    for path in make_figures(args.out, args.data):
        print(path)
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from vivarium.trace.validate import validate_trace

    worst = 0
    for path in args.db:
        report = validate_trace(path)
        print("\n".join(report.lines()))
        worst = max(worst, {"ok": 0, "incomplete": 3, "running": 3, "corrupt": 1}[report.status])
    return worst


def _interrupted_line(exc: RunInterrupted) -> str:
    """The run, the reason, what is kept, and the command that goes on, in one line."""
    if exc.run_id is None or exc.path is None:
        return str(exc)
    from vivarium.experiment.runner import kept_steps, when_to_resume

    kept = kept_steps(exc.step, exc.path)
    then = f"{when_to_resume(exc.reason)}: vvm resume {exc.path}"
    return one_line(f"run {exc.run_id} interrupted: {exc.reason}; {kept}; {then}")


def build_parser() -> argparse.ArgumentParser:
    """The ``vvm`` argument parser, with one subcommand per task.

    Returns:
        A parser whose errors print one line and exit with status 2.
    """
    parser = _Parser(prog="vvm", description="Vivarium: reproducible multi-agent simulations.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")

    p1 = sub.add_parser("phase1", help="random agents in the channel world, traced to SQLite")
    _add_run_flags(p1, steps=DEFAULT_STEPS, agents=DEFAULT_AGENTS)
    p1.set_defaults(func=_cmd_phase1)

    p2 = sub.add_parser("phase2", help="LLM agents in the channel world (mock or a real model)")
    _add_run_flags(p2, steps=10, agents=2)  # aam's ``vvm phase2`` defaults, as aam runs it
    llm = p2.add_argument_group("LLM")
    llm.add_argument("--model", default=None, help="litellm model name, e.g. openai/smollm2")
    llm.add_argument("--mock-llm", action="store_true", help="answer with the deterministic mock")
    llm.add_argument(
        "--api-base",
        default=None,
        help="OpenAI-compatible base URL; several servers: URLs separated by commas",
    )
    llm.add_argument(
        "--api-key", default=None, help="API key (or env VIVARIUM_API_KEY); never recorded"
    )
    llm.add_argument(
        "--transport",
        choices=["auto", "litellm", "direct"],
        default=None,
        help="auto (default): openai/ models on --api-base over plain HTTP, the rest via litellm",
    )
    llm.add_argument("--temperature", type=float, default=None)

    llm.add_argument("--max-tokens", type=_positive("--max-tokens"), default=None)
    llm.add_argument("--system-prompt", default=None)
    llm.add_argument(
        "--force-tool",
        nargs="?",
        const="auto",
        default=None,
        metavar="TOOL",
        help="force a tool call (default: the world's main action, post_message in the "
        "channel, write_artifact in the ecology); small local models need it",
    )
    llm.add_argument(
        "--forced-tool-format",
        choices=["tool_choice", "json_schema"],
        default=None,
        help="how --force-tool reaches the server: tool_choice (default), or json_schema for "
        "servers whose chat template cannot call tools (e.g. llama-server with SmolLM2)",
    )
    llm.add_argument("--no-graph", action="store_true", help="plain policy instead of LangGraph")
    llm.add_argument(
        "--max-concurrency",
        type=_positive("--max-concurrency"),
        default=None,
        help="decisions in flight at once (default: the engine's)",
    )
    llm.add_argument("--rate-limit-rpm", type=_positive("--rate-limit-rpm"), default=None)
    llm.add_argument("--rate-limit-tpm", type=_positive("--rate-limit-tpm"), default=None)
    llm.add_argument(
        "--rate-limit-max-concurrent",
        type=_positive("--rate-limit-max-concurrent"),
        default=None,
        metavar="N",
        help="LLM calls in flight at once across the run (caps --max-concurrency)",
    )
    llm.add_argument(
        "--no-rate-limit",
        action="store_true",
        help="no rate limits: the --rate-limit-* flags are not applied",
    )
    llm.add_argument("--cache", type=Path, default=None, help="record/replay cassette file")
    llm.add_argument("--cache-mode", choices=["record", "replay", "auto"], default=None)
    llm.add_argument("--timeout", type=float, default=None, help="seconds per HTTP call")
    llm.add_argument("--num-retries", type=_positive("--num-retries", 0), default=None)
    llm.add_argument("--agent-timeout", type=float, default=None, help="seconds per decision")
    llm.add_argument("--agent-retries", type=_positive("--agent-retries", 0), default=None)
    llm.add_argument("--mock-latency-ms", type=float, default=None)
    llm.add_argument(
        "--on-llm-error", choices=["stop", "fallback"], default=None, help=ON_LLM_ERROR_HELP
    )
    p2.set_defaults(func=_cmd_phase2)

    pr = sub.add_parser("run", help="run an experiment config (YAML or JSON)")
    pr.add_argument("config", type=Path, help="config file")
    _add_run_flags(pr, steps=None, agents=None)
    pr.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="run agents autonomously for this long (virtual clock unless --real-clock)",
    )
    pr.add_argument("--real-clock", action="store_true", help="autonomous mode on wall-clock time")
    pr.add_argument("--mock-llm", action="store_true", help="LLM agents answer with the mock")
    pr.add_argument(
        "--max-concurrency",
        type=_positive("--max-concurrency"),
        default=None,
        help="async decisions (LLM agents, async policies) in flight at once; overrides the "
        "config's",
    )
    pr.add_argument(
        "--on-llm-error", choices=["stop", "fallback"], default=None, help=ON_LLM_ERROR_HELP
    )
    pr.add_argument(
        "--api-base",
        default=None,
        help="the LLM server(s) instead of the config's llm.api_base: URLs separated by commas",
    )

    pr.set_defaults(func=_cmd_run)

    pe = sub.add_parser(
        "experiment", help="run an aam experiment config (JSON: run / scheduler / policy sections)"
    )
    pe.add_argument(
        "--config", type=Path, required=True, help="aam's sectioned JSON experiment config"
    )
    pe.add_argument("--run-id", default=None, help="run id (over the config's run.run_id)")
    pe.add_argument(
        "--runs-dir",
        type=Path,
        default=None,
        help="folder of the trace, runs-dir/<config name>.sqlite (default: run.runs_dir)",
    )
    pe.add_argument(
        "--override",
        action="append",
        default=None,
        metavar="SECTION.KEY=VALUE",
        help="set a config key, e.g. --override run.steps=100 (repeatable)",
    )
    pe.add_argument("--db", type=Path, default=None, help="trace file (over --runs-dir)")
    pe.add_argument(
        "--overwrite", action="store_true", help="replace the trace even when it holds another run"
    )
    pe.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_after_run_flags(pe)
    pe.set_defaults(func=_cmd_experiment)

    pz = sub.add_parser(
        "resume", help="finish an interrupted run where it stopped, as if it never had"
    )
    pz.add_argument("db", type=Path, help="trace file of the interrupted run")
    pz.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_after_run_flags(pz)
    rz = pz.add_argument_group(
        "LLM (default: as the run recorded them; the API key is never recorded)"
    )
    rz.add_argument("--api-base", default=None)
    rz.add_argument("--api-key", default=None, help="or env VIVARIUM_API_KEY")
    rz.add_argument("--transport", choices=["auto", "litellm", "direct"], default=None)
    rz.add_argument("--cache", type=Path, default=None)
    rz.add_argument("--cache-mode", choices=["record", "replay", "auto"], default=None)
    rz.add_argument(
        "--max-concurrency",
        type=_positive("--max-concurrency"),
        default=None,
        help="decisions in flight at once (default: as recorded)",
    )
    rz.add_argument("--rate-limit-rpm", type=_positive("--rate-limit-rpm"), default=None)
    rz.add_argument("--rate-limit-tpm", type=_positive("--rate-limit-tpm"), default=None)
    rz.add_argument("--timeout", type=float, default=None, help="seconds per HTTP call")
    rz.add_argument("--num-retries", type=_positive("--num-retries", 0), default=None)
    rz.add_argument("--agent-timeout", type=float, default=None, help="seconds per decision")
    rz.add_argument("--agent-retries", type=_positive("--agent-retries", 0), default=None)
    rz.add_argument(
        "--on-llm-error", choices=["stop", "fallback"], default=None, help=ON_LLM_ERROR_HELP
    )
    pz.set_defaults(func=_cmd_resume)

    pi = sub.add_parser(
        "interview",
        help="ask an LLM agent of a run a question, in the context it had at a step "
        "(the trace is not written; the exchange is kept beside it)",
    )
    pi.add_argument("db", type=Path, help="trace file of the run")
    pi.add_argument("question", help="what to ask")
    pi.add_argument("--agent", required=True, help="the agent's id (agent_000, ...)")
    pi.add_argument("--step", type=_positive("--step", 0), required=True, help="the step")
    pi.add_argument("--model", default=None, help="the model that answers (default: the run's)")
    pi.add_argument("--api-base", default=None)
    pi.add_argument("--api-key", default=None, help="or env VIVARIUM_API_KEY")
    pi.set_defaults(func=_cmd_interview)

    pk = sub.add_parser(
        "fork", help="run a recorded run again from a step on, with some of its config changed"
    )
    pk.add_argument("db", type=Path, help="trace file of the parent run")
    pk.add_argument(
        "--at-step",
        type=_positive("--at-step", 0),
        required=True,
        help="the fork's first own step (the steps before are the parent's, copied)",
    )
    pk.add_argument(
        "--set",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="a config change, e.g. --set seed=7 --set llm.system_prompt='Be brief.' "
        "(repeatable; none: the fork is its parent)",
    )
    pk.add_argument(
        "--set-agent",
        action="append",
        default=None,
        metavar="AGENT.KEY=VALUE",
        help="one agent's own change, e.g. --set-agent agent_001.system_prompt='Be brief.' "
        "(its policy, model, temperature, ...; repeatable)",
    )
    pk.add_argument(
        "--out", type=Path, default=None, help="the fork's trace (default: beside the parent's)"
    )
    pk.add_argument("--no-progress", action="store_true", help="no progress bar")
    rk = pk.add_argument_group("LLM: how the fork's new calls are made (never recorded: the key)")
    rk.add_argument("--api-base", default=None)
    rk.add_argument("--api-key", default=None, help="or env VIVARIUM_API_KEY")
    pk.set_defaults(func=_cmd_fork)

    pb = sub.add_parser(
        "bundle", help="put runs, sweeps or folders of traces in one archive a reviewer verifies"
    )
    pb.add_argument("paths", type=Path, nargs="+", help="trace files, sweep folders, folders")
    pb.add_argument("--out", type=Path, required=True, help="the archive to write (study.zip)")
    pb.add_argument("--no-progress", action="store_true", help="no progress bar")
    pb.set_defaults(func=_cmd_bundle)

    pv_ = sub.add_parser(
        "verify", help="re-run a bundle's runs offline and check every trace; exit 0 when all match"
    )
    pv_.add_argument("archive", type=Path, help="the bundle (study.zip)")
    pv_.add_argument(
        "--keep", type=Path, default=None, help="keep the re-run traces in this folder"
    )
    pv_.add_argument("--no-progress", action="store_true", help="no progress bar")
    pv_.set_defaults(func=_cmd_verify)

    pr = sub.add_parser(
        "report", help="a run as one static HTML page: summary, health, figures, decisions"
    )
    pr.add_argument("db", type=Path, help="trace file of the run")
    pr.add_argument("--out", type=Path, required=True, help="the page to write (run.html)")
    pr.set_defaults(func=_cmd_report)

    px = sub.add_parser(
        "export", help="a run as one OpenTelemetry trace (OTLP JSON) for Phoenix, Langfuse, ..."
    )
    px.add_argument("db", type=Path, help="trace file of the run")
    px.add_argument("--otel", type=Path, default=None, help="write OTLP JSON to this file")
    px.add_argument(
        "--endpoint", default=None, help="also send it to this OTLP/HTTP collector (base URL)"
    )
    px.add_argument(
        "--header",
        action="append",
        default=None,
        metavar="NAME=VALUE",
        help="an HTTP header for the endpoint, e.g. Authorization='Basic ...' (repeatable)",
    )
    px.add_argument(
        "--no-content", action="store_true", help="leave the prompts and replies out of the spans"
    )
    px.set_defaults(func=_cmd_export)

    pd_ = sub.add_parser(
        "diff",
        help="compare two runs (or sweeps): config, first divergence, decisions that differ; "
        "exit 0 when identical, 1 when not",
    )
    pd_.add_argument("a", type=Path, help="a trace file (or a sweep folder)")
    pd_.add_argument("b", type=Path, help="the trace (or sweep folder) to compare it with")
    pd_.set_defaults(func=_cmd_diff)

    ps = sub.add_parser("sweep", help="run a config over a grid of parameters and seeds")
    ps.add_argument("config", type=Path, help="config file (may hold a `sweep:` section)")
    _add_run_flags(ps, steps=None, agents=None, db=False)

    ps.add_argument(
        "--grid",
        action="append",
        default=None,
        metavar="FIELD=V1,V2",
        help="a grid axis, e.g. --grid seed=1,2,3 --grid agents=5,50 (repeatable)",
    )
    ps.add_argument(
        "--folder", type=Path, default=None, help="sweep folder (default runs/<name>-sweep)"
    )
    ps.add_argument("--backend", choices=["local", "ray", "inline"], default=None)
    ps.add_argument("--max-workers", type=_positive("--max-workers"), default=None)
    ps.add_argument("--replications", type=_positive("--replications"), default=None)
    ps.add_argument(
        "--paired",
        action="store_true",
        help="every point of a replication runs with the same seed (common random numbers)",
    )
    ps.add_argument("--sweep-seed", type=_positive("--sweep-seed", 0), default=None)
    ps.add_argument("--ray-address", default=None, help="join a Ray cluster")
    ps.set_defaults(func=_cmd_sweep)

    pf = sub.add_parser("figures", help="regenerate the paper figures from the data/ folder")

    pf.add_argument("--out", type=Path, default=Path("paper/figures"), help="output folder")
    pf.add_argument("--data", type=Path, default=Path("data"), help="the recorded data folder")
    pf.set_defaults(func=_cmd_figures)

    pv = sub.add_parser(
        "validate",
        help=(
            "check traces: complete, numbered, hash chain intact "
            "(exit 0 ok, 1 corrupt, 3 incomplete or still being written)"
        ),
    )
    pv.add_argument("db", type=Path, nargs="+", help="trace file(s)")
    pv.set_defaults(func=_cmd_validate)
    return parser


def _note_trace_path(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
    *,
    command: str = "vvm",
    fallback: Callable[..., None] = warnings.showwarning,
) -> None:
    """Show a ``TracePathWarning`` as one stderr line (where the trace went); others as usual.

    A ``ServerWarning`` (a server of several failed), an ``OverrideWarning`` (the mock now
    answers, or a model), an ``IdentityWarning`` and a ``ResumedWarning`` (``vvm run`` again
    went on with its own interrupted trace) are one line too.
    """
    from vivarium.gateways.servers import ServerWarning

    if issubclass(
        category,
        TracePathWarning | ServerWarning | OverrideWarning | IdentityWarning | ResumedWarning,
    ):
        print(f"vvm {command}: note: {message}", file=sys.stderr)
    else:
        fallback(message, category, filename, lineno, file, line)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``vvm`` (the console script's entry point).

    Without a command (``vvm``, or ``vvm --steps 5``) it runs ``vvm phase1``, as aam's
    ``vvm`` does, and says so first.

    Args:
        argv: The arguments after the program name; None reads ``sys.argv``.

    Returns:
        The exit status: 0 on success, 1 when a sweep or a check did not pass, 2
        (``EXIT_USAGE``) for bad input, reported as one line; 3 (``EXIT_INTERRUPTED``) when
        the LLM server failed past the retries (the run resumes); 130 on Ctrl-C.
    """
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    # No command runs phase 1 with its defaults, as aam's ``vvm`` does (its flags may follow).
    implicit = not words or (words[0].startswith("-") and words[0] not in _TOP_LEVEL_FLAGS)
    args = parser.parse_args(["phase1", *words] if implicit else words)
    args.implicit = implicit
    if args.version:
        from vivarium._version import __version__

        print(f"vivarium-lab {__version__}")
        return 0
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    from vivarium.engine.interrupts import interrupt_signals

    try:
        # SIGTERM stops a run as Ctrl-C does: the trace is marked interrupted, one line says so.
        with warnings.catch_warnings(), interrupt_signals():
            # The CLI prints a run's health itself, as one line (see _warn_health).
            warnings.simplefilter("ignore", RunHealthWarning)
            warnings.simplefilter("always", TracePathWarning)
            warnings.showwarning = functools.partial(
                _note_trace_path, command=args.command, fallback=warnings.showwarning
            )
            code = int(args.func(args))
        sys.stdout.flush()  # a reader that went away shows here, inside the handler below
        return code
    except RunInterrupted as exc:
        # The LLM server failed past the retries: the trace keeps every step before, and
        # the line says how to resume it.
        print(f"vvm {args.command}: {_interrupted_line(exc)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ConfigError as exc:
        print(f"vvm {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except VivariumError as exc:
        print(f"vvm {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:
        signum = int(getattr(exc, "signum", 2))  # vivarium.engine.interrupts.Interrupted
        by = "" if signum == 2 else f" by {getattr(exc, 'name', signum)}"
        print(f"vvm {args.command}: interrupted{by}; committed steps are kept", file=sys.stderr)
        return 128 + signum
    except BrokenPipeError:
        # The reader went away (``vvm ... | head``): the run is complete, only the summary was
        # cut. Point stdout at /dev/null so the exit flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13  # as if killed by SIGPIPE, the shell convention


if __name__ == "__main__":
    raise SystemExit(main())
