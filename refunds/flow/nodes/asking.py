"""Asking the customer. The waits run again from the top on resume: no effect before interrupt()."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command, Send, interrupt

from refunds.flow.nodes.credit import charges_or_offer
from refunds.flow.nodes.messages import to_customer
from refunds.flow.state import Asking, Collaborators, CustomerWait, RefundState, Reply, ReviewAnswer
from refunds.flow.words import dollars

QUOTE_CHARS = 300  # of a reply, in the thread's notes; the whole reply is in `replies`


def ask_key(ticket_key: str, decision_id: int) -> str:
    """One question email per ask (its Decision), whatever re-runs."""
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


def after_review(
    state: RefundState,
) -> list[Send] | str:
    if state.get("review_error"):
        return "approve"
    if state.get("asking"):
        return "ask_customer"
    if state.get("returning"):
        return "ask_return"
    return charges_or_offer(state)


def ask_customer(
    state: RefundState, runtime: Runtime[Collaborators]
) -> Command[Literal["await_reply", "approve"]]:
    """Send the question once (keyed by the ask); a refused address sends the review back."""
    assert state["asking"] is not None  # after_review routes here only with a question
    to = state["order"]["customer_email"]
    why = _about_the_question(state, runtime, ask_key, "question")
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
            "notes": [f"Question sent to {to}; waiting on their reply."],
            "trail": ["ask_customer"],
        },
        goto="await_reply",
    )


def _about_the_question(
    state: RefundState,
    runtime: Runtime[Collaborators],
    key_of: Callable[[str, int], str],
    kind: str,
) -> str | None:
    """Email the customer once about the question; why it was refused, if so."""
    asking = state["asking"]
    assert asking is not None
    key = key_of(state["ticket_key"], asking["decision_id"])
    facts = {"orders": list(state["order_numbers"]), "question": asking["question"]}
    return to_customer(runtime, state, key, kind, facts)


def customer_wait(state: RefundState) -> CustomerWait:
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


def await_reply(
    state: RefundState, runtime: Runtime[Collaborators]
) -> Command[Literal["approve", "close_no_reply"]]:
    # This node runs again from the top on resume: nothing before interrupt() may have an effect.
    answer: ReviewAnswer = interrupt(customer_wait(state))
    if answer.get("answer") not in ("reply", "no_reply"):
        raise ValueError(f"the wait on the customer takes their reply, got {answer!r}")
    if answer["answer"] == "no_reply" and runtime.context.ask_default_outcome == "close":
        # The question stays the thread's (`asking`): a reply to it after the close reopens.
        return Command(
            update={
                "decision": answer,  # the thread's last answer: a landed resume is noticed
                "notes": ["No reply from the customer: the ticket is closed as no reply."],
                "trail": ["no_reply"],
            },
            goto="close_no_reply",
        )
    return Command(update=_replied(state, answer), goto="approve")


def _replied(state: RefundState, answer: ReviewAnswer) -> RefundState:
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


def close_key(ticket_key: str, decision_id: int) -> str:
    """One per question closed; it ends the question's key, so it carries its reply address."""
    return f"{ask_key(ticket_key, decision_id)}{CLOSED_SUFFIX}"


CLOSED_SUFFIX = ":closed"
CLOSED_REASON = "Closed: no reply from the customer."


def close_no_reply(state: RefundState, runtime: Runtime[Collaborators]) -> RefundState:
    """Tell the customer once that replying reopens the ticket; a refused address still closes."""
    assert state["asking"] is not None  # await_reply routes here only while a question waits
    to = state["order"]["customer_email"]
    why = _about_the_question(state, runtime, close_key, "closed_no_reply")
    note = (
        f"Told {to} the ticket is closed for want of a reply, and that replying reopens it."
        if not why
        else f"The email saying the ticket is closed was not delivered: {why}."
    )
    return {"outcome_reason": CLOSED_REASON, "notes": [note], "trail": ["close_no_reply"]}


def closed_wait(state: RefundState) -> CustomerWait:
    wait = customer_wait(state)
    wait["kind"] = "closed"
    wait["description"] = (
        f"**Closed: no reply from the customer** ({state['order']['customer_email']}) to "
        f"{wait['asked_by']}'s question: {wait['question']} Their reply reopens it."
    )
    return wait


def await_reopen(state: RefundState) -> RefundState:
    # This node runs again from the top on resume: nothing before interrupt() may have an effect.
    answer: ReviewAnswer = interrupt(closed_wait(state))
    if answer.get("answer") != "reply":
        raise ValueError(f"a ticket closed for want of a reply takes one, got {answer!r}")
    update = _replied(state, answer)
    update["outcome_reason"] = ""
    update["notes"] = [
        "The customer replied after the close: the ticket is reopened.",
        *update["notes"],
    ]
    return update


def _short(text: str) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= QUOTE_CHARS else one_line[: QUOTE_CHARS - 1] + "…"
