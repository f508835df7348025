"""The ``mnemex`` command: each subcommand parses, calls one API function, formats.

Readable output for people, ``--json`` for scripts. Errors print one line,
``error: ...`` with what to do next, and exit non-zero (1 for errors, 2 for
usage mistakes). Heavy modules are imported inside commands so that
``mnemex --help`` starts fast.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from mnemex import __version__, config
from mnemex.progress import progress_bar

if TYPE_CHECKING:
    from mnemex.config import Settings
    from mnemex.store import Store

F = TypeVar("F", bound=Callable[..., Any])

# Whether the command embeds a text or two (search, add, recall: ``Context.store`` with
# ``few_queries``): once it is done and its store closed, the process exits at once, as a
# hook does (mnemex.entry), without the interpreter's teardown (the model's threads, the
# modules: about 50 ms of CPU, a sixth of a search from a shell).
one_shot = False


class Context:
    def __init__(self, db: str | None, namespace: str | None, home: str | None) -> None:
        # ``namespace``: the one given (-n, else $MNEMEX_NAMESPACE); :meth:`where` says which
        # the command uses when none is (the config's, the project's or ``default``).
        self.db, self.namespace = config.given_store(db, namespace)
        self.option = namespace
        self.home = home
        self._where: config.Where | None = None
        self._store: Store | None = None
        self._created: list[Path] = []  # the store file and the folders this command made

    def where(self) -> config.Where:
        """The namespace this command uses and why (:func:`mnemex.config.where`)."""
        if self._where is None:
            self._where = config.where(self.option, Path.cwd(), home=self.home)
        return self._where

    def settings(self) -> Settings:
        from mnemex.config import load_settings

        return load_settings(self.db, namespace=self.where().namespace, home=self.home)

    def store(self, *, create: bool = False, few_queries: bool = False) -> Store:
        """The store, opened once. Only commands that write pass ``create``: a read
        on a path with no store fails instead of creating one (a mistyped --db).
        ``few_queries``: the command embeds a text or two (a search, one memory), so the
        local model loads fast rather than runs fast, as in a hook."""
        global one_shot
        if few_queries and not one_shot:
            from mnemex.hooks.run import quiet_blas

            one_shot = True
            quiet_blas(threads="1")  # before numpy loads: its products are small, as a hook's
        if self._store is None:
            settings = self.settings()
            path = Path(settings.db_path)
            if settings.db_url is None and str(path) != ":memory:" and not path.exists():
                if not create:
                    _no_store(path, given=self.db is not None)
                missing = [p for p in path.absolute().parents if not p.exists()]
                self._created = [path.absolute(), *missing]
            self._store = _open_store(settings, few_queries)
        return self._store

    def close(self, *, keep: bool = False) -> None:
        """Close the store. One this command created is announced on stderr, or, when
        the command wrote nothing into it (it failed, or had nothing to write) and
        ``keep`` is not set, deleted with the folders made for it."""
        store, self._store = self._store, None
        if store is None:
            return
        created, self._created = self._created, []
        empty = bool(created) and not keep and _holds_nothing(store)
        store.close()
        if not created:
            return
        if not empty:
            click.echo(f"created store at {created[0]}", err=True)
            return
        path = created[0]
        for leftover in (
            path,
            *(path.with_name(path.name + s) for s in ("-wal", "-shm", "-writers")),
        ):
            leftover.unlink(missing_ok=True)
        for folder in created[1:]:
            try:
                folder.rmdir()
            except OSError:
                break


def _holds_nothing(store: Store) -> bool:
    """No memory, relation or workspace (what a command that failed leaves behind), and
    no other connection: leaving WAL mode needs the only one, so a process that opened
    the new store meanwhile keeps it."""
    try:
        return store.release_if_empty()
    except Exception:  # a store that cannot be read is kept, to be looked at
        return False


# The longest memory `mnemex add` embeds with the model loaded for a text or two (a few
# windows); a longer one loads it optimized: a thousand windows run faster and in less memory.
FEW_QUERIES_CHARS = 8_000


def _unhoarded_memory() -> None:
    """Have the C allocator give back every block of a megabyte or more when it is freed
    (glibc only; elsewhere nothing changes). By default it keeps such blocks once the
    model's loading has freed larger ones, and a long memory's `add` makes and frees many
    (its index entries, its windows): a 5 MB memory peaked 14 MB higher."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, 1 << 20)


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter: the size from which blocks are mapped


def _open_store(settings: Settings, few_queries: bool) -> Store:
    """A store with the embedder its settings give; with ``few_queries``, the local model
    loaded fast (:func:`mnemex.embed.resolve`) when the store would use it anyway."""
    from mnemex.store import Store

    if not few_queries or settings.embedder not in ("auto", "local"):
        return Store(settings)
    from mnemex.embed import Unavailable, resolve
    from mnemex.errors import MnemexError

    try:
        chosen = resolve(settings, few_queries=True, fold=False)
    except MnemexError:
        chosen = None
    if chosen is None:  # no local model: the store's own embedder, or why there is none
        return Store(settings)
    store = Store(settings, embedder=chosen)
    if isinstance(store.embedder, Unavailable):
        store.close()  # indexed with another model: the store's own, as without the option
        return Store(settings)
    global _unfolded
    _unfolded = (chosen, settings.home)
    return store


# The local model this command loaded without a folded copy, and the data folder to fold
# it into as the command exits (:func:`finish`).
_unfolded: tuple[Any, Path] | None = None


def finish() -> None:
    """What a command leaves to run after it, once its answer is out: the local model
    folded in the background when this command had to run it unfolded
    (:mod:`mnemex.embed.fold`)."""
    if _unfolded is None:
        return
    from mnemex.embed import FOLDED_FOLDER, fold
    from mnemex.embed.local import LocalEmbedder

    embedder, home = _unfolded
    with contextlib.suppress(OSError):  # best effort: the next command tries again
        if isinstance(embedder, LocalEmbedder) and fold.needed(embedder, home / FOLDED_FOLDER):
            fold.later(home)


def _no_store(path: Path, *, given: bool) -> None:
    from mnemex.errors import StoreError

    if given:
        raise StoreError(
            f"no store at {path}: check the path given with --db (or MNEMEX_DB); "
            "a command that writes (`mnemex add`, `mnemex sync DIR`) creates it"
        )
    raise StoreError(
        f"no store yet at {path}: add a memory (`mnemex add`) or index a workspace "
        "(`mnemex sync DIR`) first"
    )


def fail(message: str, code: int = 1) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def handle_errors(func: F) -> F:
    """Turn mnemex errors into one line on stderr and exit status 1."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from mnemex.errors import MnemexError

        try:
            return func(*args, **kwargs)
        except MnemexError as exc:
            fail(str(exc))
        except OSError as exc:
            fail(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))
        except KeyboardInterrupt:
            fail("interrupted", 130)

    return wrapper  # type: ignore[return-value]


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=2))


def emit(as_json: bool, data: Any, text: str) -> None:
    """``data`` (a value of :mod:`mnemex.models`, or JSON) as JSON for scripts, else ``text``."""
    if as_json:
        emit_json(data.to_dict() if hasattr(data, "to_dict") else data)
    else:
        click.echo(text)


def console(stderr: bool = False) -> Any:
    """Rich output for a terminal; for a pipe or a file, plain lines: no wrapping, no
    padding to a width."""
    from rich.console import Console

    out = Console(stderr=stderr, highlight=False, soft_wrap=False)
    out.soft_wrap = not out.is_terminal
    return out


def indented(out: Any, text: Any, indent: int, style: str | None = None) -> None:
    """``text`` indented: wrapped under its indent on a terminal, one plain line elsewhere."""
    from rich.padding import Padding
    from rich.text import Text

    if out.is_terminal:
        out.print(Padding(text, (0, 0, 0, indent)), style=style)
        return
    line = Text(" " * indent)
    line.append(Text(text) if isinstance(text, str) else text)
    out.print(line, style=style)


def highlighted(text: str, start: str, end: str) -> Any:
    """A snippet with FTS5 highlight markers rendered in bold."""
    from rich.text import Text

    out = Text()
    for part, bold in marked(text, start, end):
        out.append(part, style="bold yellow" if bold else None)
    return out


def marked(text: str, start: str, end: str) -> list[tuple[str, bool]]:
    """A snippet's parts between FTS5 highlight markers, each with whether it is a match."""
    out: list[tuple[str, bool]] = []
    bold = False
    rest = text
    while rest:
        marker = end if bold else start
        cut = rest.find(marker)
        if cut < 0 or not marker:
            out.append((rest, bold))
            break
        out.append((rest[:cut], bold))
        rest = rest[cut + len(marker) :]
        bold = not bold
    return out


