"""Markdown tables, the one format every report writes."""


def table(header, rows, align=None):
    """The lines of a table: HEADER (cells), a separator (ALIGN: one 'l' or 'r' per column, default
    all left), then ROWS (lists of cells, str() of each)."""
    align = align or "l" * len(header)
    sep = "|" + "".join("---:|" if a == "r" else "---|" for a in align)
    return [row(header), sep] + [row(r) for r in rows]


def row(cells):
    return "| " + " | ".join(str(c) for c in cells) + " |"


def num(x, fmt="{:.0f}", none="—"):
    """A number formatted, or NONE for a missing one."""
    return none if x is None else fmt.format(x)
