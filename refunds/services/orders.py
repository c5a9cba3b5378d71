"""Orders in from the shop, upserted by number. An order the ledger holds money for is never
changed, nor one with an open ticket; a number twice in one input is refused in every copy."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Max, Sum

from core import sql
from refunds import currencies
from refunds.models import ORDER_NUMBER_MAX, Charge, Order, OrderLine, Ticket, TicketOrder
from refunds.order_in import LineIn, LineRefused, OrderIn

# What an order holds: sent together or not at all (an order sent without them keeps the desk's).
HOLDS = ("total_cents", "paid_cents", "lines")
CREATED, UPDATED, UNCHANGED, REFUSED = "created", "updated", "unchanged", "refused"
BATCH = 1000
# What an import may set on an order that exists (everything but its number and its lines).
CHANGEABLE = [name for name in OrderIn.model_fields if name not in ("number", *HOLDS)]
UPDATE_ORDER = (
    f"UPDATE {Order._meta.db_table} SET "
    + ", ".join(f"{name} = %s" for name in CHANGEABLE)  # each column is named after its field
    + " WHERE id = %s"
)
UPDATE_SUMS = f"UPDATE {Order._meta.db_table} SET total_cents = %s, paid_cents = %s WHERE id = %s"
LINE_COLUMNS = list(LineIn.model_fields)

# An order in: its line, the number it gave, and the order read or why it was refused.
Read = tuple[int, str, OrderIn | LineRefused]


@dataclass(frozen=True)
class Outcome:
    line: int
    order_number: str
    result: str  # created, updated, unchanged, refused
    reason: str = ""
    field: str = ""  # a refusal's value within the order (LineRefused.field)


def order_read(line: int, raw: Any, **how: Any) -> Read:
    """One order as a door sent it -> Read; `how` is OrderIn.read's."""
    said = raw.get("order_number") if isinstance(raw, Mapping) else None
    number = str(said)[:ORDER_NUMBER_MAX] if isinstance(said, str | int) else ""
    try:
        return line, number, OrderIn.read(raw, **how)
    except LineRefused as exc:
        return line, number, exc


