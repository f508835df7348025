"""LoCoMo as an agent's markdown workspace (``mnemex eval locomo --granularity workspace``).

Each conversation becomes a folder ``memory/`` with one ``YYYY-MM-DD.md`` file
a day, each session under its own heading, one line a turn::

    # 2023-05-08

    ## 1:56 pm

    - Caroline: Hey Mel! Good to see you!
    - Melanie: Hey Caroline! ...

The folder is synced into the conversation's namespace (so turns are chunked
as any workspace is). The file and line of every turn are recorded when it is
written, so a chunk's ``path:start-end`` says which turns it holds. Beside the
ranking measures, a question is *found within a recall* when the whole text of
an evidence turn is in the ``recall`` block (the default 500 tokens), and the same
check runs on a plain top-k block cut at the same budget: the hits best first,
rendered as recall renders them, the text cut at the budget.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

from mnemex.eval.data import LocomoData, Question, Turn
from mnemex.eval.runner import Spec
from mnemex.models import Hit
from mnemex.progress import progress_bar
from mnemex.records import dataclass
from mnemex.search.rank import age_days
from mnemex.search.recall import HEADER, format_age, render, render_line
from mnemex.store import Store
from mnemex.text import utcnow

RECALL_BUDGET = 500  # tokens, counted by recall's default counter
TOPK_CUT_HITS = 5  # hits in the plain block cut at the budget, as recall's default maximum


@dataclass(frozen=True, slots=True)
class Written:
    """One conversation written as a workspace: where each turn is, by turn id."""

    namespace: str
    folder: Path
    lines: dict[str, tuple[str, int]]  # turn id -> (path relative to the folder, line)
    text: dict[str, str]  # turn id -> the line's text after ``- ``


def turn_line(turn: Turn) -> str:
    """A turn's line in its day file (one line, whatever its text holds)."""
    return "- " + " ".join(turn.content.split())


def write_workspace(namespace: str, turns: Sequence[Turn], folder: Path) -> Written:
    """Write ``turns`` (one conversation, in order) as ``folder/memory/YYYY-MM-DD.md``."""
    sessions: dict[str, list[Turn]] = defaultdict(list)
    for turn in turns:
        sessions[turn.id.rsplit(":", 2)[-2]].append(turn)  # "ns:D3:7" -> "D3"
    days: dict[str, list[list[Turn]]] = defaultdict(list)
    for session in sessions.values():
        days[session[0].created_at.strftime("%Y-%m-%d")].append(session)
    where: dict[str, tuple[str, int]] = {}
    text: dict[str, str] = {}
    (folder / "memory").mkdir(parents=True, exist_ok=True)
    for day in sorted(days):
        path = f"memory/{day}.md"
        out = [f"# {day}", ""]
        for session in sorted(days[day], key=lambda s: s[0].created_at):
            clock = session[0].created_at.strftime("%I:%M %p").lstrip("0").lower()
            out += [f"## {clock}", ""]
            for turn in session:
                out.append(turn_line(turn))
                where[turn.id] = (path, len(out))
                text[turn.id] = out[-1][2:]
            out.append("")
        (folder / path).write_text("\n".join(out), encoding="utf-8")
    return Written(namespace, folder, where, text)


def found_in_chunks(
    locations: Iterable[tuple[str, int, int] | None], evidence: Iterable[tuple[str, int]]
) -> bool:
    """Whether a chunk ``(path, start_line, end_line)`` holds one of the evidence lines."""
    lines = set(evidence)
    return any(
        place is not None and any(p == place[0] and place[1] <= n <= place[2] for p, n in lines)
        for place in locations
    )


def found_in_text(block: str, evidence: Iterable[str]) -> bool:
    """Whether the whole text of an evidence turn is in ``block`` (whitespace ignored)."""
    flat = " ".join(block.split())
    return any(" ".join(e.split()) in flat for e in evidence)


def cut_block(lines: Sequence[str], budget: int) -> str:
    """The block of ``lines`` (best first) cut at ``budget`` tokens (``len / 4``)."""
    return render(lines)[: 4 * budget]


def blocks_found(
    store: Store, q: Question, ws: Written, spec: Spec, hits: Sequence[Hit]
) -> tuple[str, dict[str, bool]]:
    """Whether the evidence is within a plain top-k block cut at the budget (``top-k
    cut``) and within recall's block (``recall``); the mode recall's search used."""
    evidence_text = [ws.text[e] for e in q.evidence if e in ws.text]
    top = hits[:TOPK_CUT_HITS]
    stored = store.get([h.id for h in top], namespace=q.namespace).memories if top else ()
    got = {m.id: m for m in stored}
    now = utcnow()
    lines = [
        render_line(m.kind, m.content, m.confidence, format_age(age_days(m.created_at, now)))
        for m in (got[h.id] for h in top if h.id in got)
    ]
    found = {"top-k cut": found_in_text(cut_block(lines, RECALL_BUDGET), evidence_text)}
    recalled = store.recall(q.text, RECALL_BUDGET, mode=spec.mode, namespace=q.namespace)
    found["recall"] = found_in_text(recalled.markdown.removeprefix(HEADER), evidence_text)
    return recalled.mode_used, found


def write_all(data: LocomoData, root: Path) -> dict[str, Written]:
    """Each conversation of ``data`` written under ``root/<namespace>``."""
    by_ns: dict[str, list[Turn]] = defaultdict(list)
    for turn in data.turns:
        by_ns[turn.namespace].append(turn)
    return {ns: write_workspace(ns, turns, root / ns) for ns, turns in by_ns.items()}


def sync_all(store: Store, written: dict[str, Written], embed: bool, progress: bool) -> int:
    """Sync each written conversation into its namespace; the chunks indexed."""
    chunks = 0
    with progress_bar(len(written), "syncing", progress) as advance:
        for ns, ws in written.items():
            chunks += store.sync(ws.folder, namespace=ns, embed=embed).chunks
            advance(1)
    return chunks