def plain_output() -> bool:
    """Whether standard output takes plain lines (a pipe or a file, and no setting that
    asks rich for colours there): then a search prints them without rich, whose import
    would cost a search such as an agent runs about a tenth of its time."""
    forced = ("FORCE_COLOR", "TTY_INTERACTIVE", "TTY_COMPATIBLE")
    return not sys.stdout.isatty() and not any(os.environ.get(k) for k in forced)


def _exit_if_missing(store: Store, missing: Sequence[str], what: str = "memory") -> None:
    """Exit 1 naming the ``missing`` ids (the one wording of :class:`UnknownMemory`), and
    the namespace that holds a memory id of them, if another one does."""
    if not missing:
        return
    from mnemex.errors import UnknownMemory

    message = str(UnknownMemory(list(missing), store.namespace, what))
    held = store.namespaces_of(missing) if what == "memory" else {}
    for ns in sorted(set(held.values()))[:3]:
        ids = ", ".join(repr(i) for i, where in held.items() if where == ns)
        message += f"; {ids} is in namespace {ns!r} (-n {ns!r})"
    fail(message)


def _split(values: Sequence[str]) -> list[str]:
    out: list[str] = []
    for value in values:
        out.extend(v.strip() for v in value.split(",") if v.strip())
    return out


def _read_text(value: str) -> str:
    if value == "-":
        data: bytes = sys.stdin.buffer.read()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            from mnemex.errors import InvalidInput

            raise InvalidInput(f"standard input is not valid UTF-8 (byte {exc.start})") from None
    return value


def _what_exists(
    obj: Context, store: Store, kinds: Sequence[str] = (), all_namespaces: bool = False
) -> bool:
    """After a read found nothing: a note saying where the memories are when the namespace
    is empty (whether the project, the config or the default chose it), or which kinds
    exist when a kind asked for has none (a typo, most often). Whether it was empty."""
    from mnemex.engine import ALL

    everything, own = store.stats(namespace=ALL), store.stats()
    per_ns = everything.namespaces
    if not all_namespaces and store.namespace not in per_ns and not own.relations:
        why = obj.where().reason if obj.where().namespace == store.namespace else ""
        click.echo(f"note: {_elsewhere(store.namespace, why, per_ns)}", err=True)
        return True
    if not kinds:
        return False
    known = (everything if all_namespaces else own).kinds
    unknown = [k for k in kinds if " ".join(k.split()).lower() not in known]
    if unknown:
        place = "the store" if all_namespaces else f"the namespace {store.namespace!r}"
        click.echo(
            f"note: no memories of kind {', '.join(map(repr, unknown))} in {place}; "
            f"its kinds are {_counts(known)}",
            err=True,
        )
    return False


def _elsewhere(namespace: str, why: str, per_ns: dict[str, int]) -> str:
    """``this namespace ('x': why) is empty; 2 memories in namespace 'y', ...``."""
    this = f"this namespace ({namespace!r}{': ' + why if why else ''}) is empty"
    if not per_ns:
        return f"{this}, and so is the store"
    ranked = sorted(per_ns.items(), key=lambda item: (-item[1], item[0]))
    shown = [f"{n:,} memories in namespace {ns!r}" for ns, n in ranked[:3]]
    more = f" and {len(ranked) - 3} more namespaces" if len(ranked) > 3 else ""
    return f"{this}; {', '.join(shown)}{more} (choose with -n NAME, or --all-namespaces)"


def _counts(counts: dict[str, int]) -> str:
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{name} ({n:,})" for name, n in ranked)


def _scope(all_namespaces: bool = True) -> Any:
    """The namespace a read names: every one (``ALL``) or, ``None``, the store's own."""
    from mnemex.store import ALL

    return ALL if all_namespaces else None


def _when(dt: datetime) -> str:
    return f"{dt.year:04d}-{dt:%m-%d %H:%M}"


_HITS = click.IntRange(1, config.MAX_SEARCH_LIMIT)
_HITS_OR_NONE = click.IntRange(0, config.MAX_SEARCH_LIMIT)
mode_option = click.option(
    "--mode",
    type=click.Choice(config.MODES[1:]),
    help=f"Search arms to run; {config.default_text('search_mode')}: hybrid with an "
    "embedder, else lexical.",
)
_stage_options: dict[Any, click.Option] = {}  # by stage (mnemex.search.stages.Stage)


class StagedCommand(click.Command):
    """A command with the option of each ranking stage that has one
    (:data:`mnemex.search.stages.STAGES`: its flag, help and setting come from its entry),
    placed before the option named ``stages_before``; a stage registered after this module
    was imported gets its option too."""

    def __init__(self, *args: Any, stages_before: str, **kwargs: Any) -> None:
        self.stages_before = stages_before
        self._staged: list[click.Option] = []
        super().__init__(*args, **kwargs)

    @property
    def params(self) -> list[click.Parameter]:
        """The command's parameters with the stages' options as registered now (the same
        list, updated in place: click adds its help option to it and takes it back)."""
        from mnemex.search.stages import STAGES

        staged = [_stage_option(s.option, s) for s in STAGES.values() if s.option and s.cli]
        if staged != self._staged:
            own = [p for p in self._params if p not in self._staged]
            at = next(i for i, p in enumerate(own) if p.name == self.stages_before)
            self._params[:] = [*own[:at], *staged, *own[at:]]
            self._staged = staged
        return self._params

    @params.setter
    def params(self, value: list[click.Parameter]) -> None:
        self._params = value


def _stage_option(name: str, stage: Any) -> click.Option:
    """A ranking stage's option: ``--NAME/--no-NAME`` for a stage switched by a bool,
    ``--NAME WEIGHT`` for one weighed by a number (made once per stage)."""
    if stage not in _stage_options:
        flag = name.replace("_", "-")
        described = f"{stage.help}; {config.default_text(stage.setting, *stage.params)}."
        if isinstance(config.setting_default(stage.setting), bool):
            made = click.Option([f"--{flag}/--no-{flag}", name], default=None, help=described)
        else:
            made = click.Option([f"--{flag}", name], type=float, metavar="WEIGHT", help=described)
        _stage_options[stage] = made
    return _stage_options[stage]


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
kind_option = click.option(
    "--kind", "kinds", multiple=True, help="Only this kind (repeat or comma-separate)."
)
tag_option = click.option(
    "--tag", "tags", multiple=True, help="Only memories with this tag (repeat: all of them)."
)
all_ns_option = click.option("--all-namespaces", is_flag=True, help="Read across every namespace.")


def _warnings_on_stderr() -> None:
    """Warnings the library logs become ``warning: ...`` lines on stderr (unless a
    command such as ``watch`` logs in its own format)."""
    import logging

    class WarningLine(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if any(h is not self for h in logging.getLogger("mnemex").handlers):
                return
            click.echo(f"warning: {record.getMessage()}", err=True)

    class ProgressLine(logging.Handler):  # how far a long piece of work is
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno < logging.WARNING:
                click.echo(record.getMessage(), err=True)

    root = logging.getLogger("mnemex")
    if not any(type(h).__name__ == "WarningLine" for h in root.handlers):
        root.addHandler(WarningLine(logging.WARNING))
        progress = logging.getLogger("mnemex.progress")
        progress.setLevel(logging.INFO)
        progress.addHandler(ProgressLine(logging.INFO))


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--db",
    type=click.Path(dir_okay=False),
    help="Store file (default: $MNEMEX_DB, else memories.db in $MNEMEX_HOME or the user data dir).",
)
@click.option(
    "-n",
    "--namespace",
    help=f"Namespace to read and write; {config.default_text('namespace')}.",
)
@click.option("--home", type=click.Path(file_okay=False), hidden=True)
@click.version_option(__version__, prog_name="mnemex")
@click.pass_context
def cli(ctx: click.Context, db: str | None, namespace: str | None, home: str | None) -> None:
    """Hybrid memory search for AI agents: BM25 and vectors, local-first.

    Memories live in one SQLite file. Search ranks them by BM25 (an FTS5 index)
    and, with an embedding model (the local one of mnemex[embed], or an
    OpenAI-compatible endpoint), by vector similarity, and fuses the two.
    Markdown workspaces (`mnemex sync`) are searched as chunks. Every command
    reads and writes one namespace.
    """
    if namespace is not None and not namespace.strip():
        raise click.BadParameter(
            f"{namespace!r} is empty: name a namespace, or leave the option out to use the "
            "current one (`mnemex where` says which)",
            param_hint="'-n' / '--namespace'",
        )
    state = Context(db, namespace, home)
    ctx.obj = state
    ctx.call_on_close(state.close)
    _warnings_on_stderr()


