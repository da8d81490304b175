"""Checks on matplotlib figures shared by the tests of the pictures the project draws (curves.png, the
--plot-attention PNGs): every piece of text that is drawn must lie inside the figure, not clipped at its edge."""
from __future__ import annotations

from typing import Any, List


def drawn_texts(fig: Any) -> List[Any]:
    """The visible, non-empty Text artists that one draw of `fig` really draws.

    Axes keep spare tick objects whose labels sit outside the view limits and are never drawn; only a draw
    tells them apart, so Text.draw is wrapped for the length of one draw (which also runs constrained layout)
    to record the artists it is called on."""
    from matplotlib.text import Text

    seen: List[Any] = []
    original = Text.draw

    def recording_draw(self, renderer):
        if self.get_visible() and self.get_text().strip():
            seen.append(self)
        return original(self, renderer)

    Text.draw = recording_draw
    try:
        fig.canvas.draw()
    finally:
        Text.draw = original
    return seen


def text_outside(fig: Any) -> List[str]:
    """Each drawn text artist of `fig` whose extent leaves the figure, as 'TEXT: box outside box'.

    Extents come from the renderer savefig uses, in display pixels like fig.bbox; half a pixel of slack covers
    the rounding of extents to the pixel grid."""
    texts = drawn_texts(fig)
    renderer = fig.canvas.get_renderer()
    box, slack = fig.bbox, 0.5
    bad = []
    for artist in texts:
        ext = artist.get_window_extent(renderer)
        if (ext.x0 < box.x0 - slack or ext.y0 < box.y0 - slack
                or ext.x1 > box.x1 + slack or ext.y1 > box.y1 + slack):
            bad.append(f"{artist.get_text()!r}: ({ext.x0:.1f}, {ext.y0:.1f})-({ext.x1:.1f}, {ext.y1:.1f}) "
                       f"outside ({box.x0:.0f}, {box.y0:.0f})-({box.x1:.0f}, {box.y1:.0f})")
    return bad


def assert_text_inside(fig: Any) -> None:
    """Fail naming every text artist of `fig` drawn (partly) outside the figure; at least one must be drawn."""
    assert drawn_texts(fig), "the figure draws no text at all: does it have a canvas that draws (FigureCanvasAgg)?"
    bad = text_outside(fig)
    assert not bad, "text drawn outside the figure: " + "; ".join(bad)
