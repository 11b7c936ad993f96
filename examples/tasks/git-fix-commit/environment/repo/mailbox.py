"""Send and receive messages (the code spells it right)."""


def fetch(box):
    """Messages waiting in ``box``."""
    return list(box)
