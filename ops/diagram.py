"""The workflow drawn on the server as SVG from LangGraph's `get_graph()`: no script and no inline
style (the Content-Security-Policy allows neither); classes only, styled in ops.css."""

from __future__ import annotations

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from langchain_core.runnables.graph import Edge

from refunds import persistence
from refunds.flow.words import node_words, split_order_step

BOX_W, BOX_H, ROW_H, COL_W, PAD = 250, 40, 66, 270, 14
# Room beside the boxes for edges that pass rows or go back up: they never run across a box.
LANE = 22


def levels(nodes: list[str], edges: list[Edge]) -> dict[str, int]:
    """Longest path from the start, ignoring edges that go back (charge refused -> approve)."""
    out: dict[str, list[str]] = {n: [] for n in nodes}
    for e in edges:
        out.setdefault(e.source, []).append(e.target)
    level = {n: 0 for n in nodes}
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(n: str) -> None:  # topological order, back edges skipped
        state[n] = 1
        for m in out.get(n, []):
            if state.get(m) is None:
                visit(m)
        state[n] = 2
        order.append(n)

    for n in nodes:
        if state.get(n) is None:
            visit(n)
    position = {n: i for i, n in enumerate(reversed(order))}
    for n in reversed(order):
        for m in out.get(n, []):
            if position[m] > position[n]:
                level[m] = max(level[m], level[n] + 1)
    return level


def svg(path: list[str], current: list[str]) -> SafeString:
    drawn = persistence.graph().get_graph()
    nodes, edges = list(drawn.nodes), drawn.edges
    level = levels(nodes, edges)
    rows: dict[int, list[str]] = {}
    for n in nodes:
        rows.setdefault(level[n], []).append(n)
    width = max(len(r) for r in rows.values()) * COL_W + 2 * (PAD + LANE)
    height = (max(rows) + 1) * ROW_H + 2 * PAD
    where: dict[str, tuple[float, float]] = {}
    for lvl, names in rows.items():
        offset = (width - len(names) * COL_W) / 2
        for i, n in enumerate(names):
            where[n] = (offset + i * COL_W + COL_W / 2, PAD + lvl * ROW_H + BOX_H / 2)
    # A per-order step of a ticket of several is in the trail as "check_order:1042".
    visited = {split_order_step(n)[0] for n in path} | {"__start__"}
    if path and not current:
        visited.add("__end__")
    parts = [
        f'<svg class="flow" viewBox="0 0 {width:.0f} {height:.0f}" role="img" '
        'aria-label="The refund workflow; the path this thread took is highlighted">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
        'class="arrowhead"/></marker></defs>',
    ]
    for e in edges:
        on_path = e.source in visited and e.target in visited
        cls = "edge" + (" conditional" if e.conditional else "") + (" on-path" if on_path else "")
        (x1, y1), (x2, y2) = where[e.source], where[e.target]
        if level[e.target] == level[e.source] + 1:  # the next row: a line through the gap
            parts.append(
                f'<line class="{cls}" x1="{x1:.0f}" y1="{y1 + BOX_H / 2:.0f}" x2="{x2:.0f}" '
                f'y2="{y2 - BOX_H / 2:.0f}" marker-end="url(#arrow)"/>'
            )
        else:
            points = _around(e, level, rows, where, width)
            parts.append(
                f'<polyline class="{cls} around" points="'
                + " ".join(f"{x:.0f},{y:.0f}" for x, y in points)
                + '" marker-end="url(#arrow)"/>'
            )
    parts += [_node(n, where[n], n in visited, n in current) for n in nodes]
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every label is escaped (_node)


def _node(n: str, at: tuple[float, float], visited: bool, current: bool) -> str:
    x, y = at
    cls = "node" + (" visited" if visited else "") + (" current" if current else "")
    cls += " terminal" if n.startswith("__") else ""
    label = "Start" if n == "__start__" else "End" if n == "__end__" else node_words(n)
    return (
        f'<g class="{cls}"><title>{escape(n)}</title>'
        f'<rect x="{x - BOX_W / 2:.0f}" y="{y - BOX_H / 2:.0f}" width="{BOX_W}" '
        f'height="{BOX_H}" rx="8"/>'
        f'<text x="{x:.0f}" y="{y + 5:.0f}" text-anchor="middle">{escape(label)}</text></g>'
    )


def _around(
    e: Edge,
    level: dict[str, int],
    rows: dict[int, list[str]],
    where: dict[str, tuple[float, float]],
    width: float,
) -> list[tuple[float, float]]:
    """An edge that passes rows or goes back up: right angles, in a lane outside every box."""
    (x1, y1), (x2, y2) = where[e.source], where[e.target]
    low, high = sorted((level[e.source], level[e.target]))
    passed = [where[n][0] for lvl in range(low, high + 1) for n in rows[lvl]]
    left = (x1 + x2) / 2 < width / 2 or ((x1 + x2) / 2 == width / 2 and x1 <= width / 2)
    # Ways back run further out than ways down, so two edges never share a lane.
    out = LANE * (0.8 if level[e.target] < level[e.source] else 0.4)
    lane = min(passed) - BOX_W / 2 - out if left else max(passed) + BOX_W / 2 + out
    if level[e.target] < level[e.source]:  # back up: out of the side, up the lane, in the side
        side = -BOX_W / 2 if left else BOX_W / 2
        return [(x1 + side, y1), (lane, y1), (lane, y2), (x2 + side, y2)]
    gap = (ROW_H - BOX_H) / 2
    below, above = y1 + BOX_H / 2 + gap, y2 - BOX_H / 2 - gap
    return [
        (x1, y1 + BOX_H / 2),
        (x1, below),
        (lane, below),
        (lane, above),
        (x2, above),
        (x2, y2 - BOX_H / 2),
    ]
