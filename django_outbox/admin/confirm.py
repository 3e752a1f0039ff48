"""Requeue and give up from the admin: a confirmation page first, then an honest report.

The page counts the selection by state and says what each state will undergo;
delivered deliveries are requeued only if the box asking for it is ticked.  Acting
goes through :mod:`django_outbox.upkeep.bulk` (the package's own functions), tells how
many of the selection changed and why the others did not, at the level that
matches (a warning when nothing changed), and writes one ``LogEntry``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.contrib.admin import AdminSite, helpers
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from django_outbox.models import Delivery, DeliveryState
from django_outbox.upkeep import bulk


@dataclass(frozen=True)
class Change:
    """A requeue or a give-up, as the confirmation page and the report word it."""

    verb: str
    done: str
    passive: str
    #: States it changes.
    takes: tuple[str, ...]
    #: States it changes only when the box is ticked.
    optional: tuple[str, ...]
    #: Why it leaves the other states alone.
    other_reason: str

    def act(self, selection: QuerySet[Delivery], states: Sequence[str], user: Any) -> int:
        """Change the deliveries of ``selection`` in ``states``; how many changed."""
        if self is REQUEUE:
            return bulk.requeue(selection, states)
        return bulk.give_up(selection, f"given up by {user} in the admin", states)


REQUEUE = Change(
    "requeue",
    "Requeued",
    "requeued",
    bulk.REQUEUED_STATES,
    ("delivered",),
    "still live: queued, waiting or being sent",
)
GIVE_UP = Change("give up on", "Gave up on", "given up on", bulk.LIVE, (), "already finished")


def change_paths(
    site: AdminSite, route: str, view: Callable[..., Any], name: str
) -> list[URLPattern]:
    """The URLs of ``view`` requeueing (``route`` + ``requeue/``, named ``name_requeue``)
    and giving up (``route`` + ``give-up/``, ``name_give_up``): it is passed ``change``."""
    return [
        path(f"{route}{slug}/", site.admin_view(view), {"change": change}, name=f"{name}_{key}")
        for change, slug, key in ((REQUEUE, "requeue", "requeue"), (GIVE_UP, "give-up", "give_up"))
    ]


def action_fields(request: HttpRequest) -> list[tuple[str, str]]:
    """The fields of a change list's action form that select the same rows again: the
    action, the rows ticked, and whether every row the filters match was chosen."""
    return [
        ("action", request.POST.get("action", "")),
        ("index", "0"),
        ("select_across", "1" if request.POST.get("select_across") == "1" else "0"),
        *(
            (helpers.ACTION_CHECKBOX_NAME, pk)
            for pk in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
        ),
    ]


def log(request: HttpRequest, model: type[Model], pk: object, name: str, message: str) -> None:
    """One entry in the admin's log: ``message`` about ``name`` (the object ``pk`` of
    ``model`` when there is one, else nothing to link to)."""
    LogEntry.objects.create(
        user_id=int(request.user.pk or 0),
        content_type_id=ContentType.objects.get_for_model(model).pk,
        object_id=None if pk is None else str(pk),
        object_repr=name[:200],
        action_flag=CHANGE,
        change_message=message,
    )


def confirm_or_act(
    request: HttpRequest,
    context: dict[str, Any],
    change: Change,
    selection: QuerySet[Delivery],
    *,
    described: str,
    hidden: Sequence[tuple[str, str]],
    back: str,
    one: object = None,
) -> HttpResponse | None:
    """The confirmation page of ``change`` on ``selection``; or, once confirmed (a POST
    with ``confirmed=yes``), the change made, reported and logged, and ``None`` for the
    caller to redirect.

    ``context`` is the admin site's (``each_context``), ``described`` says what was
    selected, ``hidden`` are the fields that select it again, ``back`` where "No" goes,
    and ``one`` the id of the one delivery selected, if so, for the log entry to name it.
    """
    counts = bulk.count_by_state(selection)
    if request.method == "POST" and request.POST.get("confirmed") == "yes":
        asked = change.optional if request.POST.get("include") == "yes" else ()
        states = (*change.takes, *asked)
        changed = change.act(selection, states, request.user)
        text = report(change, counts, states, changed)
        messages.add_message(request, messages.SUCCESS if changed else messages.WARNING, text)
        log(request, Delivery, one, f"{change.verb} {described}", text)
        return None
    rows = [
        {
            "state": state,
            "count": counts[state],
            "changes": state in change.takes,
            "optional": state in change.optional,
            "reason": "" if state in change.takes else change.other_reason,
        }
        for state in DeliveryState.values
        if counts.get(state)
    ]
    changing = sum(counts[state] for state in change.takes if state in counts)
    optional = sum(counts[state] for state in change.optional if state in counts)
    return TemplateResponse(
        request,
        "admin/django_outbox/confirm.html",
        {
            **context,
            "title": f"{change.verb.capitalize()} {changing:,} of {sum(counts.values()):,} "
            "selected deliveries?",
            "change": change,
            "described": described,
            "rows": rows,
            "changing": changing,
            "optional": optional,
            "hidden": hidden,
            "back": back,
        },
    )


def report(change: Change, counts: dict[str, int], states: Sequence[str], changed: int) -> str:
    """What ``change`` did to a selection (``counts`` by state, before): how many of it
    changed, and why the others did not."""
    selected = sum(counts.values())
    left = [
        f"{counts[state]:,} {state} ("
        + ("not asked for" if state in change.optional else change.other_reason)
        + ")"
        for state in DeliveryState.values
        if counts.get(state) and state not in states
    ]
    if changed:
        text = f"{change.done} {changed:,} of the {selected:,} selected deliveries"
    else:
        text = f"Nothing was {change.passive} (of the {selected:,} selected deliveries)"
    return text + (f"; left alone: {', '.join(left)}." if left else ".")
