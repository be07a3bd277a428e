"""A run as one OpenTelemetry trace: OTLP JSON for Phoenix, Langfuse and any OTLP collector.

``run.to_otel(path)`` / ``vvm export TRACE --otel PATH`` write the run as one OTLP trace
(``ExportTraceServiceRequest`` in OTLP's JSON encoding): a span for the run, one per step under
it, and one per LLM call attempt under its step, carrying OpenTelemetry's GenAI semantic
conventions: ``gen_ai.operation.name`` (``chat``), ``gen_ai.provider.name``,
``gen_ai.request.model``, ``gen_ai.response.model``, ``gen_ai.usage.input_tokens`` and
``output_tokens``, ``gen_ai.response.finish_reasons``, ``gen_ai.request.temperature`` and
``max_tokens``, ``error.type`` for a failed attempt, and the prompt and reply as the
convention's opt-in content attributes (``gen_ai.input.messages``, ``gen_ai.output.messages``,
JSON), left out with ``content=False``. Vivarium's own attributes say which agent, step and
decision a span is (``vivarium.*``).

Times: a trace with wall-clock times places its spans where they happened; a deterministic one
(the default: no wall clock recorded) is laid out from the run's start (1 January 2000 UTC when
it recorded none), each step as long as its slowest call (1 ms when it made none), each call as
long as its recorded latency. Ids derive from the run id, so the same run gives the same file.

``endpoint=`` also sends it to an OTLP/HTTP collector (``POST {endpoint}/v1/traces``): as
protobuf when ``opentelemetry-proto`` is installed (what Phoenix takes, and every collector), else
as OTLP's JSON (which Langfuse and the OpenTelemetry Collector take).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vivarium.errors import TraceError
from vivarium.trace.db import check_trace_file
from vivarium.trace.onefile import read_connection

__all__ = ["export_otel", "otel_trace"]

_EPOCH_2000_NS = 946_684_800 * 10**9
_MS = 1_000_000


def _id(run_id: str, *parts: object, size: int = 16) -> str:
    text = "/".join(str(p) for p in (run_id, *parts))
    return hashlib.sha256(text.encode()).hexdigest()[: size * 2]


def _attr(key: str, value: Any) -> dict[str, Any] | None:
    """One OTLP attribute (None values are left out)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    if isinstance(value, list | tuple):
        return {
            "key": key,
            "value": {"arrayValue": {"values": [{"stringValue": str(v)} for v in value]}},
        }
    return {"key": key, "value": {"stringValue": str(value)}}


def _attrs(**values: Any) -> list[dict[str, Any]]:
    found = [_attr(k.replace("__", "."), v) for k, v in values.items()]
    return [a for a in found if a is not None]


def _start_ns(created: str | None) -> int:
    if created:
        try:
            moment = datetime.fromisoformat(created.replace("Z", "+00:00"))
        except ValueError:
            return _EPOCH_2000_NS
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return int(moment.timestamp() * 10**9)
    return _EPOCH_2000_NS


