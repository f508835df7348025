"""Settings: named defaults, then a TOML file, then ``MNEMEX_*`` variables, then arguments.

The data folder is ``$MNEMEX_HOME`` or the platform's user data directory;
the store is ``memories.db`` inside it unless a path is given. The config
file is ``config.toml`` in the data folder (or ``$MNEMEX_CONFIG``); its keys
are the field names of :class:`Settings`.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from mnemex.errors import InvalidInput
from mnemex.records import dataclass

# Named defaults (the seeds' values where the seeds give one).
DEFAULT_NAMESPACE = "default"
DEFAULT_KIND = "observation"
DEFAULT_CONFIDENCE = 0.8
DEFAULT_SEARCH_LIMIT = 6  # top-K for search (seed 004)
MAX_SEARCH_LIMIT = 1000
DEFAULT_BUSY_TIMEOUT = 60.0  # seconds a write waits for its turn at the write lock
DEFAULT_MAX_CONTENT_BYTES = 65_536
DEFAULT_LEXICAL_BUDGET = 2_000  # postings scored per lexical query before shaping kicks in
DEFAULT_SNIPPET_TOKENS = 32
SNIPPET_MAX_CHARS = 700  # seed 004
# auto: the embedder the store records it was indexed with; for a store without one, local
# when mnemex[embed] is installed, else none.
DEFAULT_EMBEDDER = "auto"
EMBED_COOLDOWN = 30.0  # seconds a provider that failed is skipped (doubled per failure in a row)
# A text longer than the model's window gets a vector per window, scored by its best.
EMBED_WINDOWS = True
# A long text also gets a vector per sentence (the local model): off, as it costs a
# markdown workspace more than it gains on abstracts (benchmarks/RESULTS.md, "A vector per
# sentence: built, off by default").
EMBED_SENTENCES = False
DEFAULT_MODE = "auto"  # hybrid when an embedder is configured, else lexical
# Fusion defaults chosen by evaluation (benchmarks/RESULTS.md): weighted fusion with equal
# weights beat RRF (k = 60) and the seeds' 0.7 / 0.3 on both SciFact (train split) and
# LoCoMo-dev; adaptive (those weights moved per query towards the surer arm) beat it on
# SciFact train, CISI and LoCoMo-dev. RRF and any weights stay selectable.
DEFAULT_FUSION = "adaptive"
RRF_K = 60
VECTOR_WEIGHT = 0.5
TEXT_WEIGHT = 0.5
# Ranking stages after fusion (mnemex.search.rank); on/off defaults chosen by evaluation on
# LoCoMo-dev (docs/search.md, "Ranking for agents"; the figures in docs/measured.md).
HALF_LIFE_DAYS = 30.0  # seeds 003, 004
MMR_LAMBDA = 0.7  # seed 004
MIN_TEXT_SCORE = 0.0  # normalized BM25 a lexical hit needs (off: docs/search.md, "Thresholds")
MIN_VECTOR_SCORE = -1.0  # cosine a vector hit needs (off)
RELEVANCE_FLOOR = True  # return nothing rather than hits no arm finds relevant (search/floor.py)
THREAD_CONTEXT = 0.3  # a memory scores this x its better thread neighbour's score (rank.py)
THREAD_BEST = 0.3  # and moves toward its thread's best score by this weight (rank.py)
DEDUP_TEXT = 0.7  # normalized BM25 above which a new memory is a duplicate (seed 003)
DEDUP_COSINE = 0.95  # seed 003 says 0.85; with MiniLM that merged 5 % of distinct LoCoMo turns
RECALL_BUDGET_TOKENS = 500  # seed 003
RECALL_MAX_MEMORIES = 5  # seed 003
MAX_RECALL_MEMORIES = 100  # the most `mnemex recall --max-memories` takes
RECALL_CANDIDATES = 20  # ranked memories recall may choose from (at least 4 x max_memories)
SEARCH_RELATIONS = 5  # relations returned beside the memories of a search (seed 002)
# Markdown workspaces (mnemex.ingest).
CHUNK_TOKENS = 400  # seed 004
CHUNK_OVERLAP = 80  # seed 004
CHUNK_KIND = "chunk"  # the kind of the memories a workspace's files are cut into
WORKSPACE_GLOBS = ("MEMORY.md", "memory.md", "memory/**/*.md")  # seed 004
WORKSPACE_IGNORE = ("**/.*",)  # hidden files and folders (.git, editor swap files)
SYNC_TIMEOUT = 1.0  # seconds a search may spend syncing a changed workspace
WATCH_DEBOUNCE = 1.5  # seconds of quiet after a change before `mnemex watch` syncs
# `mnemex mcp --http`: every open session costs the server memory until it ends, so sessions
# are capped (a request that would open one more gets 503) and closed after idling.
MCP_MAX_SESSIONS = 100
MCP_SESSION_IDLE = 600.0  # seconds without a request before a session is closed
# The injection log (mnemex.injections): what the prompt hook injected into each prompt,
# or why it injected nothing, kept for a bounded number of days and entries.
INJECTION_LOG = True
INJECTION_LOG_DAYS = 30
INJECTION_LOG_ENTRIES = 10_000
MAX_INJECTION_LOG_DAYS = 36_500
MAX_INJECTION_LOG_ENTRIES = 10_000_000
MODES = ("auto", "lexical", "vector", "hybrid")
# The values of the setting embedder: mnemex.embed.PROVIDERS' names and those registered
# (mnemex.embed.register adds to the list), auto and none.
EMBEDDERS = ["auto", "local", "sentence-transformers", "openai", "none"]
SIMILARITIES = ("auto", "jaccard", "cosine")
TOKEN_COUNTERS = ("chars", "wordpiece")
FUSIONS = ("rrf", "weighted", "adaptive")
DB_FILENAME = "memories.db"
CONFIG_FILENAME = "config.toml"


@dataclass(frozen=True)
class Settings:
    """Everything configurable, with the defaults above.

    ``lexical_budget`` bounds how many postings the lexical arm scores per
    query: when the query's terms together occur in more rows than that, only
    rows containing its rarest terms are candidates (scored exactly with all
    terms). ``0`` disables shaping and always scores every matching row.
    """

    home: Path
    db_path: Path
    db_url: str | None = None  # a PostgreSQL server (postgresql://...) in place of db_path
    namespace: str = DEFAULT_NAMESPACE
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT
    pool_size: int = 4  # PostgreSQL: connections each open store may hold (psycopg_pool)
    max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES
    search_limit: int = DEFAULT_SEARCH_LIMIT
    lexical_budget: int = DEFAULT_LEXICAL_BUDGET
    snippet_tokens: int = DEFAULT_SNIPPET_TOKENS
    highlight_start: str = "**"
    highlight_end: str = "**"
    embedder: str = DEFAULT_EMBEDDER
    embed_model: str = ""
    embed_batch_size: int = 32
    embed_threads: int = 0  # 0: up to 4, as many as the machine has
    embed_timeout: float = 30.0  # seconds per HTTP request
    embed_dimensions: int = 0  # openai: ask the endpoint for vectors this long (0: the model's)
    embed_cooldown: float = EMBED_COOLDOWN  # 0: never skip a provider that failed
    # A long text gets several vectors: one per window of the model; false: one a text.
    embed_windows: bool = EMBED_WINDOWS
    # With windows, a long text also gets a vector per sentence (the local model).
    embed_sentences: bool = EMBED_SENTENCES
    query_timeout: float = 5.0  # seconds to embed a query before answering lexically
    openai_base_url: str = "https://api.openai.com/v1"
    openai_api_key_env: str = "OPENAI_API_KEY"
    search_mode: str = DEFAULT_MODE
    fusion: str = DEFAULT_FUSION
    rrf_k: int = RRF_K
    vector_weight: float = VECTOR_WEIGHT
    text_weight: float = TEXT_WEIGHT
    # auto: an HNSW index past ann_threshold vectors (needs mnemex[ann]); off: every search
    # exact, on PostgreSQL too (else pgvector's index past its EXACT_MAX vectors)
    ann: str = "auto"
    # From 100,000 vectors a search through the graph is faster than through the 8-bit codes
    # (7.4 against 9.7 ms hybrid), at recall 1.0; a new process loads it while the query is
    # embedded (benchmarks/RESULTS.md, "HNSW from 100,000 vectors").
    ann_threshold: int = 100_000
    decay: bool = False
    half_life_days: float = HALF_LIFE_DAYS
    confidence_weighting: bool = True
    mmr: bool = False
    mmr_lambda: float = MMR_LAMBDA
    mmr_similarity: str = "auto"  # auto: cosine when every candidate has a vector
    min_text_score: float = MIN_TEXT_SCORE
    min_vector_score: float = MIN_VECTOR_SCORE
    relevance_floor: bool = RELEVANCE_FLOOR
    thread_context: float = THREAD_CONTEXT  # what a memory's thread neighbours lend (0: off)
    thread_best: float = THREAD_BEST  # how far a memory moves toward its thread's best (0: off)
    dedup: bool = True  # merge a near-duplicate single write into the memory it repeats
    dedup_text: float = DEDUP_TEXT
    dedup_cosine: float = DEDUP_COSINE
    recall_budget: int = RECALL_BUDGET_TOKENS
    recall_max: int = RECALL_MAX_MEMORIES
    token_counter: str = "chars"  # chars: len/4 (a CJK char 1); wordpiece: the model's tokenizer
    query_expansion: bool = True  # multilingual stop words, CJK pieces, Korean particles
    spelling: bool = True  # a query word no memory holds, read as the store's word it misspells
    search_relations: int = SEARCH_RELATIONS  # 0: searches return no relations
    chunk_tokens: int = CHUNK_TOKENS
    chunk_overlap: int = CHUNK_OVERLAP
    workspace_globs: tuple[str, ...] = WORKSPACE_GLOBS
    workspace_ignore: tuple[str, ...] = WORKSPACE_IGNORE
    sync_on_search: bool = True  # a search first syncs the workspaces it reads if they changed
    sync_timeout: float = SYNC_TIMEOUT
    watch_debounce: float = WATCH_DEBOUNCE
    mcp_max_sessions: int = MCP_MAX_SESSIONS
    mcp_session_idle: float = MCP_SESSION_IDLE
    injection_log: bool = INJECTION_LOG  # false: the prompt hook records nothing
    injection_log_days: int = INJECTION_LOG_DAYS  # older entries are deleted
    injection_log_entries: int = INJECTION_LOG_ENTRIES  # the newest this many are kept
    # The values of the settings added by registered ranking stages (ADDED), by name.
    added: tuple[tuple[str, Any], ...] = ()

    def replace(self, **changes: Any) -> Settings:
        added = {name: changes.pop(name) for name in list(changes) if name in ADDED}
        if added:
            changes["added"] = tuple(sorted({**dict(self.added), **added}.items()))
        return dataclasses.replace(self, **changes)

    def value(self, name: str) -> Any:
        """The setting ``name``: a field, or one a registered ranking stage added."""
        if name in ADDED:
            return dict(self.added).get(name, ADDED[name])
        return getattr(self, name)


_ENV_PREFIX = "MNEMEX_"
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_TUNABLES = {
    f.name: f for f in fields(Settings) if f.name not in ("home", "db_path", "db_url", "added")
}
# The settings registered ranking stages add (mnemex.search.stages.register) and their
# defaults: a config file, a variable or an argument sets them like the fields of Settings.
ADDED: dict[str, bool | float] = {}


def add_setting(name: str, default: bool | float) -> None:
    """Make ``name`` a setting with ``default`` (a bool or a number; a field of
    :class:`Settings` already is one)."""
    if name in _TUNABLES or name in ADDED:
        return
    if not name.isidentifier() or not isinstance(default, bool | int | float):
        raise ValueError(f"a setting is a name and a bool or a number, got {name!r}={default!r}")
    ADDED[name] = default


def setting_default(name: str) -> Any:
    """The default of the setting ``name`` (KeyError: there is none)."""
    return ADDED[name] if name in ADDED else _TUNABLES[name].default


def _kind(name: str) -> Any:
    """The type of the setting ``name`` (as the dataclass names it)."""
    if name in ADDED:
        return type(ADDED[name]).__name__
    return _TUNABLES[name].type


URL_SCHEMES = ("postgresql://", "postgres://")


def is_url(db: object) -> bool:
    """Whether a ``--db`` value names a PostgreSQL server rather than a file."""
    return isinstance(db, str) and db.startswith(URL_SCHEMES)


def _store_at(values: dict[str, Any], db: str | os.PathLike[str]) -> None:
    """Record where the store is: a PostgreSQL URL, or a file path (the later one wins)."""
    if is_url(db):
        values["db_url"] = db
        values.pop("db_path", None)
    else:
        values["db_path"] = Path(db).expanduser()
        values.pop("db_url", None)


def default_home() -> Path:
    """``$MNEMEX_HOME`` or the platform's user data dir for mnemex."""
    env = os.environ.get("MNEMEX_HOME")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("mnemex", appauthor=False))


