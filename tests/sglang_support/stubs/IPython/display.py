"""Stand-in for ``IPython.display``: notebook output helpers, inert outside a notebook."""


class HTML:
    def __init__(self, data: str = "") -> None:
        self.data = data


def display(*objects, **kwargs) -> None:
    return None