@cli.command()
@click.argument("content")
@click.option("--kind", help=f"Kind of memory (default: {config.DEFAULT_KIND}).")
@click.option("--tag", "tags", multiple=True, help="A tag (repeat or comma-separate).")
@click.option("--source", help="Where the memory came from.")
@click.option(
    "--confidence", type=float, help=f"How sure (0-1, default {config.DEFAULT_CONFIDENCE})."
)
@click.option("--pinned", is_flag=True, help="Never decays.")
@click.option("--created-at", help="When it happened (ISO 8601, epoch seconds, or 3d).")
@click.option("--meta", "meta", multiple=True, help="Metadata KEY=VALUE (repeatable).")
@click.option("--id", "id", help="Use this id instead of a new one.")
@click.option(
    "--no-dedup",
    is_flag=True,
    help="Insert even if it repeats an existing memory (default: merge into that one).",
)
@click.option(
    "--to-workspace",
    "workspace",
    type=click.Path(exists=True, file_okay=False),
    help="Append it to DIR/memory/YYYY-MM-DD.md (today's daily file) and index that file.",
)
@json_option
@click.pass_obj
@handle_errors
def add(
    obj: Context,
    /,
    content: str,
    kind: str | None,
    tags: tuple[str, ...],
    confidence: float | None,
    meta: tuple[str, ...],
    no_dedup: bool,
    workspace: str | None,
    as_json: bool,
    **given: Any,  # source, pinned, created_at, id
) -> None:
    """Store a memory (CONTENT, or - to read it from standard input).

    A memory that repeats one already stored (same text, or near enough) is
    merged into it: the existing id is printed, and "deduplicated" on stderr.
    With --to-workspace the memory is written to the workspace's daily file
    instead, and the id printed is that of the chunk holding it.
    """
    if workspace is not None:
        given.update(confidence=confidence, meta=meta, no_dedup=no_dedup)
        _add_to_workspace(obj, workspace, content, kind, tags, as_json, given)
        return
    metadata: dict[str, str] = {}
    for pair in meta:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"--meta expects KEY=VALUE, got {pair!r}", 2)
        metadata[key] = value
    text = _read_text(content)
    if len(text) > FEW_QUERIES_CHARS:
        _unhoarded_memory()
    # A memory of a few windows is embedded by the model loaded fast, as a search's query.
    added = obj.store(create=True, few_queries=len(text) <= FEW_QUERIES_CHARS).remember(
        text,
        kind=kind or config.DEFAULT_KIND,
        tags=_split(tags),
        confidence=config.DEFAULT_CONFIDENCE if confidence is None else confidence,
        metadata=metadata or None,
        dedup=False if no_dedup else None,
        **given,
    )
    warning = obj.store().last_embedding_error
    if as_json:
        emit_json(
            {**added.to_dict(), "namespace": obj.store().namespace, "embedding_error": warning}
        )
    else:
        click.echo(added.id)
        if added.deduplicated:
            click.echo(
                f"deduplicated: merged into {added.id} ({added.by}, similarity "
                f"{added.similarity:.2f})",
                err=True,
            )


def _weights(value: str | None) -> tuple[float, float] | None:
    if value is None:
        return None
    try:
        vector, text = (float(v) for v in value.split(","))
    except ValueError:
        fail(f"--weights expects VECTOR,TEXT such as 0.7,0.3, got {value!r}", 2)
    return vector, text


@cli.command(cls=StagedCommand, stages_before="no_threshold")
@click.argument("query")
@click.option(
    "-l",
    "--limit",
    type=_HITS,
    help=f"How many hits; {config.default_text('search_limit')}.",
)
@kind_option
@tag_option
@click.option("--since", help="Created at or after (ISO 8601, epoch, or an age like 7d).")
@click.option("--until", help="Created before.")
@mode_option
@click.option(
    "--fusion",
    type=click.Choice(config.FUSIONS),
    help=f"How hybrid fuses; {config.default_text('fusion')}.",
)
@click.option(
    "--weights",
    metavar="VECTOR,TEXT",
    help="Weights of weighted fusion, the starting point of adaptive"
    f"; {config.default_text('vector_weight', 'text_weight')}.",
)
@click.option("--explain", is_flag=True, help="Show each hit's rank and score in each arm.")
@click.option(
    "--raw",
    is_flag=True,
    help='QUERY is an FTS5 expression (AND, NEAR, "phrases"), matched lexically in any mode.',
)
@click.option("--no-threshold", is_flag=True, help="Keep hits below the minimum scores as well.")
@click.option(
    "--relations",
    type=_HITS_OR_NONE,
    help=f"Most relations beside the memories (0: none); {config.default_text('search_relations')}.",
)
@all_ns_option
@json_option
@click.pass_obj
@handle_errors
def search(
    obj: Context,
    /,
    query: str,
    kinds: tuple[str, ...],
    tags: tuple[str, ...],
    weights: str | None,
    no_threshold: bool,
    all_namespaces: bool,
    as_json: bool,
    **given: Any,  # limit, since, until, mode, fusion, explain, raw, relations, stages' options
) -> None:
    """Find the memories that best match QUERY (plain text; any characters are fine).

    Relations (`mnemex relate`) that match QUERY are listed after the memories.
    """
    text = _read_text(query)
    if not text.strip():
        fail(
            "the query is empty: give a few words to look for, or use `mnemex timeline` to "
            "browse memories by time"
        )
    store = obj.store(few_queries=True)
    result = store.search(
        text,
        kinds=_split(kinds),
        tags=_split(tags),
        weights=_weights(weights),
        threshold=False if no_threshold else None,
        namespace=_scope(all_namespaces),
        **given,
    )
    empty = not result.hits and _what_exists(obj, store, _split(kinds), all_namespaces)
    if as_json:
        emit_json(result.to_dict())
    else:
        _print_hits(result, store.settings, all_namespaces, notes=not empty)


def _print_hits(result: Any, settings: Settings, all_namespaces: bool, notes: bool = True) -> None:
    """A search's hits, a header line and a highlighted snippet each, then its relations
    (and the search's notes, unless ``notes`` is false: the namespace is empty)."""
    for note in result.notes if notes else ():
        click.echo(f"note: {note}", err=True)
    if plain_output():
        click.echo("\n".join(_hit_lines(result, settings, all_namespaces)))
        return
    from rich.markup import escape

    out = console()
    if not result.hits:
        out.print(_no_hits(result))
        _print_relations(result.relations, "relations")
        return
    start, end = settings.highlight_start, settings.highlight_end

    def styled(style: str, text: str) -> str:
        return f"[{style}]{escape(text)}[/{style}]"

    for rank, hit in enumerate(result.hits, start=1):
        out.print(_hit_header(rank, hit, all_namespaces, styled, escape), markup=True)
        indented(out, highlighted(" ".join(hit.snippet.split()), start, end), 5)
        if hit.explain is not None:
            indented(out, _explain_line(hit.explain), 5, style="dim")
    _print_relations(result.relations, "relations")
    out.print(styled("dim", _hits_summary(result)), markup=True)


def _hit_lines(result: Any, settings: Settings, all_namespaces: bool) -> list[str]:
    """:func:`_print_hits`'s lines, plain (for a pipe or a file)."""
    if not result.hits:
        return [_no_hits(result), *_relation_lines(result.relations, "relations")]
    start, end = settings.highlight_start, settings.highlight_end
    lines: list[str] = []
    for rank, hit in enumerate(result.hits, start=1):
        lines.append(_hit_header(rank, hit, all_namespaces, lambda _, text: text, str))
        snippet = " ".join(hit.snippet.split())
        lines.append(" " * 5 + "".join(part for part, _ in marked(snippet, start, end)))
        if hit.explain is not None:
            lines.append(" " * 5 + _explain_line(hit.explain))
    return [*lines, *_relation_lines(result.relations, "relations"), _hits_summary(result)]


def _hit_header(
    rank: int,
    hit: Any,
    all_namespaces: bool,
    styled: Callable[[str, str], str],
    escape: Callable[[str], str],
) -> str:
    """A hit's first line: rank, id, score, namespace, kind, place, time, tags (``styled``
    marks a part up, ``escape`` escapes the others)."""
    tags_text = escape(f"  [{', '.join(hit.tags)}]") if hit.tags else ""
    place = f"  {styled('green', hit.location.label)}" if hit.location else ""
    ns = f"  {styled('magenta', hit.namespace)}" if all_namespaces else ""
    return (
        f"{styled('bold', f'{rank:>2}.')} {styled('cyan', hit.id)}  score {hit.score:.3f}{ns}  "
        f"{escape(hit.kind)}{place}  {_when(hit.created_at)}{tags_text}"
    )


