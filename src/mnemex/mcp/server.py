"""The MCP server: mnemex's API as tools an agent calls, scoped to one namespace of one store.

Each tool parses its arguments, calls one :class:`~mnemex.store.Store` method
and returns one of the compact values in :mod:`mnemex.mcp.results`. The store
is opened by the server's lifespan, on the namespace of the settings it was
built with; no tool takes a namespace, so an agent never sees another one.

Bad input never stops the server: wrong types, unknown arguments, oversized
values and every :class:`~mnemex.errors.MnemexError` come back as a tool
result with ``isError`` and a message that says what to do instead.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field, ValidationError

from mnemex import config
from mnemex.config import Settings
from mnemex.engine.embedding import FROM_SETTINGS
from mnemex.errors import MnemexError, UnknownMemory, unknown_ids
from mnemex.mcp import results
from mnemex.mcp.results import (
    AddOutput,
    ForgetOutput,
    GetOutput,
    RecallOutput,
    RelateOutput,
    SearchOutput,
    StatsOutput,
    TimelineOutput,
    UpdateOutput,
    tool_result,
)
from mnemex.store import Store
from mnemex.version import __version__

# Bounds on tool input: an agent's mistake (a whole file as a query, thousands of
# ids) is refused with a clear message instead of being searched or echoed back.
MAX_TEXT_CHARS = 4_000  # a query or a task
MAX_IDS = 100  # ids per memory_get or memory_forget
MAX_LABELS = 20  # kinds or tags per filter
MAX_HITS = 50  # search hits or timeline entries per call
MAX_NEIGHBOURS = 50  # timeline entries on each side of `around`
MAX_RECALL_BUDGET = 8_000  # tokens

PINNED = "Pinned: never ranked lower for its age."

INSTRUCTIONS = """\
mnemex is this project's long-term memory: observations, decisions, facts and \
gotchas saved by earlier sessions. Read it in layers to save context:
1. memory_search (by meaning and words) or memory_timeline (by time) list ids with a \
short snippet or summary;
2. memory_get fetches in full only the ids worth reading.
memory_recall instead returns a ready "## Relevant Memories" block for a task. \
Save what a later session should know with memory_add (repeats are merged, not \
duplicated), correct its tags, confidence or pin with memory_update, and record links \
between things with memory_relate."""

_READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_ADD = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
_RELATE = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
_UPDATE = _RELATE
_FORGET = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)

Query = Annotated[
    str,
    Field(
        max_length=MAX_TEXT_CHARS,
        description="What to look for, in plain words; any characters are safe.",
    ),
]
Ids = Annotated[
    list[Annotated[str, Field(max_length=200)]],
    Field(min_length=1, max_length=MAX_IDS, description="Memory ids from search or timeline."),
]
Kinds = Annotated[
    list[Annotated[str, Field(max_length=40)]] | None,
    Field(max_length=MAX_LABELS, description="Only these kinds (e.g. decision, fact, gotcha)."),
]
Tags = Annotated[
    list[Annotated[str, Field(max_length=100)]] | None,
    Field(max_length=MAX_LABELS, description="Only memories carrying every one of these tags."),
]
TIME_FORMS = "an ISO 8601 date or time, epoch seconds, or an age such as 7d, 12h or 2w ago"


Since = Annotated[
    str | None,
    Field(max_length=64, description=f"Only memories created at or after this time: {TIME_FORMS}."),
]
Start = Since
_BEFORE = "Only memories created before this time (same forms as {})."
Until = Annotated[str | None, Field(max_length=64, description=_BEFORE.format("since"))]
End = Annotated[str | None, Field(max_length=64, description=_BEFORE.format("start"))]
Confidence = Annotated[float, Field(ge=0, le=1, description="How sure, from 0 to 1.")]


def _store(ctx: Context[Any, Any]) -> Store:
    store: Store = ctx.request_context.lifespan_context
    return store


def memory_search(
    ctx: Context[Any, Any],
    query: Query,
    limit: Annotated[
        int | None,
        Field(ge=1, le=MAX_HITS, description=f"Most hits; {config.default_text('search_limit')}."),
    ] = None,
    mode: Annotated[
        Literal["lexical", "vector", "hybrid"] | None,
        Field(
            description="lexical matches words, vector matches meaning, hybrid does both "
            "(the default when an embedding model is configured)."
        ),
    ] = None,
    kinds: Kinds = None,
    tags: Tags = None,
    since: Since = None,
    until: Until = None,
) -> Annotated[CallToolResult, SearchOutput]:
    """Find memories that match a query, best first: id, score, snippet, kind, tags, time.

    Start here (or with memory_timeline), then call memory_get with only the ids
    worth reading in full. Known links between things the query names (subject,
    predicate, object) are listed separately, in relations.
    """
    if not query.strip():
        raise ToolError(
            "query is empty: give a few words to look for, or use memory_timeline to browse "
            "memories by time"
        )
    found = _store(ctx).search(
        query, limit, kinds=kinds, tags=tags, since=since, until=until, mode=mode
    )
    return tool_result(results.search_output(found))


def memory_timeline(
    ctx: Context[Any, Any],
    start: Start = None,
    end: End = None,
    kinds: Kinds = None,
    tags: Tags = None,
    limit: Annotated[int, Field(ge=1, le=MAX_HITS, description="Most entries.")] = 20,
    around: Annotated[
        str | None,
        Field(max_length=200, description="A memory id: show it with its neighbours in time."),
    ] = None,
    before: Annotated[
        int, Field(ge=0, le=MAX_NEIGHBOURS, description="With around: entries before it.")
    ] = 5,
    after: Annotated[
        int, Field(ge=0, le=MAX_NEIGHBOURS, description="With around: entries after it.")
    ] = 5,
) -> Annotated[CallToolResult, TimelineOutput]:
    """List memories by time, newest first: id, time, kind, tags and a 100-character summary.

    Browse what happened in a period (start, end), or what came just before and
    after one memory (around). Then call memory_get with the ids worth reading.
    """
    entries = _store(ctx).timeline(
        start, end, kinds=kinds, tags=tags, limit=limit, around=around, before=before, after=after
    )
    return tool_result(results.timeline_output(entries))


def memory_get(ctx: Context[Any, Any], ids: Ids) -> Annotated[CallToolResult, GetOutput]:
    """Read memories in full by id, in the order asked; unknown ids are listed in missing.

    Ask only for the ids that memory_search or memory_timeline showed to be worth it.
    """
    found = _store(ctx).get(ids)
    if not found.memories:
        raise _unknown(list(found.missing), _store(ctx).namespace)
    return tool_result(results.get_output(found))


def memory_recall(
    ctx: Context[Any, Any],
    task: Annotated[
        str,
        Field(max_length=MAX_TEXT_CHARS, description="The task or question at hand."),
    ],
    budget_tokens: Annotated[
        int | None,
        Field(
            ge=1,
            le=MAX_RECALL_BUDGET,
            description=f"Most tokens; {config.default_text('recall_budget')}.",
        ),
    ] = None,
    max_memories: Annotated[
        int | None,
        Field(
            ge=1, le=MAX_HITS, description=f"Most memories; {config.default_text('recall_max')}."
        ),
    ] = None,
) -> Annotated[CallToolResult, RecallOutput]:
    """The memories most relevant to a task as a "## Relevant Memories" markdown block.

    One line per memory, best first, within the token budget; paste it into your
    working context. For anything longer, use memory_search then memory_get.
    """
    if not task.strip():
        raise ToolError("task is empty: describe the task to recall memories for")
    recalled = _store(ctx).recall(task, budget_tokens, max_memories)
    return tool_result(results.recall_output(recalled))


def memory_add(
    ctx: Context[Any, Any],
    content: Annotated[str, Field(description="The memory: one self-contained statement.")],
    kind: Annotated[
        str, Field(max_length=40, description="observation, decision, fact, gotcha, ...")
    ] = config.DEFAULT_KIND,
    tags: Annotated[
        list[Annotated[str, Field(max_length=100)]] | None,
        Field(max_length=MAX_LABELS, description="Short labels to filter by later."),
    ] = None,
    source: Annotated[str | None, Field(max_length=1000, description="Where it came from.")] = None,
    confidence: Confidence = config.DEFAULT_CONFIDENCE,
    pinned: Annotated[bool, Field(description=PINNED)] = False,
    created_at: Annotated[
        str | None, Field(max_length=64, description="When it happened (default: now).")
    ] = None,
    metadata: Annotated[
        dict[str, Any] | None, Field(description="Any JSON object to keep with it.")
    ] = None,
) -> Annotated[CallToolResult, AddOutput]:
    """Save a memory a later session should know: a decision, fact, preference or gotcha.

    A memory that repeats one already saved is merged into it (deduplicated: true,
    with the existing id) instead of stored twice.
    """
    store = _store(ctx)
    added = store.remember(
        content,
        kind=kind,
        tags=tags,
        source=source,
        confidence=confidence,
        pinned=pinned,
        created_at=created_at,
        metadata=metadata,
    )
    warning = store.last_embedding_error
    if warning:
        warning = f"stored without a vector, found by words only until `mnemex embed`: {warning}"
    return tool_result(results.add_output(added, warning))


def memory_update(
    ctx: Context[Any, Any],
    id: Annotated[
        str, Field(max_length=200, description="A memory id from memory_search or memory_timeline.")
    ],
    confidence: Annotated[
        float | None, Field(ge=0, le=1, description="How sure, from 0 to 1.")
    ] = None,
    pinned: Annotated[bool | None, Field(description=PINNED)] = None,
    tags: Annotated[
        list[Annotated[str, Field(max_length=100)]] | None,
        Field(
            max_length=MAX_LABELS,
            description="The memory's new tags, replacing the old; [] removes all.",
        ),
    ] = None,
) -> Annotated[CallToolResult, UpdateOutput]:
    """Change a saved memory's confidence, pin or tags; its id and content stay.

    Give only what changes. To change what a memory says, memory_add the corrected
    statement and memory_forget the old one.
    """
    changes: dict[str, Any] = {
        name: value
        for name, value in (("confidence", confidence), ("pinned", pinned), ("tags", tags))
        if value is not None
    }
    if not changes:
        raise ToolError("nothing to change: give confidence, pinned or tags")
    updated = _store(ctx).update(id, **changes)
    return tool_result(results.update_output(updated))


def memory_forget(
    ctx: Context[Any, Any],
    ids: Ids,
    relations: Annotated[
        bool, Field(description="The ids are relation ids (from memory_search or memory_relate).")
    ] = False,
) -> Annotated[CallToolResult, ForgetOutput]:
    """Delete memories (or, with relations: true, relations) by id, for good.

    Unknown ids are listed in missing.
    """
    store = _store(ctx)
    result = store.forget_relations(ids) if relations else store.forget(ids)
    if not result.forgotten:
        raise _unknown(list(result.missing), store.namespace, "relation" if relations else "memory")
    return tool_result(ForgetOutput(forgotten=list(result.forgotten), missing=list(result.missing)))


def memory_relate(
    ctx: Context[Any, Any],
    subject: Annotated[
        str, Field(max_length=256, description="An entity: a person, service, file...")
    ],
    predicate: Annotated[
        str, Field(max_length=64, description="How they relate, e.g. owns, depends_on, works_on.")
    ],
    object: Annotated[str, Field(max_length=256, description="The other entity.")],
    confidence: Confidence = config.DEFAULT_CONFIDENCE,
    source_memory: Annotated[
        str | None, Field(max_length=200, description="Id of the memory this was read from.")
    ] = None,
) -> Annotated[CallToolResult, RelateOutput]:
    """Record that subject -[predicate]-> object, e.g. billing-service -[depends_on]-> postgres.

    Relating a known pair again keeps one relation (names ignore case) with the
    higher confidence. memory_search returns the relations that match a query.
    """
    found = _store(ctx).relate(
        subject, predicate, object, confidence=confidence, source_memory=source_memory
    )
    return tool_result(RelateOutput(relation=results.relation(found)))


def memory_stats(ctx: Context[Any, Any]) -> Annotated[CallToolResult, StatsOutput]:
    """How many memories this namespace holds, of which kinds and dates, and the embedding model.

    Without an embedder, search matches words only; pending_vectors above 0 means
    some memories are found by words only until `mnemex embed` runs.
    """
    return tool_result(results.stats_output(_store(ctx).stats()))


ALIASES = {"memory_status": "memory_stats"}  # old tool names, still answered but not listed
TOOLS: tuple[tuple[Callable[..., CallToolResult], ToolAnnotations], ...] = (
    (memory_search, _READ),
    (memory_timeline, _READ),
    (memory_get, _READ),
    (memory_recall, _READ),
    (memory_add, _ADD),
    (memory_update, _UPDATE),
    (memory_forget, _FORGET),
    (memory_relate, _RELATE),
    (memory_stats, _READ),
)


def _unknown(ids: list[str], namespace: str, what: str = "memory") -> ToolError:
    """The one wording of unknown ids (:func:`mnemex.errors.unknown_ids`), with the tools
    that show ids as the next step. An id of another namespace is unknown here."""
    where = "memory_search" if what == "relation" else "memory_search or memory_timeline"
    return ToolError(f"{unknown_ids(ids, namespace, what)}; find ids with {where}")


def _explain(error: MnemexError) -> str:
    """An error's message for an agent: the tools, not the CLI, are its next step."""
    if isinstance(error, UnknownMemory):
        return str(_unknown(error.ids, error.namespace, error.what))
    return str(error)