def default_text(*names: str) -> str:
    """Help text for defaults that settings give, e.g. ``default 6 (setting search_limit)``."""
    shown = []
    for name in names:
        value = setting_default(name)
        if isinstance(value, bool):
            value = "on" if value else "off"
        elif isinstance(value, float):
            value = f"{value:g}"
        elif isinstance(value, str):
            value = repr(value)
        shown.append(f"{value} (setting {name})")
    return "default " + ", ".join(shown)


def given_store(
    db: str | None, namespace: str | None, environ: Mapping[str, str] | None = None
) -> tuple[str | None, str | None]:
    """The store path and namespace a command was given: its own, else ``$MNEMEX_DB`` and
    ``$MNEMEX_NAMESPACE`` (``None`` where neither says)."""
    env = os.environ if environ is None else environ
    return db or env.get("MNEMEX_DB") or None, namespace or env.get("MNEMEX_NAMESPACE") or None


MAX_NAMESPACE_CHARS = 128


@dataclass(frozen=True)
class Where:
    """The namespace a command uses and what chose it (:func:`where`)."""

    namespace: str
    source: str  # option | environment | config | project | default
    detail: str = ""  # the option, variable, config file or project folder

    @property
    def reason(self) -> str:
        return {
            "option": "given with -n/--namespace",
            "environment": "from MNEMEX_NAMESPACE",
            "config": f"set in {self.detail}",
            "project": f"the project at {self.detail}",
            "default": "the default outside a project",
        }[self.source]