def _no_hits(result: Any) -> str:
    return f"no memories match (namespace {result.namespace!r}, {result.mode_used})"


def _hits_summary(result: Any) -> str:
    how = result.mode_used + (f", {result.fusion}" if result.fusion else "")
    return f"{len(result.hits)} hit(s), {how}, {result.took_ms:.1f} ms"


def _print_relations(relations: Sequence[Any], title: str) -> None:
    """One line a relation: ``subject -[predicate]-> object``, its score and confidence."""
    if not relations:
        return
    out = console()
    title_line, *lines = _relation_lines(relations, title)
    out.print(f"[bold]{title_line}[/bold]", markup=True)
    for line in lines:
        out.print(line, markup=False, soft_wrap=True)


def _relation_lines(relations: Sequence[Any], title: str) -> list[str]:
    """:func:`_print_relations`'s lines, plain: the title, then a line a relation."""
    if not relations:
        return []
    lines = [title]
    for rel in relations:
        score = "" if rel.score is None else f"score {rel.score:.3f}  "
        lines.append(
            f"  {rel.subject} -[{rel.predicate}]-> {rel.object}  "
            f"{score}confidence {rel.confidence:g}  {rel.id}"
        )
    return lines


def _explain_line(explain: dict[str, Any]) -> str:
    lexical, vector = explain["lexical"], explain["vector"]
    parts = [
        "lexical: -"
        if lexical is None
        else f"lexical: #{lexical['rank']} tanh(bm25 {lexical['bm25']:.4g} / norm "
        f"{lexical['norm']:.4g}) -> {lexical['score']:.3f}",
        "vector: -"
        if vector is None
        else f"vector: #{vector['rank']} cosine {vector['cosine']:.3f}",
    ]
    if explain["fusion"]:
        parts.append(f"{explain['fusion']} -> {explain['fused']:.4f}")
    parts.extend(_stage_text(stage) for stage in explain["stages"] if stage["stage"] != "threshold")
    parts.append(f"final {explain['final']:.4f}")
    return " | ".join(parts)


def _stage_text(stage: dict[str, Any]) -> str:
    name = stage["stage"]
    if name == "top_k":
        return f"top {stage['k']} of {stage['kept']} kept / {stage['candidates']} candidates"
    if name == "floor":
        if stage["above"] is None:
            return f"floor: text {stage['text']:.3f} (no cosine read)"
        return (
            f"floor: cosine {stage['above']:+.3f} over the store's level {stage['level']:.3f}, "
            f"{stage['beyond']:+.3f} over one memory's {stage['memory']:.3f}"
        )
    from mnemex.search.stages import explain_line

    return explain_line(stage)


@cli.command(cls=StagedCommand, stages_before="token_counter")
@click.argument("task")
@click.option(
    "-b",
    "--budget",
    "budget_tokens",
    type=click.IntRange(1, None),
    help=f"Most tokens in the block; {config.default_text('recall_budget')}.",
)
@click.option(
    "-m",
    "--max-memories",
    type=click.IntRange(1, config.MAX_RECALL_MEMORIES),
    help=f"Most memories; {config.default_text('recall_max')}.",
)
@click.option(
    "-n", "max_memories_n", type=click.IntRange(1, config.MAX_RECALL_MEMORIES), hidden=True
)
@kind_option
@tag_option
@mode_option
@click.option(
    "--tokens",
    "token_counter",
    type=click.Choice(config.TOKEN_COUNTERS),
    help="How tokens are counted: chars (4 characters a token, 1 a CJK character) or "
    f"wordpiece (needs mnemex[embed]); {config.default_text('token_counter')}.",
)
@json_option
@click.pass_obj
@handle_errors
def recall(
    obj: Context,
    /,
    task: str,
    max_memories: int | None,
    max_memories_n: int | None,
    kinds: tuple[str, ...],
    tags: tuple[str, ...],
    as_json: bool,
    **given: Any,  # budget_tokens, mode, token_counter, the ranking stages' options
) -> None:
    """Print the memories relevant to TASK as a markdown block for a prompt.

    The block starts with "## Relevant Memories" and has one line per memory,
    best first, within the token budget. - reads TASK from standard input.
    """
    text = _read_text(task)
    if not text.strip():
        fail("the task is empty: describe the task to recall memories for")
    store = obj.store(few_queries=True)
    result = store.recall(
        text,
        max_memories=max_memories_n if max_memories is None else max_memories,
        kinds=_split(kinds),
        tags=_split(tags),
        **given,
    )
    empty = not result.memories and _what_exists(obj, store, _split(kinds))
    if as_json:
        emit_json(result.to_dict())
        return
    for note in result.notes if not empty else ():
        click.echo(f"note: {note}", err=True)
    if not result.memories:
        click.echo(
            "no memory fits the budget" if result.skipped else "no relevant memories", err=True
        )
        return
    click.echo(result.markdown, nl=False)
    click.echo(
        f"{len(result.memories)} memories, {result.tokens}/{result.budget_tokens} tokens "
        f"({result.token_counter}), {result.skipped} skipped",
        err=True,
    )


@cli.command()
@click.option("--dry-run", is_flag=True, help="Only list the duplicates; change nothing.")
@json_option
@click.pass_obj
@handle_errors
def dedup(obj: Context, dry_run: bool, as_json: bool) -> None:
    """Merge memories that repeat an older one in the namespace.

    Each duplicate is folded into the older memory (confidence raised, tags
    merged, the duplicate recorded in its metadata) and then moved, unchanged,
    to the namespace NAMESPACE/duplicates. Nothing is deleted.
    """
    from mnemex.progress import progress_bar

    store = obj.store()
    total = store.count()
    with progress_bar(total, "checking", enabled=not as_json) as advance:
        report = store.dedup(dry_run=dry_run, progress=advance)
    if as_json:
        emit_json(report.to_dict())
        return
    for pair in report.pairs:
        click.echo(f"{pair.duplicate} -> {pair.keep}  {pair.by} {pair.similarity:.2f}")
    verb = "would be merged" if dry_run else f"merged (moved to {report.moved_to!r})"
    click.echo(f"{len(report.pairs)} of {report.checked} memories {verb}", err=True)


@cli.command()
@click.option("--start", help="From this time (inclusive; ISO 8601, epoch or an age like 7d).")
@click.option("--end", help="Up to this time (exclusive).")
@kind_option
@tag_option
@click.option("-l", "--limit", type=_HITS, default=20, show_default=True)
@click.option("--oldest-first", is_flag=True, help="Oldest first (default: newest first).")
@click.option(
    "--around", metavar="ID", help="The memory ID and those created just before and after."
)
@click.option("--before", type=_HITS_OR_NONE, default=5, show_default=True)
@click.option("--after", type=_HITS_OR_NONE, default=5, show_default=True)
@all_ns_option
@json_option
@click.pass_obj
@handle_errors
def timeline(
    obj: Context,
    /,
    kinds: tuple[str, ...],
    tags: tuple[str, ...],
    all_namespaces: bool,
    as_json: bool,
    **given: Any,  # start, end, limit, oldest_first, around, before, after
) -> None:
    """List memories by time: id, when, kind, tags and a one-line summary.

    With --around ID: that memory, the --before memories created just before
    it and the --after just after it (instead of the --limit newest).
    """
    store = obj.store()
    entries = store.timeline(
        kinds=_split(kinds), tags=_split(tags), namespace=_scope(all_namespaces), **given
    )
    if not entries:
        _what_exists(obj, store, _split(kinds), all_namespaces)
    if as_json:
        emit_json({"entries": [e.to_dict() for e in entries]})
        return
    from rich.markup import escape

    out = console()
    if not entries:
        out.print("no memories in that range")
    for e in entries:
        tags_text = escape(f"  [{', '.join(e.tags)}]") if e.tags else ""
        ns = f"  [magenta]{escape(e.namespace)}[/magenta]" if all_namespaces else ""
        out.print(
            f"[cyan]{escape(e.id)}[/cyan]  {_when(e.created_at)}{ns}  {escape(e.kind)}{tags_text}",
            markup=True,
        )
        indented(out, e.summary, 4)


