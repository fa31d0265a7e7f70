"""The package's one error type."""


class KilnError(RuntimeError):
    """Kiln cannot compile or run a graph: the compiler's own message, which names the
    op, node or file at fault and what to do."""


class DeviceNotFound(KilnError):
    """No plugin provides the device asked for: a setup error, which the
    torch.compile backend raises rather than running the graph in eager."""