def _invalid(error: ValidationError) -> str:
    problems = []
    for item in error.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"])
        problems.append(f"{where}: {item['msg']}" if where else item["msg"])
    return "invalid arguments: " + "; ".join(problems)


def tool(fn: Callable[..., CallToolResult], hints: ToolAnnotations) -> Tool:
    """``fn`` as an SDK tool, its description and schemas cut to what an agent or client reads.

    The description is the docstring with each paragraph on one line. Schemas
    lose pydantic's titles; an optional argument is published as its type alone
    (an agent leaves it out rather than sending null); the output schema keeps
    types and required fields only, with no descriptions or ``$defs``.
    """
    made = Tool.from_function(
        fn,
        description=description(fn.__doc__ or ""),
        annotations=hints,
        structured_output=True,
    )
    made.parameters = compact_schema(made.parameters)
    output = made.fn_metadata.output_schema
    made.fn_metadata.output_schema = compact_schema(output, descriptions=False)
    return made


def description(doc: str) -> str:
    """A docstring as paragraphs of one line each, so no line break lands mid-sentence."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs if p.strip())


def compact_schema(schema: Any, *, descriptions: bool = True) -> Any:
    """``schema`` without titles, null alternatives, null defaults or ``$ref``s.

    The keys of ``properties`` are names and are kept; ``$ref``s are replaced
    by the definitions they point at (the models have no recursion).
    """
    if schema is None:
        return None
    defs = schema.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return walk(
                {
                    **defs[ref.removeprefix("#/$defs/")],
                    **{k: v for k, v in node.items() if k != "$ref"},
                }
            )
        options = node.get("anyOf")
        if isinstance(options, list) and {"type": "null"} in options:
            kept = [o for o in options if o != {"type": "null"}]
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            if rest.get("default", 0) is None:
                del rest["default"]
            node = {**kept[0], **rest} if len(kept) == 1 else {**rest, "anyOf": kept}
        out = {}
        for key, value in node.items():
            if key in ("title", "$defs") or (key == "description" and not descriptions):
                continue
            if key == "properties" and isinstance(value, dict):
                out[key] = {name: walk(sub) for name, sub in value.items()}
            else:
                out[key] = walk(value)
        return out

    return walk(schema)


class Server(MCPServer[Store]):
    """The SDK's server, with tool errors phrased for the agent that has to act on them.

    Arguments a tool does not take are refused (an agent cannot slip in a
    ``namespace``); pydantic's validation errors become one line per field;
    a :class:`~mnemex.errors.MnemexError` becomes an error result with its
    message instead of the SDK's message-less crash report.
    """

    def __init__(self, *, tools: list[Tool], **kwargs: Any) -> None:
        super().__init__(tools=tools, **kwargs)
        self._parameters = {t.name: frozenset(t.parameters.get("properties", {})) for t in tools}

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Store, Any] | None = None
    ) -> Any:
        name = ALIASES.get(name, name)
        known = self._parameters.get(name)
        unknown = sorted(set(arguments) - known) if known is not None else []
        if unknown:
            raise ToolError(
                f"Error executing tool {name}: unknown argument(s) {', '.join(unknown)}; "
                f"{name} takes {', '.join(sorted(known or ())) or 'no arguments'}"
            )
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:  # UnexpectedToolError too: a subclass
            cause = exc.__cause__
            if isinstance(exc, UnexpectedToolError) and isinstance(cause, MnemexError):
                message = _explain(cause)
            elif not isinstance(exc, UnexpectedToolError) and isinstance(cause, ValidationError):
                message = _invalid(cause)
            else:
                raise
            raise ToolError(f"Error executing tool {name}: {message}") from cause


class StaticToken:
    """Accepts one bearer token, compared in constant time (the SDK's ``TokenVerifier``)."""

    def __init__(self, token: str) -> None:
        self._digest = hashlib.sha256(token.encode()).digest()

    async def verify_token(self, token: str) -> AccessToken | None:
        given = hashlib.sha256(token.encode()).digest()
        if hmac.compare_digest(given, self._digest):
            return AccessToken(token="", client_id="mnemex-mcp", scopes=[])
        return None


def build_server(
    settings: Settings,
    *,
    embedder: object = FROM_SETTINGS,
    token: str | None = None,
    url: str = "http://127.0.0.1",
) -> Server:
    """The MCP server over the store and namespace of ``settings``.

    Its lifespan opens the store (with ``embedder``, as :class:`Store` takes it)
    and closes it when the server stops. With ``token``, HTTP requests must carry
    ``Authorization: Bearer <token>`` (``url`` is the address it is served at).
    """

    @asynccontextmanager
    async def lifespan(_: MCPServer[Store]) -> AsyncIterator[Store]:
        store = Store(settings, embedder=embedder)
        try:
            yield store
        finally:
            store.close()

    auth: dict[str, Any] = {}
    if token is not None:
        auth = {
            "token_verifier": StaticToken(token),
            "auth": AuthSettings(issuer_url=url, resource_server_url=None),  # type: ignore[arg-type]
        }
    return Server(
        name="mnemex",
        version=__version__,
        instructions=INSTRUCTIONS,
        tools=[tool(fn, hints) for fn, hints in TOOLS],
        lifespan=lifespan,
        log_level="WARNING",
        **auth,
    )