@cli.command()
@click.argument("ids", nargs=-1, required=True)
@json_option
@click.pass_obj
@handle_errors
def get(obj: Context, ids: tuple[str, ...], as_json: bool) -> None:
    """Show memories in full, by id (unknown ids are reported; exit 1 if any)."""
    result = obj.store().get(_split(ids))
    if as_json:
        emit_json(result.to_dict())
    else:
        out = console()
        for m in result.memories:
            tags = ", ".join(m.tags) or "-"
            out.print(f"{m.id}  {m.kind}  {_when(m.created_at)}", markup=False, style="bold cyan")
            out.print(
                f"  tags: {tags}   confidence: {m.confidence:g}   pinned: {str(m.pinned).lower()}"
                + (f"   source: {m.source}" if m.source else ""),
                markup=False,
            )
            if m.location is not None:
                heading = " > ".join(m.location.heading)
                out.print(
                    f"  at: {m.location.label}" + (f"   under: {heading}" if heading else ""),
                    markup=False,
                )
            if m.metadata:
                out.print(f"  metadata: {json.dumps(m.metadata, ensure_ascii=False)}", markup=False)
            out.print(m.content, markup=False)
            out.print()
    _exit_if_missing(obj.store(), result.missing)


@cli.command()
@click.argument("ident", metavar="ID")
@click.option("--content", help="New text (- reads standard input).")
@click.option("--kind")
@click.option("--tag", "tags", multiple=True, help="Replace the tags (repeat or comma-separate).")
@click.option("--source")
@click.option("--confidence", type=float)
@click.option("--pinned/--unpinned", default=None)
@json_option
@click.pass_obj
@handle_errors
def update(
    obj: Context,
    /,
    ident: str,
    content: str | None,
    tags: tuple[str, ...],
    as_json: bool,
    **given: Any,  # kind, source, confidence, pinned
) -> None:
    """Change fields of a memory."""
    given["content"] = None if content is None else _read_text(content)
    given["tags"] = _split(tags) if tags else None
    changes = {name: value for name, value in given.items() if value is not None}
    if not changes:
        fail(
            "nothing to change: give --content, --kind, --tag, --source, --confidence or --pinned",
            2,
        )
    memory = obj.store().update(ident, **changes)
    emit(as_json, memory, memory.id)


@cli.command()
@click.argument("ids", nargs=-1, required=True)
@click.option("--relations", "relation_ids", is_flag=True, help="IDS are relation ids.")
@json_option
@click.pass_obj
@handle_errors
def forget(obj: Context, ids: tuple[str, ...], relation_ids: bool, as_json: bool) -> None:
    """Delete memories (or, with --relations, relations) by id.

    Unknown ids are reported; exit 1 if any.
    """
    store = obj.store()
    result = store.forget_relations(_split(ids)) if relation_ids else store.forget(_split(ids))
    n = len(result.forgotten)
    one, many = ("relation", "relations") if relation_ids else ("memory", "memories")
    emit(as_json, result, f"forgot {n} {one if n == 1 else many}")
    _exit_if_missing(store, result.missing, one)


@cli.command()
@click.argument("subject")
@click.argument("predicate")
@click.argument("object_", metavar="OBJECT")
@click.option("--confidence", type=float, default=config.DEFAULT_CONFIDENCE, show_default=True)
@click.option("--source-memory", help="Id of the memory this relation was read from.")
@json_option
@click.pass_obj
@handle_errors
def relate(
    obj: Context, /, subject: str, predicate: str, object_: str, as_json: bool, **given: Any
) -> None:
    """Store the relation SUBJECT -[PREDICATE]-> OBJECT (e.g. Jared works_on engram).

    Relating a known triple again keeps one relation, with the higher confidence.
    """
    rel = obj.store(create=True).relate(subject, predicate, object_, **given)
    emit(as_json, rel, rel.id)


@cli.command()
@click.argument("entity")
@click.option("-l", "--limit", type=_HITS, default=50, show_default=True)
@all_ns_option
@json_option
@click.pass_obj
@handle_errors
def neighbors(obj: Context, entity: str, limit: int, all_namespaces: bool, as_json: bool) -> None:
    """Relations with ENTITY as subject or object (whole name, any case)."""
    store = obj.store()
    found = store.neighbors(entity, limit=limit, namespace=_scope(all_namespaces))
    if not found:
        _what_exists(obj, store, (), all_namespaces)
    if as_json:
        emit_json({"relations": [rel.to_dict() for rel in found]})
    elif not found:
        console().print(f"no relations with {entity!r}", markup=False)
    else:
        _print_relations(found, f"{len(found)} relation(s) with {entity}")


@cli.command()
@json_option
@click.pass_obj
@handle_errors
def where(obj: Context, as_json: bool) -> None:
    """Say which store and namespace a command run here uses, and why.

    The namespace is the first of: -n/--namespace, $MNEMEX_NAMESPACE, namespace in
    the config file, the project (the root of the git repository the current folder
    is in, as a path), default. The agent hooks follow the same rule for the
    session's folder. Creates nothing.
    """
    chosen, settings = obj.where(), obj.settings()
    place = settings.db_url or str(settings.db_path)
    exists = settings.db_url is not None or Path(settings.db_path).exists()
    counts: dict[str, int] = {}
    if exists:
        from mnemex.engine import ALL

        counts = obj.store().stats(namespace=ALL).namespaces
    store_text = obj.store().path if exists else place
    data = {
        "store": str(store_text),
        "store_exists": exists,
        "namespace": chosen.namespace,
        "source": chosen.source,
        "reason": chosen.reason,
        "memories": counts.get(chosen.namespace, 0),
        "namespaces": counts,
    }
    others = {ns: n for ns, n in counts.items() if ns != chosen.namespace}
    lines = [
        f"store       {store_text}" + ("" if exists else " (none yet: the first write creates it)"),
        f"namespace   {chosen.namespace} ({chosen.reason})",
        f"memories    {data['memories']:,} here"
        + (f"; {_counts(others)} in other namespaces" if others else ""),
    ]
    emit(as_json, data, "\n".join(lines))


@cli.command()
@all_ns_option
@json_option
@click.pass_obj
@handle_errors
def stats(obj: Context, all_namespaces: bool, as_json: bool) -> None:
    """What is in the store."""
    store = obj.store()
    s = store.stats(namespace=_scope(all_namespaces))
    if not s.memories:
        _what_exists(obj, store, (), all_namespaces)
    if as_json:
        emit_json(s.to_dict())
        return
    why = f" ({obj.where().reason})" if obj.where().namespace == s.namespace else ""
    lines = [
        f"store       {s.path}",
        f"namespace   {s.namespace}: {s.memories:,} memories{why}",
        f"all         {s.total_memories:,} memories in {len(s.namespaces)} namespace(s)",
    ]
    if s.kinds:
        lines.append("kinds       " + ", ".join(f"{k} {v:,}" for k, v in s.kinds.items()))
    if s.oldest and s.newest:
        lines.append(f"span        {_when(s.oldest)} .. {_when(s.newest)}")
    if s.embedder:
        lines.append(f"vectors     {s.vectors:,} for {s.embedder}, {s.pending_vectors:,} pending")
        if s.pending_vectors:
            lines.append("            run `mnemex embed` to embed the pending memories")
    else:
        lines.append(
            "vectors     none (lexical only; pip install 'mnemex[embed]' for the local model)"
        )
    if s.other_models:
        others = ", ".join(f"{n:,} vectors of {m}" for m, n in s.other_models.items())
        lines.append(f"other       {others} (unused; `mnemex reindex --prune` deletes them)")
    lines.append(f"relations   {s.relations:,}")
    lines.append(f"size        {s.size_bytes / 1e6:.1f} MB, schema v{s.schema_version}")
    out = console()
    for line in lines:
        out.print(line, markup=False)