def project_root(cwd: str | os.PathLike[str]) -> Path | None:
    """The git repository's root above ``cwd`` (or ``cwd`` itself), ``None`` outside one."""
    path = Path(cwd).expanduser().absolute()
    for candidate in (path, *path.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


def project_namespace(root: str | os.PathLike[str]) -> str:
    """A project's namespace: its folder's absolute path (a path too long for a namespace
    becomes its last folder's name and a hash)."""
    path = Path(root).expanduser().absolute()
    name = str(path)
    if len(name) > MAX_NAMESPACE_CHARS:
        import hashlib

        digest = hashlib.sha1(name.encode("utf-8", "surrogateescape")).hexdigest()[:12]
        name = f"{path.name[: MAX_NAMESPACE_CHARS - 14]}-{digest}"
    return name


def where(
    given: str | None = None,
    cwd: str | os.PathLike[str] | None = None,
    *,
    home: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Where:
    """The one namespace rule of the CLI, the MCP server and the agent hooks.

    First that applies: the namespace ``given`` (``-n/--namespace``), then
    ``$MNEMEX_NAMESPACE``, then ``namespace`` in the config file, then the project
    of the working folder ``cwd`` (the root of the git repository it is in: its
    path), else ``default``. The hooks pass the session's working folder.
    """
    env = os.environ if environ is None else environ
    if given is not None:
        return Where(given, "option", "-n/--namespace")
    if env.get("MNEMEX_NAMESPACE"):
        return Where(env["MNEMEX_NAMESPACE"], "environment", "MNEMEX_NAMESPACE")
    path = config_path(home, env)
    if path.is_file():
        import tomllib

        try:
            value = tomllib.loads(path.read_text(encoding="utf-8")).get("namespace")
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
            value = None  # reading the settings says what is wrong with the file
        if isinstance(value, str) and value.strip():
            return Where(value, "config", str(path))
    root = project_root(Path.cwd() if cwd is None else cwd)
    if root is not None:
        return Where(project_namespace(root), "project", str(root))
    return Where(DEFAULT_NAMESPACE, "default")


def config_path(
    home: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> Path:
    """The config file: ``$MNEMEX_CONFIG``, else ``config.toml`` in the data folder."""
    env = os.environ if environ is None else environ
    if env.get("MNEMEX_CONFIG"):
        return Path(env["MNEMEX_CONFIG"])
    folder = Path(home).expanduser() if home is not None else default_home()
    return folder / CONFIG_FILENAME


def _coerce(name: str, value: Any, source: str) -> Any:
    kind = _kind(name)
    if name == "namespace" and not isinstance(value, str):
        # Not str(value): mnemex.ALL would open a namespace named "mnemex.ALL", silently.
        raise InvalidInput(
            f"{source}: namespace must be one namespace's name, got {value!r}; a store "
            "opens on one namespace (its writes go there): to read across every namespace, "
            "pass namespace=mnemex.ALL to search, timeline, stats or export"
        )
    if kind in ("bool", bool):
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise InvalidInput(f"{source}: {name} must be true or false, got {value!r}")
    if kind == "tuple[str, ...]":  # a TOML list, or comma-separated text
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
            raise InvalidInput(f"{source}: {name} must be a list of strings, got {value!r}")
        return tuple(i.strip() for i in items if i.strip())
    try:
        if kind in ("int", int):
            if isinstance(value, bool):
                raise ValueError
            return int(value)
        if kind in ("float", float):
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"{source}: {name} must be a {kind}, got {value!r}") from None


def load_settings(
    db: str | os.PathLike[str] | None = None,
    *,
    home: str | os.PathLike[str] | None = None,
    config_file: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Build settings: defaults < config file < environment < arguments."""
    env = os.environ if environ is None else environ
    home_path = Path(home).expanduser() if home is not None else default_home()
    values: dict[str, Any] = {}

    cfg_path = (
        Path(config_file)
        if config_file
        else Path(env.get("MNEMEX_CONFIG") or home_path / CONFIG_FILENAME)
    )
    if cfg_path.is_file():
        import tomllib  # here: most processes have no config file to read

        try:
            data = tomllib.loads(cfg_path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"cannot read config file {cfg_path}: {exc}") from None
        for key, value in data.items():
            if key == "db_path":
                _store_at(values, str(value))
            elif key in _TUNABLES or key in ADDED:
                values[key] = _coerce(key, value, str(cfg_path))
            else:
                known = ", ".join(sorted([*_TUNABLES, *ADDED]))
                raise InvalidInput(f"{cfg_path}: unknown setting {key!r}; known: {known}")

    for key in [*_TUNABLES, *ADDED]:
        raw = env.get(_ENV_PREFIX + key.upper())
        if raw is not None and raw != "":
            values[key] = _coerce(key, raw, _ENV_PREFIX + key.upper())
    if env.get("MNEMEX_DB"):
        _store_at(values, env["MNEMEX_DB"])

    for key, value in overrides.items():
        if value is None:
            continue
        if key not in _TUNABLES and key not in ADDED:
            raise TypeError(f"unknown setting {key!r}")
        values[key] = _coerce(key, value, "argument")

    if db is not None:
        _store_at(values, db)
    values.setdefault("db_path", home_path / DB_FILENAME)
    added = tuple(sorted((key, values.pop(key)) for key in list(values) if key in ADDED))
    settings = Settings(home=home_path, added=added, **values)
    _validate(settings)
    return settings


def _validate(s: Settings) -> None:
    """Raise InvalidInput for the first setting out of bounds (in this order)."""
    _check_storage_and_search(s)
    _check_embedding_and_ranking(s)
    _check_workspace_and_serving(s)


def _check_storage_and_search(s: Settings) -> None:
    if s.busy_timeout < 0:
        raise InvalidInput("busy_timeout must be >= 0 seconds")
    check_count("pool_size", s.pool_size, 1, 100)
    if s.max_content_bytes < 1:
        raise InvalidInput("max_content_bytes must be at least 1")
    check_count("search_limit", s.search_limit, 1, MAX_SEARCH_LIMIT)
    if s.lexical_budget < 0:
        raise InvalidInput("lexical_budget must be >= 0 (0 disables query shaping)")
    if not 1 <= s.snippet_tokens <= 64:
        raise InvalidInput("snippet_tokens must be between 1 and 64 (an FTS5 limit)")
    check_choice("embedder", s.embedder, EMBEDDERS)
    check_choice("search_mode", s.search_mode, MODES)
    check_choice("fusion", s.fusion, FUSIONS)
    if s.rrf_k < 1:
        raise InvalidInput("rrf_k must be at least 1")
    check_weights((s.vector_weight, s.text_weight), "vector_weight and text_weight")
    if s.embed_batch_size < 1 or s.embed_threads < 0:
        raise InvalidInput("embed_batch_size must be >= 1 and embed_threads >= 0")
    if s.ann not in ("auto", "on", "off"):
        raise InvalidInput(f"ann must be auto, on or off, got {s.ann!r}")


def _check_embedding_and_ranking(s: Settings) -> None:
    if s.query_timeout <= 0 or s.embed_timeout <= 0:
        raise InvalidInput("query_timeout and embed_timeout must be > 0 seconds")
    if s.embed_dimensions < 0 or not 0 <= s.embed_cooldown < float("inf"):
        raise InvalidInput("embed_dimensions and embed_cooldown must be >= 0 (0: off)")
    if s.half_life_days <= 0:
        raise InvalidInput("half_life_days must be > 0")
    if not 0.0 <= s.mmr_lambda <= 1.0:
        raise InvalidInput("mmr_lambda must be between 0 and 1")
    for name in ("thread_context", "thread_best"):
        if not 0.0 <= getattr(s, name) <= 1.0:
            raise InvalidInput(f"{name} must be between 0 and 1 (0: off)")
    check_choice("mmr_similarity", s.mmr_similarity, SIMILARITIES)
    for name in ("min_text_score", "dedup_text"):
        if not 0.0 <= getattr(s, name) <= 1.0:
            raise InvalidInput(f"{name} must be between 0 and 1")
    for name in ("min_vector_score", "dedup_cosine"):
        if not -1.0 <= getattr(s, name) <= 1.0:
            raise InvalidInput(f"{name} must be between -1 and 1")
    check_count("recall_budget", s.recall_budget, 1)
    check_count("recall_max", s.recall_max, 1)
    check_count("search_relations", s.search_relations, 0, MAX_SEARCH_LIMIT)


def _check_workspace_and_serving(s: Settings) -> None:
    if s.chunk_tokens < 32:
        raise InvalidInput(f"chunk_tokens must be at least 32, got {s.chunk_tokens}")
    if not 0 <= s.chunk_overlap <= s.chunk_tokens // 2:
        raise InvalidInput("chunk_overlap must be between 0 and half of chunk_tokens")
    if (s.workspace_globs, s.workspace_ignore) != (WORKSPACE_GLOBS, WORKSPACE_IGNORE):
        _check_workspace_patterns(s)
    if s.sync_timeout <= 0 or s.watch_debounce < 0:
        raise InvalidInput("sync_timeout must be > 0 and watch_debounce >= 0 seconds")
    if s.mcp_max_sessions < 1 or not 0 < s.mcp_session_idle < float("inf"):
        raise InvalidInput(
            "mcp_max_sessions must be at least 1 and mcp_session_idle a positive number of seconds"
        )
    check_choice("token_counter", s.token_counter, TOKEN_COUNTERS)
    check_count("injection_log_days", s.injection_log_days, 1, MAX_INJECTION_LOG_DAYS)
    check_count("injection_log_entries", s.injection_log_entries, 1, MAX_INJECTION_LOG_ENTRIES)


def check_patterns(patterns: Sequence[str], what: str) -> tuple[str, ...]:
    """Clean glob patterns: relative, no ``..``; raises ValueError naming the bad one."""
    out = []
    for pattern in patterns:
        text = pattern.strip().replace("\\", "/") if isinstance(pattern, str) else ""
        parts = text.split("/")
        if not text or text.startswith("/") or ".." in parts:
            raise ValueError(
                f"{what} pattern {pattern!r} is not valid: use a relative glob such as "
                "memory/**/*.md"
            )
        out.append(text)
    return tuple(dict.fromkeys(out))


def _check_workspace_patterns(s: Settings) -> None:
    try:
        if not check_patterns(s.workspace_globs, "workspace_globs"):
            raise ValueError("workspace_globs needs at least one pattern")
        check_patterns(s.workspace_ignore, "workspace_ignore")
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None


def check_count(name: str, value: object, low: int, high: int | None = None) -> int:
    """``value`` if it is an integer in [low, high] (no upper bound when ``high`` is None)."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= (high or value):
        bounds = f"an integer between {low} and {high}" if high else "a positive integer"
        raise InvalidInput(f"{name} must be {bounds}, got {value!r}")
    return value


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise InvalidInput(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def check_weights(weights: object, name: str = "weights") -> tuple[float, float]:
    """(vector, text) fusion weights: two finite numbers >= 0, not both 0."""
    given = list(weights) if isinstance(weights, list | tuple) else []
    pair = [
        float(w) if isinstance(w, float) or (isinstance(w, int) and abs(w) < 2**53) else math.nan
        for w in given
        if not isinstance(w, bool)
    ]
    if not (
        len(given) == len(pair) == 2 and all(0 <= w < math.inf for w in pair) and sum(pair) > 0
    ):
        raise InvalidInput(
            f"{name} must be two numbers >= 0, not both 0 (vector, text), got {weights!r}"
        )
    return pair[0], pair[1]


# Each per-call search option and the setting it defaults to (the ranking stages' options
# are their entries', mnemex.search.stages).
_SEARCH_SETTINGS = {
    "limit": "search_limit",
    "mode": "search_mode",
    "fusion": "fusion",
    "relations": "search_relations",
    "expand": "query_expansion",
}


@dataclass(frozen=True, slots=True)
class SearchOptions:
    """One search: what the caller said, the settings for the rest, checked once.

    Build it with :meth:`of` (``Store.search`` takes it, or builds it from the same
    keyword arguments); a ``None`` argument means "as the settings say". ``mode`` stays
    ``auto`` until :meth:`mode_for` knows whether an embedder is there. ``stages`` holds
    the ranking stages' options the caller gave (decay, confidence, mmr, ...), which
    :func:`mnemex.search.stages.switches` resolves and checks. The filters (``kinds``,
    ``tags``, ``since``, ``until``) are checked where they become
    :class:`~mnemex.index.retrieval.Filters`, ``namespace`` where the store resolves it.
    """

    limit: int
    mode: str
    fusion: str
    relations: int
    expand: bool
    threshold: bool
    vector_weight: float
    text_weight: float
    rrf_k: int
    stages: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    kinds: Any = None  # Iterable[str] | str | None
    tags: Any = None  # Iterable[str] | str | None
    since: Any = None  # datetime | str | None
    until: Any = None  # datetime | str | None
    now: Any = None  # datetime | str | None: the time ages are measured from
    namespace: Any = None  # mnemex.engine.NamespaceArg
    explain: bool = False
    raw: bool = False
    snippets: bool = True
    notes: tuple[str, ...] = ()  # what the search says of the options (a raw query's mode)

    @classmethod
    def of(
        cls,
        settings: Settings,
        *,
        limit: int | None = None,
        kinds: Any = None,
        tags: Any = None,
        since: Any = None,
        until: Any = None,
        mode: str | None = None,
        fusion: str | None = None,
        weights: object = None,
        explain: bool = False,
        raw: bool = False,
        snippets: bool = True,
        threshold: bool | None = None,
        expand: bool | None = None,
        relations: int | None = None,
        now: Any = None,
        namespace: Any = None,
        **stages: Any,
    ) -> SearchOptions:
        """The options of one search (``stages``: the ranking stages' options)."""
        given: dict[str, Any] = {"limit": limit, "mode": mode, "fusion": fusion}
        given.update(relations=relations, expand=expand)
        v: dict[str, Any] = {
            key: getattr(settings, name) if given[key] is None else given[key]
            for key, name in _SEARCH_SETTINGS.items()
        }
        check_count("limit", v["limit"], 1, MAX_SEARCH_LIMIT)
        check_choice("mode", v["mode"], MODES)
        check_choice("fusion", v["fusion"], FUSIONS)
        pair = (settings.vector_weight, settings.text_weight)
        vector_weight, text_weight = pair if weights is None else check_weights(weights)
        check_count("relations", v["relations"], 0, MAX_SEARCH_LIMIT)
        v["expand"] = bool(v["expand"])
        notes: tuple[str, ...] = ()
        if raw:  # an FTS5 expression: the lexical arm alone, whatever the mode
            if mode not in (None, "auto", "lexical"):
                notes = (f"a raw FTS5 expression is answered by the lexical arm, not {mode}",)
            v["mode"] = "lexical"
        return cls(
            **v,
            threshold=threshold is None or bool(threshold),
            vector_weight=vector_weight,
            text_weight=text_weight,
            rrf_k=settings.rrf_k,
            stages={k: value for k, value in stages.items() if value is not None},
            kinds=kinds,
            tags=tags,
            since=since,
            until=until,
            now=now,
            namespace=namespace,
            explain=explain,
            raw=raw,
            snippets=snippets,
            notes=notes,
        )

    @property
    def wants_vectors(self) -> bool:
        """Whether the search may use an embedder (every mode but lexical)."""
        return self.mode != "lexical"

    def mode_for(self, has_embedder: bool) -> str:
        """The mode to run: ``auto`` is hybrid with an embedder, else lexical."""
        if self.mode == "auto":
            return "hybrid" if has_embedder else "lexical"
        return self.mode


@dataclass(frozen=True, slots=True)
class RecallOptions:
    """One recall's budget, memory count and token counter (a name or a function)."""

    budget: int
    most: int
    token_counter: str | Callable[[str], int]

    @classmethod
    def of(
        cls,
        settings: Settings,
        budget_tokens: int | None = None,
        max_memories: int | None = None,
        token_counter: str | Callable[[str], int] | None = None,
    ) -> RecallOptions:
        budget = settings.recall_budget if budget_tokens is None else budget_tokens
        most = settings.recall_max if max_memories is None else max_memories
        budget, most = check_count("budget_tokens", budget, 1), check_count("max_memories", most, 1)
        counter = token_counter or settings.token_counter
        if not callable(counter) and (
            not isinstance(counter, str) or counter not in TOKEN_COUNTERS
        ):
            raise InvalidInput(
                f"token_counter must be one of {', '.join(TOKEN_COUNTERS)} or a function"
            )
        return cls(budget, most, counter)

    @property
    def candidates(self) -> int:
        """How many ranked memories the search behind a recall returns to choose from."""
        return min(MAX_SEARCH_LIMIT, max(RECALL_CANDIDATES, 4 * self.most))
