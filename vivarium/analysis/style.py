"""The paper style of Vivarium figures, and ``save_figure`` (PDF + PNG, byte-stable).

- Fonts 8 pt (labels), 9 pt (titles), 7.5 pt (ticks, legends); TrueType fonts embedded in PDF.
- Colours: the Okabe-Ito palette (safe for the common colour-vision deficiencies), extended
  with Paul Tol's muted palette past eight categories; ``noop`` is always light grey.
- Sizes for a paper: ``SINGLE_COLUMN`` 3.3 in wide, ``DOUBLE_COLUMN`` 6.9 in.

The style is applied with ``paper_style()``, a context manager around ``matplotlib.rc_context``:
global rcParams are never changed for good. matplotlib is imported inside the functions.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from vivarium.optional import require

SINGLE_COLUMN = 3.3  # inches
DOUBLE_COLUMN = 6.9

# Okabe & Ito (2008), ordered so that the first colours are the most distinct on white.
OKABE_ITO = {
    "blue": "#0072B2",
    "orange": "#E69F00",
    "bluish_green": "#009E73",
    "vermillion": "#D55E00",
    "sky_blue": "#56B4E9",
    "reddish_purple": "#CC79A7",
    "yellow": "#F0E442",
    "black": "#000000",
}
PALETTE = list(OKABE_ITO.values())
# Paul Tol's muted scheme: more categories when eight are not enough.
EXTRA = ["#332288", "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#CC6677", "#882255"]
NEUTRAL = "#BBBBBB"  # for "nothing happened" categories such as noop
QUIET_ACTIONS = frozenset({"noop"})

SAVE_FORMATS = ("pdf", "png")
PNG_DPI = 300
SVG_HASHSALT = "vivarium"

STYLE: dict[str, Any] = {
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Arial", "Helvetica", "Liberation Sans"],
    "font.size": 8,
    "axes.labelsize": 8,
    "axes.titlesize": 9,
    "figure.titlesize": 9,
    "xtick.labelsize": 7.5,
    "ytick.labelsize": 7.5,
    "legend.fontsize": 7.5,
    "legend.title_fontsize": 8,
    "legend.frameon": False,
    "legend.handlelength": 1.6,
    "legend.borderaxespad": 0.3,
    "axes.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlelocation": "left",
    "axes.prop_cycle": None,  # set below, needs matplotlib's cycler
    "lines.linewidth": 1.2,
    "lines.markersize": 3.5,
    "patch.linewidth": 0.5,
    "xtick.major.width": 0.6,
    "ytick.major.width": 0.6,
    "xtick.major.size": 3.0,
    "ytick.major.size": 3.0,
    "xtick.minor.width": 0.4,
    "ytick.minor.width": 0.4,
    "image.interpolation": "nearest",
    "figure.dpi": 150,
    "figure.constrained_layout.use": True,
    "savefig.dpi": PNG_DPI,
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
    "svg.fonttype": "none",
    "svg.hashsalt": SVG_HASHSALT,
}


def colors(n: int) -> list[str]:
    """``n`` distinct colours: Okabe-Ito, then Tol muted, then repeating."""
    base = PALETTE + EXTRA
    return [base[i % len(base)] for i in range(n)]


def category_colors(names: Iterable[Any], quiet: Iterable[str] = QUIET_ACTIONS) -> dict[Any, str]:
    """A colour per category, in order; ``quiet`` names (``noop``) get the neutral grey."""
    quiet = set(quiet)
    names = list(dict.fromkeys(names))
    loud = [n for n in names if n not in quiet]
    palette = dict(zip(loud, colors(len(loud)), strict=True))
    return {n: NEUTRAL if n in quiet else palette[n] for n in names}


def figure_width(width: str | float) -> float:
    """``"single"`` (3.3 in), ``"double"`` (6.9 in) or a width in inches."""
    if width == "single":
        return SINGLE_COLUMN
    if width == "double":
        return DOUBLE_COLUMN
    if isinstance(width, int | float) and width > 0:
        return float(width)
    raise ValueError(f"width must be 'single', 'double' or inches > 0, not {width!r}")


def rc_params() -> dict[str, Any]:
    """The style as a dict of rcParams."""
    from cycler import cycler

    return {**STYLE, "axes.prop_cycle": cycler(color=PALETTE)}


@contextlib.contextmanager
def paper_style(rc: dict[str, Any] | None = None) -> Iterator[None]:
    """Apply the paper style inside a ``with`` block (rcParams are restored afterwards).

    ``rc`` adds or overrides rcParams, e.g. ``paper_style({"font.size": 9})``.
    """
    matplotlib = require("matplotlib")

    params = rc_params()
    if rc:
        params.update(rc)
    with matplotlib.rc_context(params):
        yield


def freeze_style(fig: Any) -> None:
    """Fix the current tick sizes on every axes of ``fig``.

    Ticks are created when a figure is drawn, from the rcParams of that moment; this stores the
    style's values on the axes so a figure drawn later (displayed in a notebook, saved outside
    ``paper_style``) looks the same.
    """
    mpl = require("matplotlib")

    rc = mpl.rcParams
    for ax in fig.axes:
        for axis in ("x", "y"):
            for which in ("major", "minor"):
                ax.tick_params(
                    axis=axis,
                    which=which,
                    labelsize=rc[f"{axis}tick.labelsize"],
                    width=rc[f"{axis}tick.{which}.width"],
                    length=rc[f"{axis}tick.{which}.size"],
                    direction=rc[f"{axis}tick.direction"],
                )


def _restart_layout(fig: Any) -> None:
    """Put the axes of a laid-out figure back where their grid puts them before a save.

    A layout engine starts from the current axes positions, so each run can differ from the
    last in the 16th digit; the SVG writer hashes those floats into its clip-path ids. Starting
    every save from the same positions makes the result (and the file) the same every time.
    Figures without a layout engine are left alone.
    """
    engine = fig.get_layout_engine()
    if engine is None or type(engine).__name__ == "PlaceHolderLayoutEngine":
        return
    for ax in fig.axes:
        spec = ax.get_subplotspec()
        setter = getattr(ax, "_set_position", None)
        if spec is not None and setter is not None:
            setter(spec.get_position(fig))


def _stem(path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    if p.suffix.lower() in {".pdf", ".png", ".svg"}:
        return p.with_suffix("")
    return p


def save_figure(
    fig: Any,
    path: str | os.PathLike[str],
    *,
    formats: Sequence[str] = SAVE_FORMATS,
    dpi: int = PNG_DPI,
) -> list[Path]:
    """Write ``fig`` as ``<stem>.pdf`` and ``<stem>.png`` (and ``.svg`` if asked); returns paths.

    ``path`` is the stem (a ``.pdf``/``.png``/``.svg`` suffix is dropped). PNG is written at
    ``dpi`` (300). The files are byte-stable: the same figure gives the same bytes every time
    (no creation date in the PDF, no software tag in the PNG, a fixed SVG hash salt and no date).
    The figure's own size is kept (no tight bounding box), so it fits the column it was made for.
    """
    stem = _stem(path)
    stem.parent.mkdir(parents=True, exist_ok=True)
    metadata = {
        "pdf": {"CreationDate": None, "ModDate": None, "Creator": "Vivarium", "Producer": None},
        "png": {"Software": None},
        "svg": {"Date": None, "Creator": "Vivarium"},
    }
    written = []
    with paper_style():
        for fmt in formats:
            fmt = fmt.lower().lstrip(".")
            if fmt not in metadata:
                raise ValueError(f"formats: {fmt!r} is not pdf, png or svg")
            target = stem.with_name(f"{stem.name}.{fmt}")
            _restart_layout(fig)
            fig.savefig(target, format=fmt, dpi=dpi, metadata=metadata[fmt])
            written.append(target)
    return written