@cli.command(name="import")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@click.option("--strict", is_flag=True, help="Import nothing if any line is bad.")
@click.option("--keep-namespaces", is_flag=True, help="Use each line's own namespace field.")
@click.option(
    "--on-conflict",
    type=click.Choice(["skip", "error"]),
    default="skip",
    show_default=True,
    help="What to do with a line whose id already exists.",
)
@click.option(
    "--new-ids",
    is_flag=True,
    help="Give every memory and relation a new id (to import a file exported from "
    "another namespace of this store: ids are the store's).",
)
@json_option
@click.pass_obj
@handle_errors
def import_(
    obj: Context,
    /,
    file: str,
    directory: str | None,
    on_conflict: str,
    as_json: bool,
    **given: Any,  # strict, keep_namespaces, new_ids
) -> None:
    """Import memories from a JSONL file (- for standard input).

    Bad lines are reported with their line numbers and skipped; the rest are
    imported (with --strict, nothing is imported unless every line is good).

    `mnemex import claude-code [DIR]` and `mnemex import codex [DIR]` import
    the sessions the agent kept on disk instead (see `mnemex hooks`).
    """
    from mnemex.hooks.transcript import AGENTS

    if file in AGENTS:
        from mnemex.hooks.commands import import_sessions

        import_sessions(obj, file, directory, as_json)
        return
    if directory is not None:
        raise click.UsageError(f"one FILE to import; DIRECTORY goes with {' or '.join(AGENTS)}")
    from mnemex.transfer import describe_errors, import_jsonl

    store = obj.store(create=True)
    stream = sys.stdin.buffer if file == "-" else open(file, "rb")  # noqa: SIM115
    try:
        total = None
        if file != "-":
            total = sum(1 for _ in stream)
            stream.seek(0)
        with progress_bar(total, "importing", enabled=not as_json) as advance:
            skip = on_conflict == "skip"
            report = import_jsonl(store, stream, skip_existing=skip, progress=advance, **given)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    if as_json:
        emit_json(report.to_dict())
    else:
        click.echo(
            f"imported {report.imported:,}, skipped {report.skipped:,} existing, "
            f"{report.relations:,} relation(s), {len(report.errors):,} bad line(s)"
        )
        for ns, n in report.skipped_in.items():
            click.echo(
                f"  {n:,} skipped: their ids are memories of namespace {ns!r} (ids are the "
                "store's); --new-ids imports them as new memories",
                err=True,
            )
        for message in describe_errors(report.errors):
            click.echo(f"  {message}", err=True)
    if report.errors:
        sys.exit(1)


@cli.command()
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True), default="-")
@all_ns_option
@click.pass_obj
@handle_errors
def export(obj: Context, file: str, all_namespaces: bool) -> None:
    """Write memories and relations as JSONL to FILE (default: standard output)."""
    from mnemex.transfer import export_jsonl

    namespace = _scope(all_namespaces)
    if not file.strip():
        fail("FILE is empty: name the file to write, or - for standard output")
    store = obj.store()
    if file == "-":
        count = export_jsonl(store, sys.stdout, namespace=namespace)
    else:
        tmp = Path(file).with_name(Path(file).name + ".partial")
        with open(tmp, "w", encoding="utf-8") as out:
            count = export_jsonl(store, out, namespace=namespace)
        os.replace(tmp, file)
        click.echo(f"exported {count:,} memories and relations to {file}", err=True)


@cli.command()
@json_option
@click.pass_obj
@handle_errors
def embed(obj: Context, as_json: bool) -> None:
    """Embed every memory that has no vector for the configured model yet."""
    store = obj.store()
    total = store.stats(namespace=_scope()).pending_vectors
    with progress_bar(total, "embedding", enabled=not as_json) as advance:
        report = store.embed(progress=advance)
    _print_embed(report, as_json)


@cli.command()
@click.option("--force", is_flag=True, help="Re-embed everything, not only what is missing.")
@click.option("--prune", is_flag=True, help="Delete the vectors of other models.")
@json_option
@click.pass_obj
@handle_errors
def reindex(obj: Context, force: bool, prune: bool, as_json: bool) -> None:
    """Rebuild the full-text index if it differs, embed what the model lacks, re-window.

    Memories whose stored windows are not their text's now (one vector for a
    long text, or sentence windows after `embed_sentences` changed) get their
    windows; the progress shows embedding, then re-windowing. Run it after
    changing the embedding model: vectors of different models
    are never mixed, so memories without a vector for the new model are found
    by the lexical arm only until they are embedded.
    """
    store = obj.store()
    store.stats(namespace=_scope())  # a damaged file fails here: one error line, no warning
    with _PhaseBars(not as_json) as bars:
        report = store.reindex(progress=bars, force=force, prune=prune)
    if report is None:
        text = "full-text index rebuilt; no embedder configured, so no vectors"
        emit(as_json, {"fts": "rebuilt", "model": None}, text)
        return
    _print_embed(report, as_json)


def _print_embed(report: Any, as_json: bool) -> None:
    done = f"embedded {report.embedded:,}, reused {report.reused:,} identical"
    emit(as_json, report, f"{report.model}: {done}, {report.pending:,} still pending")


@cli.command()
@json_option
@click.pass_obj
@handle_errors
def check(obj: Context, as_json: bool) -> None:
    """Verify the store: SQLite and FTS5 integrity, index equal to the memories."""
    report = obj.store().check()
    if as_json:
        emit_json(report)
    elif report["ok"]:
        click.echo(f"ok: {report['memories']:,} memories, index consistent")
    else:
        for problem in report["problems"]:
            click.echo(f"problem: {problem}", err=True)
    if not report["ok"]:
        sys.exit(1)


@cli.command()
@click.option(
    "--from",
    "source",
    required=True,
    help="The store to copy: a SQLite file (PATH or sqlite:PATH) or a postgresql:// URL.",
)
@click.option("--to", "target", required=True, help="The store to fill (a file is created).")
@click.option(
    "--no-vectors", is_flag=True, help="Copy no vectors (then run `mnemex embed` on the target)."
)
@click.option("--resume", is_flag=True, help="Continue an interrupted migrate into --to.")
@click.option(
    "--into-nonempty", is_flag=True, help="Add to a target that holds memories (ids kept)."
)
@click.option("--check-only", is_flag=True, help="Only compare the two stores; copy nothing.")
@json_option
@handle_errors
def migrate(
    source: str,
    target: str,
    no_vectors: bool,
    resume: bool,
    into_nonempty: bool,
    check_only: bool,
    as_json: bool,
) -> None:
    """Copy every memory, vector, relation and workspace from one store into another
    (SQLite or PostgreSQL, either way), then check that the two hold the same.

    Exits 1 when the check finds a difference or a memory could not be copied.
    """
    from mnemex import migration

    with _PhaseBars(not as_json) as bars:
        if check_only:
            comparison = migration.compare(source, target, vectors=not no_vectors, progress=bars)
        else:
            try:
                report = migration.migrate(
                    source,
                    target,
                    vectors=not no_vectors,
                    resume=resume,
                    into_nonempty=into_nonempty,
                    progress=bars,
                )
            except KeyboardInterrupt:
                fail("interrupted: the same command with --resume continues the copy", 130)
    if check_only:
        emit(as_json, comparison, "\n".join(_comparison_lines(comparison)))
        ok = comparison.identical
    else:
        emit(as_json, report, "\n".join(_migrate_lines(report)))
        ok = report.ok
    if not ok:
        sys.exit(1)


def _migrate_lines(report: Any) -> list[str]:
    lines = [
        f"copied {report.memories:,} memories ({report.vectors:,} vectors), "
        f"{report.relations:,} relations, {report.workspaces:,} workspaces "
        f"({report.files:,} files) in {report.seconds:.1f} s; "
        f"{report.skipped:,} already there"
    ]
    if report.conflict_count:
        lines.append(f"{report.conflict_count:,} conflict(s):")
        lines += [f"  {c.what} {c.key}: {c.problem}" for c in report.conflicts]
    if report.check is not None:
        lines += _comparison_lines(report.check)
    return lines


def _comparison_lines(check: Any) -> list[str]:
    kinds: dict[str, Any] = next(iter(check.namespaces.values()), {})
    lines = [f"{'source / target':<20} " + " ".join(f"{k:>21}" for k in kinds)]
    for ns, counts in check.namespaces.items():
        cells = (f"{a:,} / {b:,}{'' if a == b else ' !'}" for a, b in counts.values())
        lines.append(f"{ns:<20} " + " ".join(f"{c:>21}" for c in cells))
    if check.identical:
        lines.append(f"identical: digest {check.digests['source'][:16]} on both sides")
    else:
        lines.append(
            f"different: {check.missing:,} missing from the target, {check.extra:,} only in "
            f"the target, {check.different:,} different"
        )
        lines += [f"  {d.what} {d.key}: {d.problem}" for d in check.differences]
    return lines


