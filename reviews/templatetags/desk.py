import re

from django import template
from django.utils.html import conditional_escape, format_html_join
from django.utils.safestring import SafeString, mark_safe

from refunds.flow import words

register = template.Library()

BOLD = re.compile(r"\*\*(.+?)\*\*")


register.filter("dollars", words.dollars)


@register.filter
def status_class(status: str) -> str:
    return f"status status-{status}"


@register.filter
def review_markdown(text: str | None) -> SafeString:
    """The review description is markdown (Agent Inbox shape); the graph only uses paragraphs and
    **bold**, so that is all this renders. Everything is escaped first: it quotes the customer."""
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text or "") if p.strip()]
    rendered = [
        mark_safe(BOLD.sub(r"<strong>\1</strong>", conditional_escape(p)).replace("\n", "<br>"))
        for p in paragraphs
    ]
    return format_html_join("\n", "<p>{}</p>", ((p,) for p in rendered))
