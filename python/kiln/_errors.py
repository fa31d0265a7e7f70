"""The package's one error type."""


class KilnError(RuntimeError):
    """Kiln cannot compile or run a graph: the compiler's own message, which names the
    op, node or file at fault and what to do."""