@cli.command(name="mcp")
@click.option("--http", "use_http", is_flag=True, help="Serve streamable HTTP instead of stdio.")
@click.option("--host", help="Address to bind with --http (default 127.0.0.1).")
@click.option(
    "--port", type=click.IntRange(1, 65535), help="Port to bind with --http (default 8765)."
)
@click.option(
    "--allow-remote",
    is_flag=True,
    help="Allow a --host that is not loopback; needs a token in MNEMEX_MCP_TOKEN.",
)
@click.option(
    "--check",
    "check_only",
    is_flag=True,
    help="Start the stdio server as an agent would, list its tools, call memory_stats, stop.",
)
@click.pass_obj
@handle_errors
def mcp_(
    obj: Context,
    use_http: bool,
    host: str | None,
    port: int | None,
    allow_remote: bool,
    check_only: bool,
) -> None:
    """Serve the memory tools to agents over MCP (stdio, or streamable HTTP).

    The server works on one store and one namespace (--db, --namespace) and
    exposes memory_search, memory_timeline, memory_get, memory_recall,
    memory_add, memory_update, memory_forget, memory_relate and memory_stats. With --http it
    listens on http://HOST:PORT/mcp; when MNEMEX_MCP_TOKEN is set every request
    must carry `Authorization: Bearer <token>`. Needs mnemex[mcp].
    """
    from mnemex.mcp import require_sdk, serve

    if not use_http and (host or port or allow_remote):
        fail("--host, --port and --allow-remote apply to --http", 2)
    require_sdk()
    if check_only:
        if use_http:
            fail("--check starts the stdio server: leave out --http", 2)
        _check_mcp(obj)
        return
    from mnemex.mcp import transport

    token = os.environ.get(transport.TOKEN_ENV) or None
    host = host or transport.DEFAULT_HOST
    port = port or transport.DEFAULT_PORT
    if use_http:
        transport.check_bind(host, allow_remote=allow_remote, token=token)
        transport.check_port(host, port)
    where = obj.store(create=True).path  # a new store is said to be one, before the server starts
    obj.close(keep=True)
    settings = obj.settings()
    if use_http:
        click.echo(
            f"mnemex MCP server on {transport.url(host, port)} (store {where}, "
            f"namespace {settings.namespace!r}" + (", bearer token required)" if token else ")"),
            err=True,
        )
    serve(settings, http=use_http, host=host, port=port, allow_remote=allow_remote, token=token)


def _check_mcp(obj: Context) -> None:
    from mnemex.mcp.check import check

    options = [*(["--db", obj.db] if obj.db else []), *(["--home", obj.home] if obj.home else [])]
    options += ["--namespace", obj.namespace] if obj.namespace else []
    report = check(options)
    stats = report.stats
    click.echo(f"server    {' '.join(report.command)}  ({report.server}, stdio)")
    click.echo(f"tools     {len(report.tools)}: {', '.join(report.tools)}")
    click.echo(
        f"namespace {stats.get('namespace')!r}: {stats.get('memories', 0):,} memories, "
        f"{stats.get('vectors', 0):,} vectors ({stats.get('embedder') or 'no embedder'})"
    )
    click.echo("ok: an agent configured with this command gets these tools")


@cli.command(name="ui")
@click.option("--host", help="Address to bind (default 127.0.0.1); any other needs a token.")
@click.option(
    "--port", type=click.IntRange(0, 65535), help="Port to bind (default 8766; 0: any free port)."
)
@click.option(
    "--token",
    help="A secret of 16+ characters every request must carry (or MNEMEX_UI_TOKEN); "
    "needed on any address but loopback.",
)
@click.option("--read-only", is_flag=True, help="Serve no change at all: no edit, no forget.")
@click.option("--open", "open_browser", is_flag=True, help="Open the page in the web browser.")
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    help="Another host name the page may be opened at (repeatable; loopback names always work).",
)
@click.pass_obj
@handle_errors
def ui_(
    obj: Context,
    host: str | None,
    port: int | None,
    token: str | None,
    read_only: bool,
    open_browser: bool,
    allow_hosts: tuple[str, ...],
) -> None:
    """Inspect the store in a local web page: search as you type, the timeline, each
    memory's page, edits, the prompt preview, the injection log and health.

    Prints the page's address (with the token, when there is one) and serves until
    interrupted. Every namespace of the store is shown. Needs mnemex[ui].
    """
    from mnemex import ui

    ui.require_extra()
    from mnemex.ui import server

    token = token or os.environ.get(server.TOKEN_ENV) or None
    host = host or server.DEFAULT_HOST
    server.check_bind(host, token)
    obj.store()  # a path without a store fails here, with what to do
    obj.close(keep=True)
    server.run(
        obj.settings(),
        host=host,
        port=server.DEFAULT_PORT if port is None else port,
        token=token,
        read_only=read_only,
        open_browser=open_browser,
        allow_hosts=allow_hosts,
    )


@cli.group(name="eval")
def eval_() -> None:
    """Measure retrieval quality and latency on public benchmarks."""


def eval_options(func: F) -> F:
    """Options shared by the evaluations: what to search with (handed to the command as
    ``spec``, a :class:`mnemex.eval.runner.Spec`), and where to keep the store (``db``)."""

    @wraps(func)
    def command(
        weights: str | None,
        budget: int | None,
        keep_db: str | None,
        embed_cache: str | None,
        no_embed_cache: bool,
        **given: Any,
    ) -> Any:
        from mnemex.eval.embed_cache import default_cache_dir
        from mnemex.eval.runner import Spec

        cache = Path(embed_cache) if embed_cache else default_cache_dir()
        spec = Spec(
            mode=given.pop("mode"),
            fusion=given.pop("fusion"),
            weights=_weights(weights),
            lexical_budget=budget,
            embedder=given.pop("embedder"),
            embed_cache=None if no_embed_cache else cache,
        )
        return func(spec=spec, db=keep_db, **given)  # a file or a PostgreSQL URL

    for option in reversed(
        [
            click.option(
                "--mode",
                type=click.Choice(config.MODES[1:]),
                help="Search mode (default: hybrid with an embedder, else lexical).",
            ),
            click.option("--fusion", type=click.Choice(config.FUSIONS)),
            click.option("--weights", metavar="VECTOR,TEXT"),
            click.option(
                "--budget", type=click.IntRange(0), help="Lexical scoring budget (0 = exact)."
            ),
            click.option("--embedder", type=click.Choice(config.EMBEDDERS)),
            click.option(
                "--depth",
                type=click.IntRange(10, 1000),
                default=100,
                show_default=True,
                help="Hits retrieved per query.",
            ),
            click.option(
                "--keep-db",
                type=click.Path(dir_okay=False),
                help="Build (or reuse) the store at this path (or PostgreSQL URL) instead of "
                "a temporary one.",
            ),
            click.option(
                "--embed-cache",
                type=click.Path(file_okay=False),
                help="Keep the corpus's vectors in this folder and reuse them on the next run "
                "(default: the user cache dir).",
            ),
            click.option(
                "--no-embed-cache", is_flag=True, help="Embed everything afresh; cache nothing."
            ),
            json_option,
        ]
    ):
        command = option(command)
    return command  # type: ignore[return-value]


foreign_option = click.option(
    "--foreign",
    "others",
    multiple=True,
    type=click.Path(exists=True),
    help="Also ask the store this dataset's queries (a BEIR folder or a LoCoMo file; "
    "repeatable) and report the share that gets any hit.",
)


@eval_.command(name="beir")
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@click.option("--split", default="test", show_default=True, help="qrels/<split>.tsv to use.")
@click.option("--max-queries", type=int, help="Evaluate only the first N queries.")
@foreign_option
@eval_options
@handle_errors
def eval_beir(directory: str, as_json: bool, others: tuple[str, ...], **given: Any) -> None:
    """Evaluate on a BEIR dataset (corpus.jsonl[.gz], queries.jsonl, qrels/)."""
    from mnemex.eval.beir import run_beir
    from mnemex.eval.report import print_report

    others_ = [Path(p) for p in others]
    report = run_beir(Path(directory), progress=not as_json, others=others_, **given)
    emit_json(report) if as_json else print_report(report)


@eval_.command(name="locomo")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--granularity",
    type=click.Choice(["turn", "session", "workspace"]),
    default="turn",
    show_default=True,
    help="A memory per turn, a memory per session (its turns as 'Speaker: text' lines), or "
    "each conversation as a markdown workspace (a file a day, synced and chunked).",
)
@click.option(
    "--case",
    type=click.Choice(["lower", "sentence"]),
    help="Ask every question lower-cased, or lower-cased with its first letter upper.",
)
@click.option(
    "--perturb-names", is_flag=True, help="Misspell every name in the questions by one edit."
)
@click.option(
    "--no-foreign",
    is_flag=True,
    help="Skip asking each conversation the other conversations' questions.",
)
@foreign_option
@eval_options
@click.option(
    "--separate",
    is_flag=True,
    help="Give each conversation a store of its own (default: one store, a namespace each).",
)
@handle_errors
def eval_locomo(
    file: str,
    granularity: str,
    case: str | None,
    perturb_names: bool,
    no_foreign: bool,
    others: tuple[str, ...],
    spec: Any,
    depth: int,
    db: Path | None,
    as_json: bool,
    separate: bool,
) -> None:
    """Evaluate evidence recall on LoCoMo, with and without the relevance floor, and how
    many of the other conversations' questions get an answer."""
    from mnemex.eval.locomo import run_locomo
    from mnemex.eval.report import print_report

    report = run_locomo(
        Path(file),
        granularity=granularity,
        case=case,
        names=perturb_names,
        foreign=not no_foreign,
        depth=depth,
        spec=spec,
        db=db,
        progress=not as_json,
        separate=separate,
        others=[Path(p) for p in others],
    )
    emit_json(report) if as_json else print_report(report)


