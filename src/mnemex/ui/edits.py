"""The inspector's writes: a memory's tags, kind, confidence and pin; forgetting it (asked
first) and bringing it back while the page session lasts. Never routed with
``--read-only``; the guard checks each one's origin and CSRF token first."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from mnemex.errors import InvalidInput
from mnemex.ui.views import memory_address

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from mnemex.models import Memory
    from mnemex.ui.inspector import Inspector


def _form(request: Request) -> dict[str, str]:
    """The write's URL-encoded fields (the last of repeated ones)."""
    fields = parse_qs(getattr(request.state, "form", ""), keep_blank_values=True)
    return {key: values[-1] for key, values in fields.items()}


def _one(ui: Inspector, ident: str, namespace: str) -> Memory:
    found = ui.store.get([ident], namespace=namespace).memories
    if not found:
        raise InvalidInput(
            f"no memory {ident} in namespace {namespace!r}: it was forgotten or moved; reload"
        )
    return found[0]


def _confidence(text: str) -> float | str:
    """A number, or the text as given: the store refuses it with what to send instead."""
    try:
        return float(text)
    except ValueError:
        return text


def edit(ui: Inspector, request: Request) -> Response:
    """POST ``/memory/edit?id=...&ns=...``: set the tags, kind, confidence and pin."""
    ident, namespace = memory_address(request)
    form = _form(request)
    given: dict[str, Any] = {}
    if "tags" in form:
        given["tags"] = [t.strip() for t in form["tags"].split(",") if t.strip()]
    if "kind" in form:
        given["kind"] = form["kind"].strip()
    if "confidence" in form:
        given["confidence"] = _confidence(form["confidence"].strip())
    if "pinned_shown" in form:  # the form had the box: unchecked sends no "pinned"
        given["pinned"] = form.get("pinned") == "on"
    if not given:
        raise InvalidInput("nothing to change: send tags, kind, confidence or pinned")
    try:
        memory = ui.store.update(ident, namespace=namespace, **given)
    except InvalidInput as exc:  # said above the form, which shows the memory as stored
        stored = _one(ui, ident, namespace)
        return ui.render(request, "_fields.html", status=400, m=stored, error=str(exc))
    if "kind" in given:
        ui.kinds(fresh=True)
    return ui.render(request, "_fields.html", m=memory, saved=True)


def confirm_forget(ui: Inspector, request: Request) -> Response:
    """GET ``/memory/forget?id=...&ns=...``: ask before forgetting."""
    ident, namespace = memory_address(request)
    memory = _one(ui, ident, namespace)
    if ui.read_only:
        raise InvalidInput("this inspector is read-only (mnemex ui --read-only)")
    if request.query_params.get("cancel"):
        return ui.render(request, "_forget_button.html", m=memory)
    return ui.render(request, "_confirm_forget.html", m=memory)


def forget(ui: Inspector, request: Request) -> Response:
    """POST ``/memory/forget?id=...&ns=...``: forget the memory, keeping it to bring back
    while this page session lasts."""
    ident, namespace = memory_address(request)
    memory = _one(ui, ident, namespace)
    if memory.location is not None:
        raise InvalidInput(
            f"memory {ident} is a chunk of {memory.location.label}: its file holds it, so "
            "remove the lines from the file (the next sync or search drops the chunk)"
        )
    ui.store.forget([ident], namespace=namespace)
    ui.forgot(request.state.session, memory)
    ui.kinds(fresh=True)
    return ui.render(request, "_forgotten.html", m=memory)


def undo(ui: Inspector, request: Request) -> Response:
    """POST ``/memory/undo?id=...&ns=...``: bring back a memory this page session forgot,
    with its id, time, fields and metadata (its vectors are made again)."""
    ident, namespace = memory_address(request)
    memory = ui.take_back(request.state.session, namespace, ident)
    if memory is None:
        raise InvalidInput(
            f"memory {ident} was not forgotten in this page session: nothing to bring back"
        )
    item = {
        "id": memory.id,
        "content": memory.content,
        "kind": memory.kind,
        "tags": list(memory.tags),
        "source": memory.source,
        "confidence": memory.confidence,
        "pinned": memory.pinned,
        "created_at": memory.created_at,
        "metadata": memory.metadata,
    }
    try:
        ui.store.add_many([item], namespace=namespace)
    except Exception:
        ui.forgot(request.state.session, memory)  # still to bring back, once the cause is gone
        raise
    ui.kinds(fresh=True)
    return ui.render(request, "_restored.html", m=memory)