def otel_trace(path: str | os.PathLike[str], *, content: bool = True) -> dict[str, Any]:
    """The run at ``path`` as an OTLP ``ExportTraceServiceRequest`` (a JSON-ready dict).

    Args:
        path: The trace file.
        content: Put the prompt and reply text on each LLM call's span.

    Raises:
        TraceError: The file is no trace with a run recorded (one line).
    """
    p = check_trace_file(path)
    con = read_connection(p)
    try:
        row = con.execute(
            "SELECT run_id, name, world, policy, seed, status, created_at FROM runs"
        ).fetchone()
        if row is None:
            raise TraceError(f"{p}: no run recorded")
        run_id, name, world, policy, seed, status, created = row
        agents = dict(con.execute("SELECT agent_idx, agent_id FROM agents"))
        steps = con.execute(
            "SELECT step, n_actions, n_messages, state_hash FROM steps ORDER BY step"
        ).fetchall()
        calls = con.execute(
            "SELECT id, step, agent_idx, attempt, model, request_hash, prompt_tokens, "
            "completion_tokens, cost, latency_ms, cache_hit, finish_reason, error "
            "FROM llm_calls ORDER BY id"
        ).fetchall()
    except sqlite3.Error as exc:
        raise TraceError(f"cannot read {p} for OpenTelemetry: {exc}") from None
    finally:
        con.close()
    texts = _texts(p, [c[0] for c in calls]) if content and calls else {}
    by_step: dict[int, list[tuple[Any, ...]]] = {}
    for call in calls:
        by_step.setdefault(call[1], []).append(call)
    trace_id = _id(run_id, size=16)
    root_id = _id(run_id, "run", size=8)
    spans: list[dict[str, Any]] = []
    clock = _start_ns(created)
    start = clock
    for step, n_actions, n_messages, state_hash in steps:
        step_id = _id(run_id, "step", step, size=8)
        step_calls = by_step.get(step, [])
        longest = max((int((c[9] or 0) * _MS) for c in step_calls), default=0)
        length = max(longest, _MS)
        for call in step_calls:
            spans.append(_call_span(trace_id, step_id, run_id, clock, call, agents, texts))
        spans.append(
            {
                "traceId": trace_id,
                "spanId": step_id,
                "parentSpanId": root_id,
                "name": f"step {step}",
                "kind": 1,
                "startTimeUnixNano": str(clock),
                "endTimeUnixNano": str(clock + length),
                "attributes": _attrs(
                    vivarium__step=step,
                    vivarium__decisions=n_actions,
                    vivarium__messages=n_messages,
                    vivarium__state_hash=state_hash,
                ),
                "status": {},
            }
        )
        clock += length
    spans.insert(
        0,
        {
            "traceId": trace_id,
            "spanId": root_id,
            "name": f"run {name}",
            "kind": 1,
            "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(max(clock, start + _MS)),
            "attributes": _attrs(
                vivarium__run_id=run_id,
                vivarium__world=world,
                vivarium__policy=policy,
                vivarium__seed=seed,
                vivarium__status=status,
                vivarium__steps=len(steps),
            ),
            "status": {"code": 1 if status == "complete" else 0},
        },
    )
    resource = {"attributes": _attrs(service__name="vivarium", vivarium__run_id=run_id)}
    scope = {"name": "vivarium", "version": _version()}
    return {
        "resourceSpans": [{"resource": resource, "scopeSpans": [{"scope": scope, "spans": spans}]}]
    }


def _call_span(
    trace_id: str,
    parent: str,
    run_id: str,
    start: int,
    call: tuple[Any, ...],
    agents: dict[int, str],
    texts: dict[int, dict[str, Any]],
) -> dict[str, Any]:
    cid, step, agent_idx, attempt, model, request_hash, prompt, completion, cost, latency, hit = (
        call[:11]
    )
    finish, error = call[11], call[12]
    exchange = texts.get(cid, {})
    request = exchange.get("request") if isinstance(exchange.get("request"), dict) else {}
    reply = exchange.get("reply") if isinstance(exchange.get("reply"), dict) else {}
    provider, _, bare = (model or "").partition("/")
    output = None
    if reply and not error:
        output = [{"role": "assistant", "content": reply.get("content"),
                   "tool_calls": reply.get("tool_calls")}]  # fmt: skip
    return {
        "traceId": trace_id,
        "spanId": _id(run_id, "call", cid, size=8),
        "parentSpanId": parent,
        "name": f"chat {model}",
        "kind": 3,  # CLIENT
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + max(int((latency or 0) * _MS), 1)),
        "attributes": _attrs(
            gen_ai__operation__name="chat",
            gen_ai__provider__name=provider if bare else "vivarium",
            gen_ai__request__model=model,
            gen_ai__response__model=model,
            gen_ai__request__temperature=request.get("temperature"),
            gen_ai__request__max_tokens=request.get("max_tokens"),
            gen_ai__usage__input_tokens=prompt,
            gen_ai__usage__output_tokens=completion,
            gen_ai__response__finish_reasons=[finish] if finish else None,
            gen_ai__input__messages=json.dumps(request["messages"])
            if request.get("messages")
            else None,
            gen_ai__output__messages=json.dumps(output) if output else None,
            error__type=error.split(":", 1)[0] if error else None,
            vivarium__agent_id=agents.get(agent_idx),
            vivarium__step=step,
            vivarium__attempt=attempt,
            vivarium__request_hash=request_hash,
            vivarium__cache_hit=bool(hit),
            vivarium__cost_usd=cost,
        ),
        "status": {"code": 2, "message": str(error)[:500]} if error else {"code": 1},
    }


