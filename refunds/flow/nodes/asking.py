"""Asking the customer (flow version 7): a review answered "ask" sends the reviewer's question
once through the outbox (`ask_customer`), then waits on the customer (`await_reply`, an
interrupt resumed by their reply, recorded as a Decision like a reviewer's answer), then the
review asks again (`approve`, a new interrupt) with the reply quoted. Nothing before interrupt()
has an effect: `await_reply` runs again from the top on resume."""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command, Send, interrupt

from refunds.flow.nodes.charge import send_charges
from refunds.flow.nodes.messages import deliver, language_of
from refunds.flow.state import (
    Asking,
    Collaborators,
    CustomerWait,
    RefundState,
    Reply,
    ReviewAnswer,
)
from refunds.flow.words import dollars

QUOTE_CHARS = 300  # of a reply, in the thread's notes; the whole reply is in `replies`


def ask_key(ticket_key: str, decision_id: int) -> str:
    """The question email's outbox key: one email per ask (its Decision), whatever re-runs."""
    return f"{ticket_key}:ask:{decision_id}"


def asked(state: RefundState, answer: ReviewAnswer) -> RefundState:
    """`approve`'s update for an answer "ask": the question to send, nothing decided."""
    question = (answer.get("reason") or "").strip()
    if not question:
        raise ValueError("a question to the customer needs its words")
    who = answer.get("reviewer") or "a reviewer"
    asking: Asking = {
        "question": question,
        "asked_by": who,
        "decision_id": int(answer.get("decision_id") or 0),
    }
    return {
        "decision": answer,
        "asking": asking,
        "notes": [f"{who} asked the customer: {_short(question)}"],
        "trail": ["ask"],
    }


def after_review(state: RefundState) -> list[Send] | Literal["ask_customer", "email", "notify"]:
    """The review's way out: a question to send, else the charges (or the email)."""
    if state.get("asking"):
        return "ask_customer"
    return send_charges(state)


def ask_customer(
    state: RefundState, runtime: Runtime[Collaborators]
) -> Command[Literal["await_reply", "approve"]]:
    """Send the question once (its key is the ask's); the reply address is the outbox's to give
    (it carries the question's token). A refused address sends the review back, saying so."""
    asking = state["asking"]
    assert asking is not None  # after_review routes here only with a question
    order = state["order"]
    why = deliver(
        runtime,
        key=ask_key(state["ticket_key"], asking["decision_id"]),
        to=order["customer_email"],
        kind="question",
        facts={
            "customer_name": order["customer_name"],
            "orders": list(state.get("order_numbers") or [order["number"]]),
            "question": asking["question"],
        },
        language=language_of(state),
    )
    if why:
        return Command(
            update={
                "asking": None,
                "notes": [f"The question could not be sent ({why}): back to the review."],
                "trail": ["ask_failed"],
            },
            goto="approve",
        )
    return Command(
        update={
            "notes": [f"Question sent to {order['customer_email']}; waiting on their reply."],
            "trail": ["ask_customer"],
        },
        goto="await_reply",
    )


def customer_wait(state: RefundState) -> CustomerWait:
    """The wait's payload: the question, who asked, and whose queue the review comes back to."""
    asking = state["asking"]
    assert asking is not None
    return {
        "kind": "customer",
        "question": asking["question"],
        "asked_by": asking["asked_by"],
        "ask_id": asking["decision_id"],
        "required_role": state["required_role"],
        "amount_cents": state["amount_cents"],
        "order": state["order"],
        "description": (
            f"**Waiting on the customer** ({state['order']['customer_email']}) for the refund of "
            f"{dollars(state['amount_cents'])}. {asking['asked_by']} asked: {asking['question']}"
        ),
    }


def await_reply(state: RefundState) -> RefundState:
    # This node runs again from the top on resume: nothing before interrupt() may have an effect.
    answer: ReviewAnswer = interrupt(customer_wait(state))
    if answer.get("answer") not in ("reply", "no_reply"):
        raise ValueError(f"the wait on the customer takes their reply, got {answer!r}")
    asking = state["asking"]
    assert asking is not None
    text = (answer.get("reason") or "").strip()
    reply: Reply = {"question": asking["question"], "asked_by": asking["asked_by"], "reply": text}
    note = f"The customer replied: {_short(text)}"
    if answer["answer"] == "no_reply":  # the wait's timer gave up: the review decides without
        reply["no_reply"] = True
        note = "No reply from the customer: the review is back without one."
    return {
        # The reply is the thread's last answer: a crash after it landed is noticed as applied.
        "decision": answer,
        "asking": None,
        "replies": [*(state.get("replies") or []), reply],
        "notes": [note],
        "trail": ["no_reply" if reply.get("no_reply") else "reply"],
    }


def _short(text: str) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= QUOTE_CHARS else one_line[: QUOTE_CHARS - 1] + "…"