def orders_upsert(
    read: Iterable[Read],
    *,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> list[Outcome]:
    """Create or update orders by number; one Outcome per order read, in line order."""
    read = list(read)
    outcomes = _refuse_duplicates(read)
    good = [(line, o) for line, _, o in read if isinstance(o, OrderIn) and line not in outcomes]
    for start in range(0, len(good), BATCH):
        batch = good[start : start + BATCH]
        for outcome in _upsert_batch(batch, dry_run=dry_run):
            outcomes[outcome.line] = outcome
        if progress:
            progress(start + len(batch), len(good))
    for line, said, order in read:
        if isinstance(order, LineRefused):
            outcomes[line] = Outcome(line, said, REFUSED, str(order), order.field)
    return [outcomes[line] for line, _, _ in read]


def _refuse_duplicates(read: Sequence[Read]) -> dict[int, Outcome]:
    seen: dict[str, list[int]] = defaultdict(list)
    for line, _, order in read:
        if isinstance(order, OrderIn):
            seen[order.number].append(line)
    return {
        line: Outcome(
            line,
            number,
            REFUSED,
            f"duplicate order number {number} in this input "
            f"(lines {', '.join(map(str, where))}); none of them taken",
        )
        for number, where in seen.items()
        if len(where) > 1
        for line in where
    }


def _upsert_batch(batch: list[tuple[int, OrderIn]], *, dry_run: bool) -> list[Outcome]:
    # The race of two imports creating one order: the loser's INSERT meets the UNIQUE number.
    for attempt in range(3):
        try:
            with transaction.atomic():
                return _write_batch(batch, dry_run=dry_run)
        except IntegrityError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _differs(current: Order, order: OrderIn, lines: list[dict]) -> list[str]:
    """The fields in which the order sent differs from the one stored (its lines, when sent)."""
    differs = [n for n in CHANGEABLE if getattr(current, n) != getattr(order, n)]
    if order.lines is not None:
        sent = order.model_dump(include=set(HOLDS))
        held_now = {**{n: getattr(current, n) for n in HOLDS[:2]}, "lines": lines}
        differs += [name for name in HOLDS if sent[name] != held_now[name]]
    return differs


def _kept_as_it_is(current: Order, differs: list[str], held: dict, reviewed: dict) -> str:
    """Why an order that differs is not changed ("" when it may change)."""
    if current.erased_at is not None:
        return current.erased_words()
    if current.pk in held:
        money = held[current.pk]
        return (
            f"order {current.number} has "
            f"{currencies.from_minor(money['total'], current.currency)} "
            f"{current.currency} refunded or under way (ticket {money['ticket']}); "
            f"it is never changed ({', '.join(differs)} differ)"
        )
    if current.pk in reviewed:
        return (
            f"order {current.number} has an open refund ticket ({reviewed[current.pk]}), "
            f"whose review and charge use the order as it is; it is not changed "
            f"while the ticket is open ({', '.join(differs)} differ); send it again "
            "once the ticket is finished"
        )
    return ""


def _write_batch(batch: list[tuple[int, OrderIn]], *, dry_run: bool) -> list[Outcome]:
    numbers = [order.number for _, order in batch]
    found = Order.objects.filter(number__in=numbers).order_by("pk")
    if sql.is_postgres():
        # The race with charge_card (FOR UPDATE OF o): a charge sees the old order or the new,
        # and this batch every charge committed before it. SQLite's IMMEDIATE locks it all.
        found = found.select_for_update()
    existing = {order.number: order for order in found}
    ids = [order.pk for order in existing.values()]
    held = {
        row["order_id"]: row
        for row in Charge.objects.filter(order_id__in=ids)
        .holding_balance()
        .values("order_id")
        .annotate(total=Sum("amount_cents"), ticket=Max("ticket_id"))
    }
    # Read after the lock: a ticket opened meanwhile committed before it, or its foreign key's
    # share lock waits for this batch and its lookup reads the order written.
    reviewed = dict(
        TicketOrder.objects.filter(order_id__in=ids, ticket__status__in=Ticket.OPEN)
        .values("order_id")
        .annotate(ticket=Max("ticket_id"))
        .values_list("order_id", "ticket")
    )
    stored: dict[int, list[dict]] = defaultdict(list)
    for row in OrderLine.objects.filter(order_id__in=ids).values("order_id", *LINE_COLUMNS):
        stored[row.pop("order_id")].append(row)
    outcomes, new, changed, resummed = [], [], [], []
    for line, order in batch:
        current = existing.get(order.number)
        if current is None:
            new.append(order)
            outcomes.append(Outcome(line, order.number, CREATED))
            continue
        differs = _differs(current, order, stored[current.pk])
        refusal = _kept_as_it_is(current, differs, held, reviewed)
        if not differs:
            outcomes.append(Outcome(line, order.number, UNCHANGED))
        elif refusal:
            outcomes.append(Outcome(line, order.number, REFUSED, refusal))
        else:
            changed.append([*(getattr(order, name) for name in CHANGEABLE), current.pk])
            if order.lines is not None:
                resummed.append((current.pk, order))
            outcomes.append(Outcome(line, order.number, UPDATED))
    if not dry_run:
        _orders_write(new, changed, resummed)
    return outcomes


def _orders_write(
    new: list[OrderIn], changed: list[list], resummed: list[tuple[int, OrderIn]]
) -> None:
    Order.objects.bulk_create(Order(**order.model_dump(exclude={"lines"})) for order in new)
    if changed:
        # executemany is one round trip (psycopg's pipeline); bulk_update's CASE took 32 s for
        # 10,000 orders on SQLite, and an UPDATE each 49 s for 100,000 on PostgreSQL.
        with connection.cursor() as cursor:
            cursor.executemany(UPDATE_ORDER, changed)
            if resummed:
                cursor.executemany(
                    UPDATE_SUMS, [[o.total_cents, o.paid_cents, pk] for pk, o in resummed]
                )
    _lines_write(new, resummed)


def _lines_write(new: list[OrderIn], resummed: list[tuple[int, OrderIn]]) -> None:
    """The lines of new orders, and the new lines of changed orders in place of their old."""
    with_lines = [order for order in new if order.lines is not None]
    ids = dict(
        Order.objects.filter(number__in=[o.number for o in with_lines]).values_list("number", "pk")
    )
    if resummed:
        OrderLine.objects.filter(order_id__in=[pk for pk, _ in resummed]).delete()
    OrderLine.objects.bulk_create(
        OrderLine(order_id=pk, **line.model_dump())
        for pk, order in [*((ids[o.number], o) for o in with_lines), *resummed]
        for line in order.lines or ()
    )


def counts(outcomes: Iterable[Outcome]) -> dict[str, int]:
    """How many lines were created, updated, unchanged and refused."""
    tally = Counter(outcome.result for outcome in outcomes)
    return {result: tally[result] for result in (CREATED, UPDATED, UNCHANGED, REFUSED)}
