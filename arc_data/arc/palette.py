"""The ARC colours and the few others that `viz-arc` and the vote's report draw with, apart from
`arc_data.arc.viz` so that the report (`eval.arc.report`) imports them without viz's own imports
(its sources and plan modules: about 12 ms of a vote's start)."""

from __future__ import annotations

import numpy as np

# The standard ARC palette (colours 0..9), as in the ARC-AGI testing interface.
PALETTE = np.array(
    [
        (0x00, 0x00, 0x00),  # 0 black
        (0x00, 0x74, 0xD9),  # 1 blue
        (0xFF, 0x41, 0x36),  # 2 red
        (0x2E, 0xCC, 0x40),  # 3 green
        (0xFF, 0xDC, 0x00),  # 4 yellow
        (0xAA, 0xAA, 0xAA),  # 5 grey
        (0xF0, 0x12, 0xBE),  # 6 magenta
        (0xFF, 0x85, 0x1B),  # 7 orange
        (0x7F, 0xDB, 0xFF),  # 8 light blue
        (0x87, 0x0C, 0x25),  # 9 maroon
    ],
    dtype=np.uint8,
)
BACKGROUND = (255, 255, 255)
LINE = (85, 85, 85)
UNKNOWN = (230, 230, 230)  # a test output that is not given

__all__ = ["BACKGROUND", "LINE", "PALETTE", "UNKNOWN"]
