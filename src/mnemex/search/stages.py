"""The ranking stages after fusion, by name: one function and one entry in :data:`STAGES` each.

A stage is a function from the candidates that passed the threshold
(:class:`Candidates`: their order and scores, what the engine holds of them) and
its value (the per-call option if the caller gave one, else its setting) to a
:class:`Step`: new scores, and what it did to each memory for ``explain``. Its
entry (:class:`Stage`) names the setting that switches it on (a bool, or a weight
where 0 is off), the option of ``Store.search`` and ``mnemex search`` that
overrides it for one call, and the line ``--explain`` prints of its trace. The
math is in :mod:`mnemex.search.rank`.

Stages that rescore run in the order they were registered (thread, thread_best,
decay, confidence, then any added), then the candidates are sorted by score,
then the stages that choose the order themselves (MMR). A new stage::

    def pinned_boost(c: Candidates, weight: float) -> Step:
        boosted = {s: c.scores[s] * (1 + weight) if c.meta[s][2] else c.scores[s] for s in c.order}
        return Step(boosted, {s: {"stage": "pinned_boost", "weight": weight} for s in c.order})

    register("pinned_boost", Stage(pinned_boost, setting="pinned_boost", default=0.0,
                                   option="pinned_boost", help="Rank pinned memories higher"))

adds the setting ``pinned_boost`` (a config file, its variable, an argument), the
argument ``Store.search(..., pinned_boost=0.5)`` and the option
``mnemex search --pinned-boost 0.5``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from mnemex import config
from mnemex.errors import InvalidInput
from mnemex.search import rank
from mnemex.text import parse_stored_time, utcnow

if TYPE_CHECKING:
    import numpy as np

    from mnemex.config import Settings
    from mnemex.request import Neighbours, Request

# What a stage did to each memory, for explain: {"stage": name, ...}.
Trace = dict[int, dict[str, Any]]

if TYPE_CHECKING:  # typing only: a hook process imports this module, and a Protocol costs

    class Reads(Protocol):
        """What a stage may read of the store (the pipeline's ``Retriever`` offers it)."""

        settings: Settings

        def meta(self, seqs: list[int]) -> dict[int, tuple[Any, ...]]: ...
        def neighbours(self, seqs: list[int]) -> dict[int, Neighbours]: ...
        def vectors_of(self, seqs: list[int], dim: int) -> dict[int, Any]: ...
        def contents(self, seqs: list[int]) -> list[tuple[int, str]]: ...


class Candidates:
    """What a stage reads: the candidates (fused order, or by score for a stage that
    picks), their scores now and after fusion, each one's ``meta`` (created at,
    confidence, pinned, source), the request, and the store (``engine``)."""

    __slots__ = (
        "_neighbours",
        "engine",
        "fused",
        "meta",
        "order",
        "query_vector",
        "request",
        "scores",
    )

    def __init__(
        self,
        engine: Reads,
        request: Request,
        order: list[int],
        scores: dict[int, float],
        meta: dict[int, tuple[Any, ...]],
        query_vector: np.ndarray | None,
    ) -> None:
        self.engine, self.request, self.meta, self.query_vector = (
            engine,
            request,
            meta,
            query_vector,
        )
        self.order, self.scores, self.fused = order, scores, scores
        self._neighbours: dict[int, Neighbours] | None = None

    def setting(self, name: str) -> Any:
        """A setting of the store searched (a stage's further parameters)."""
        return self.engine.settings.value(name)

    def neighbours(self) -> dict[int, Neighbours]:
        """The thread neighbours of the candidates with a source (read once per search)."""
        if self._neighbours is None:
            threaded = [seq for seq in self.order if self.meta[seq][3]]
            self._neighbours = self.engine.neighbours(threaded) if len(threaded) > 1 else {}
        return self._neighbours


class Step:
    """What a stage returns: the scores, its trace, and for a stage that picks, the order.
    (Plain classes with slots here and in :class:`Stage`: cheaper to define than named
    tuples, and this module is on the hook's path.)"""

    __slots__ = ("order", "scores", "trace")

    def __init__(
        self, scores: dict[int, float], trace: Trace, order: list[int] | None = None
    ) -> None:
        self.scores, self.trace, self.order = scores, trace, order


class Stage:
    """A ranking stage: its function, the setting that switches it on (a bool, or a weight
    where 0 is off), the option that overrides it for one search, its help, its explain line.

    ``default`` is the setting's default when :class:`~mnemex.config.Settings` has no
    field of that name (a stage added from outside); ``params`` are further settings it
    reads, named in its option's help; ``picks``: it chooses the order (after the stages
    that rescore); ``cli``: ``mnemex search`` and ``mnemex recall`` have its option.
    """

    __slots__ = (
        "cli",
        "default",
        "explain",
        "help",
        "option",
        "params",
        "picks",
        "run",
        "setting",
    )

    def __init__(
        self,
        run: Callable[[Candidates, Any], Step],
        setting: str,
        *,
        option: str | None = None,
        help: str = "",
        explain: Callable[[dict[str, Any]], str] | None = None,
        default: bool | float | None = None,
        params: tuple[str, ...] = (),
        picks: bool = False,
        cli: bool = True,
    ) -> None:
        self.run, self.setting, self.option, self.help = run, setting, option, help
        self.explain, self.default, self.params = explain, default, params
        self.picks, self.cli = picks, cli


STAGES: dict[str, Stage] = {}
"""The ranking stages by name, in the order they run (stages that pick after the rest)."""


def register(name: str, stage: Stage) -> Stage:
    """Add ``stage`` as ``name`` (its setting then reads from a config file, a variable or
    an argument like any other); returns it. A name or option taken raises ValueError."""
    taken = {s.option for s in STAGES.values() if s.option}
    if name in STAGES or (stage.option is not None and stage.option in taken):
        raise ValueError(f"a ranking stage {name!r} (or option {stage.option!r}) exists")
    if stage.default is not None:
        config.add_setting(stage.setting, stage.default)
    config.setting_default(stage.setting)  # KeyError: neither a setting nor a default
    STAGES[name] = stage
    return stage


def unregister(name: str) -> None:
    """Remove the stage ``name`` (and the setting it added)."""
    stage = STAGES.pop(name)
    if stage.default is not None:
        config.ADDED.pop(stage.setting, None)


def options() -> dict[str, Stage]:
    """The stages that have a per-call option, by option name."""
    return {s.option: s for s in STAGES.values() if s.option is not None}


def switches(settings: Settings, given: Mapping[str, Any]) -> dict[str, Any]:
    """Each stage's value for one search: its option in ``given`` (``None``: not given),
    else its setting; TypeError for an option no stage has."""
    if unknown := sorted(set(given) - set(options())):
        raise TypeError(f"unknown search option(s): {', '.join(unknown)}")
    out = {}
    for name, stage in STAGES.items():
        value = given.get(stage.option) if stage.option is not None else None
        out[name] = settings.value(stage.setting) if value is None else _checked(stage, value)
    return out


def _checked(stage: Stage, value: Any) -> bool | float:
    """A stage's option as its setting's type: a bool, or a number."""
    if isinstance(config.setting_default(stage.setting), bool):
        return bool(value)
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise InvalidInput(f"{stage.option} must be a number, got {value!r}")


def explain_line(entry: dict[str, Any]) -> str:
    """The ``--explain`` text of a stage's trace entry (its name when it has none)."""
    stage = STAGES.get(entry["stage"])
    return entry["stage"] if stage is None or stage.explain is None else stage.explain(entry)


def rerank(
    engine: Reads,
    request: Request,
    order: list[int],
    scores: dict[int, float],
    query_vector: np.ndarray | None,
) -> tuple[dict[int, float], list[int], dict[int, list[dict[str, Any]]]]:
    """The stages switched on in ``request.ranking`` over the candidates that passed the
    threshold: their scores, their order and what each stage did to each."""
    on = request.ranking.stages
    meta = engine.meta(order)
    order = [seq for seq in order if seq in meta]  # deleted meanwhile
    scores = {seq: scores[seq] for seq in order}
    c = Candidates(engine, request, order, scores, meta, query_vector)
    trace: dict[int, list[dict[str, Any]]] = {seq: [] for seq in order}
    for picks in (False, True):
        if picks:
            c.order = rank.ranked(c.scores, c.order)
        for name, stage in STAGES.items():
            if stage.picks == picks and on.get(name):
                step = stage.run(c, on[name])
                c.scores, c.order = step.scores, c.order if step.order is None else step.order
                for seq, entry in step.trace.items():
                    trace[seq].append(entry)
    return c.scores, c.order, trace


# -- the stages ----------------------------------------------------------------------


def thread(c: Candidates, weight: float) -> Step:
    """What a memory's neighbours in its thread lend it (:func:`rank.thread_context`)."""
    near = {seq: (previous, following) for seq, (previous, following, _) in c.neighbours().items()}
    return Step(*rank.thread_context(c.scores, near, weight))


def thread_best(c: Candidates, weight: float) -> Step:
    """The pull of a memory's thread's best score before the ranking stages
    (:func:`rank.thread_best`)."""
    threads = {seq: found for seq, (_, _, found) in c.neighbours().items()}
    return Step(*rank.thread_best(c.fused, c.scores, threads, weight))


def decay(c: Candidates, on: bool) -> Step:
    """Each score decayed by its memory's age (:func:`rank.decay`)."""
    made = {s: (parse_stored_time(c.meta[s][0]), *c.meta[s][2:]) for s in c.order}
    now: datetime = c.request.now or utcnow()
    return Step(*rank.decay(c.scores, made, now, c.setting("half_life_days")))


def confidence(c: Candidates, on: bool) -> Step:
    """Each score times its memory's confidence."""
    confidences = {seq: float(c.meta[seq][1]) for seq in c.order}
    trace = {seq: {"stage": "confidence", "factor": confidences[seq]} for seq in c.order}
    return Step(rank.apply_confidence(c.scores, confidences), trace)


def mmr(c: Candidates, on: bool) -> Step:
    """Maximal marginal relevance over the candidates ranked by score (:func:`rank.mmr`)."""
    if len(c.order) <= 1:
        return Step(c.scores, {})
    lam = c.setting("mmr_lambda")
    similarity, name = _similarity(c)
    picked = rank.mmr(c.order, c.scores, similarity, c.request.limit, lam)
    trace = {
        seq: {"stage": "mmr", "similarity": name, "lambda": lam, "pick": position}
        for position, seq in enumerate(picked, start=1)
    }
    chosen = set(picked)
    return Step(c.scores, trace, picked + [seq for seq in c.order if seq not in chosen])


def _similarity(c: Candidates) -> tuple[Callable[[int, int], float], str]:
    """Cosine between stored vectors when every candidate has one, else Jaccard over words."""
    query_vector, order = c.query_vector, c.order
    if c.setting("mmr_similarity") != "jaccard" and query_vector is not None:
        vectors = c.engine.vectors_of(order, int(query_vector.shape[0]))
        if len(vectors) == len(order):
            cache: dict[tuple[int, int], float] = {}

            def cosine(a: int, b: int) -> float:
                key = (a, b) if a < b else (b, a)
                if key not in cache:
                    cache[key] = float(vectors[a] @ vectors[b])
                return cache[key]

            return cosine, "cosine"
    words = {seq: rank.word_set(content) for seq, content in c.engine.contents(order)}
    return (
        lambda a, b: rank.jaccard(words.get(a, frozenset()), words.get(b, frozenset()))
    ), "jaccard"


def _decay_line(entry: dict[str, Any]) -> str:
    if "exempt" in entry:
        return f"no decay ({entry['exempt']})"
    return f"decay x{entry['factor']:.3f} ({entry['age_days']:.1f}d)"


register("thread", Stage(thread, setting="thread_context"))
register("thread_best", Stage(thread_best, setting="thread_best"))
register(
    "decay",
    Stage(
        decay,
        setting="decay",
        option="decay",
        help="Rank older memories lower",
        explain=_decay_line,
        params=("half_life_days",),
    ),
)
register(
    "confidence",
    Stage(
        confidence,
        setting="confidence_weighting",
        option="confidence",
        explain=lambda e: f"confidence x{e['factor']:.2f}",
        cli=False,
    ),
)
register(
    "mmr",
    Stage(
        mmr,
        setting="mmr",
        option="mmr",
        help="Prefer memories that do not repeat each other",
        explain=lambda e: f"mmr pick {e['pick']} ({e['similarity']}, lambda {e['lambda']:g})",
        picks=True,
    ),
)
