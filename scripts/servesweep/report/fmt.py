"""Numbers as the summary writes them."""

from __future__ import annotations

import math


def num(x, digits: int = 0) -> str:
    """Numbers as people write them: '17 078', '0.51'."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:,.{digits}f}".replace(",", " ")