@eval_.command(name="paraphrase")
@click.argument("file", required=False, type=click.Path(exists=True, dir_okay=False))
@eval_options
@handle_errors
def eval_paraphrase(
    file: str | None, spec: Any, depth: int, db: Path | None, as_json: bool
) -> None:
    """Evaluate small stores asked in other words (default: the bundled set): the answer
    within the first 1, 3 and 5 hits with and without the relevance floor, and how many
    unrelated prompts get a hit."""
    from mnemex.eval.paraphrase import run_paraphrase
    from mnemex.eval.report import print_report

    report = run_paraphrase(Path(file) if file else None, spec=spec, db=db, progress=not as_json)
    emit_json(report) if as_json else print_report(report)


# -- markdown workspaces -------------------------------------------------------------


def _add_to_workspace(
    obj: Context,
    workspace: str,
    content: str,
    kind: str | None,
    tags: tuple[str, ...],
    as_json: bool,
    given: dict[str, Any],
) -> None:
    """``mnemex add --to-workspace``: options a markdown file cannot hold are refused."""
    refused = [
        option
        for option, name, unset in (
            ("--source", "source", None),
            ("--confidence", "confidence", None),
            ("--pinned", "pinned", False),
            ("--meta", "meta", ()),
            ("--id", "id", None),
            ("--no-dedup", "no_dedup", False),
        )
        if given[name] != unset
    ]
    if refused:
        fail(f"--to-workspace writes to a markdown file, which cannot hold {', '.join(refused)}", 2)
    appended = obj.store(create=True).add_to_workspace(
        _read_text(content), workspace, kind=kind, tags=_split(tags), created_at=given["created_at"]
    )
    if as_json:
        emit_json(appended.to_dict())
    else:
        if appended.id:
            click.echo(appended.id)
        click.echo(
            f"appended to {appended.location.label} in {appended.location.workspace}", err=True
        )
    for problem in appended.sync.problems:
        click.echo(f"warning: {problem.path}: {problem.message}", err=True)
    if not appended.ids:
        fail(f"{appended.location.path} could not be indexed; the text is in the file", 1)


class _PhaseBars(contextlib.ExitStack):
    """Progress bars for the phases of a sync (reading files, embedding chunks), a reindex
    (embedding, re-windowing) or a migration, one at a time."""

    def __init__(self, enabled: bool) -> None:
        super().__init__()
        self.enabled = enabled
        self.phase: str | None = None
        self.done = 0
        self.advance: Callable[[int], None] = lambda n: None

    def __call__(self, phase: str, done: int, total: int) -> None:
        if phase != self.phase:
            self.close()
            self.advance = self.enter_context(progress_bar(total, phase, self.enabled))
            self.phase, self.done = phase, 0
        self.advance(done - self.done)
        self.done = done


@cli.command()
@click.argument("directory", type=click.Path(file_okay=False))
@click.option(
    "--glob",
    "globs",
    multiple=True,
    help="Files to index, relative to DIRECTORY (repeat or comma-separate; default "
    "MEMORY.md, memory.md, memory/**/*.md). Remembered for later syncs.",
)
@click.option(
    "--ignore",
    multiple=True,
    help="Files and folders to skip (repeat or comma-separate; default **/.*, hidden ones).",
)
@click.option("--no-embed", is_flag=True, help="Index the text only (embed later: mnemex embed).")
@click.option(
    "--remove", is_flag=True, help="Stop indexing DIRECTORY: drop its chunks (not the files)."
)
@json_option
@click.pass_obj
@handle_errors
def sync(
    obj: Context,
    directory: str,
    globs: tuple[str, ...],
    ignore: tuple[str, ...],
    no_embed: bool,
    remove: bool,
    as_json: bool,
) -> None:
    """Index the markdown workspace in DIRECTORY (MEMORY.md and memory/**/*.md).

    Only what changed since the last sync is read, chunked and embedded.
    Files that cannot be indexed (not UTF-8, unreadable) are reported and
    skipped, and the command exits 1; the rest is indexed.
    """
    store = obj.store(create=not remove)
    if remove:
        removed = store.remove_workspace(directory)
        text = f"removed the workspace {directory}: {removed:,} chunks dropped"
        emit(as_json, {"removed": True, "chunks": removed}, text)
        return
    with _PhaseBars(enabled=not as_json) as bars:
        report = store.sync(
            directory,
            globs=_split(globs) or None,
            ignore=_split(ignore) or None,
            embed=not no_embed,
            progress=bars,
        )
    if as_json:
        emit_json(report.to_dict())
    else:
        click.echo(
            f"{report.workspace} (namespace {report.namespace}): {report.files:,} files, "
            f"{report.chunks:,} chunks; {report.added:,} added, {report.changed:,} changed, "
            f"{report.renamed:,} renamed, {report.deleted:,} deleted, {report.unchanged:,} "
            f"unchanged; chunks +{report.chunks_added:,} -{report.chunks_removed:,}; "
            f"{report.embedded:,} embedded, {report.reused:,} vectors reused; "
            f"{report.took_ms:,.0f} ms"
        )
        if report.pending_vectors:
            click.echo(f"{report.pending_vectors:,} chunks have no vector yet: run `mnemex embed`")
    for problem in report.problems:
        click.echo(f"skipped {problem.path}: {problem.message}", err=True)
    if report.embedding_error:
        click.echo(f"warning: chunks stored without vectors ({report.embedding_error})", err=True)
    if report.problems:
        sys.exit(1)


@cli.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@all_ns_option
@json_option
@click.pass_obj
@handle_errors
def status(obj: Context, directory: str | None, all_namespaces: bool, as_json: bool) -> None:
    """Workspaces: files, chunks, vectors still to compute, the last sync, and how many
    files changed on disk since (checked now)."""
    found = obj.store().workspace_status(directory, namespace=_scope(all_namespaces))
    if as_json:
        emit_json({"workspaces": [w.to_dict() for w in found]})
        return
    out = console()
    if not found:
        out.print("no workspaces here: index one with `mnemex sync DIR`", markup=False)
    for w in found:
        out.print(f"{w.workspace}  (namespace {w.namespace})", markup=False, style="bold")
        out.print(f"  files      {w.files:,} ({len(w.problems):,} not indexed)", markup=False)
        vectors = (
            "lexical only (no embedder)"
            if w.pending_vectors is None
            else f"{w.pending_vectors:,} without a vector for {w.embedder}"
        )
        out.print(f"  chunks     {w.chunks:,}; {vectors}", markup=False)
        last = w.last_sync
        when = f"{_when(w.synced_at)} UTC" if w.synced_at else "never"
        took = f", {last['took_ms']:,.0f} ms" if "took_ms" in last else ""
        out.print(f"  last sync  {when}{took}", markup=False)
        if not w.exists:
            now = "the folder is missing"
        elif w.changed is None:
            now = "the folder cannot be read"
        elif w.changed:
            now = f"{w.changed:,} file(s) changed since: run `mnemex sync {w.workspace}`"
        else:
            now = "in sync with the files"
        out.print(f"  now        {now}", markup=False)
        for problem in w.problems:
            out.print(f"  skipped    {problem.path}: {problem.message}", markup=False)


@cli.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--debounce",
    type=click.FloatRange(0, 60),
    help="Seconds without changes before a sync (default 1.5).",
)
@click.pass_obj
@handle_errors
def watch(obj: Context, directory: str, debounce: float | None) -> None:
    """Sync DIRECTORY now and after every change to its files, until interrupted.

    Each sync is logged on stderr; files that cannot be indexed are logged
    and skipped; any other error is logged and watching goes on.
    Needs mnemex[watch].
    """
    import logging
    import signal
    import threading

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    for name in ("mnemex", "mnemex.watch"):
        logging.getLogger(name).addHandler(handler)
        logging.getLogger(name).setLevel(logging.INFO)
    logging.getLogger("mnemex.watch").propagate = False
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    obj.store(create=True).watch(directory, debounce=debounce, stop=stop)


# -- agent hooks: `mnemex hook`, `mnemex hooks install|uninstall|status` (mnemex.hooks) --------

from mnemex.hooks.commands import register as _register_hooks  # noqa: E402

_register_hooks(cli)


def main(argv: Sequence[str] | None = None) -> None:
    cli.main(args=argv, prog_name="mnemex")


if __name__ == "__main__":  # pragma: no cover
    main()