def _protobuf(request: dict[str, Any]) -> bytes | None:
    """``request`` as OTLP protobuf, or None without ``opentelemetry-proto``.

    OTLP's JSON writes ids in hex; protobuf's JSON mapping reads bytes as base64, so the ids are
    converted before the message is parsed.
    """
    try:
        from google.protobuf import json_format
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )
    except ImportError:
        return None
    import base64

    data = json.loads(json.dumps(request))
    for resource in data["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    message = json_format.Parse(json.dumps(data), ExportTraceServiceRequest())
    return bytes(message.SerializeToString())


def _is_otlp(path: Path) -> bool:
    """Whether ``path`` holds an OTLP JSON export (one that may be written again)."""
    try:
        return "resourceSpans" in json.loads(path.read_bytes())
    except (OSError, ValueError, TypeError):
        return False


def _texts(path: Path, ids: list[int]) -> dict[int, dict[str, Any]]:
    from vivarium.trace.llm_texts import read_exchanges

    return read_exchanges(path, ids)


def _version() -> str:
    from vivarium._version import __version__

    return __version__


def export_otel(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    endpoint: str | None = None,
    headers: dict[str, str] | None = None,
    content: bool = True,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """Write the run at ``path`` as OTLP JSON to ``out`` and/or send it to ``endpoint``.

    Args:
        path: The trace file.
        out: The JSON file to write (None: none).
        endpoint: An OTLP/HTTP collector's base URL (``http://localhost:6006``): the trace is
            posted to ``{endpoint}/v1/traces`` as JSON.
        headers: HTTP headers for the endpoint (Langfuse's ``Authorization``).
        content: Put prompts and replies on the call spans.
        timeout: Seconds the endpoint may take.

    Returns:
        The request (as written and sent).

    Raises:
        TraceError: The trace cannot be read, the file cannot be written, or the endpoint
            refused it (one line).
    """
    request = otel_trace(path, content=content)
    body = json.dumps(request, separators=(",", ":")).encode()
    if out is not None:
        target = Path(out)
        if target.exists() and not _is_otlp(target):
            raise TraceError(f"{target} exists and is not an OTLP export; give another file")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(body)
        except OSError as exc:
            raise TraceError(f"cannot write {target}: {exc.strerror or exc}") from None
    if endpoint is not None:
        url = endpoint.rstrip("/") + (
            "" if endpoint.rstrip("/").endswith("/v1/traces") else "/v1/traces"
        )
        # Protobuf where OpenTelemetry's message definitions are installed (every collector
        # takes it; Phoenix takes nothing else), else OTLP's JSON.
        payload, kind = _protobuf(request), "application/x-protobuf"
        if payload is None:
            payload, kind = body, "application/json"
        try:
            post = urllib.request.Request(
                url,
                data=payload,
                method="POST",
                headers={**(headers or {}), "Content-Type": kind},
            )
            with urllib.request.urlopen(post, timeout=timeout) as reply:  # noqa: S310
                if reply.status >= 300:
                    raise TraceError(f"{url} answered {reply.status}")
        except (OSError, ValueError) as exc:  # refused, unreachable, or no URL at all
            raise TraceError(f"cannot send the trace to {url}: {exc}") from None
    return request
