"""Each measured figure the README cites is the one in its named row of ``benchmarks/RESULTS.md``.

The test this replaces looked for the number anywhere in RESULTS.md, and RESULTS.md holds
hundreds of numbers: a figure copied from the wrong row (the small size's speed-up, the worst
run instead of the median) or made up passed whenever the same digits stood somewhere else.
Here every figure is tied to one place: the README words around it, and the section, row,
column and value of RESULTS.md it reports. A ratio (``4.4x``) or CPU time a decision the
README cites without such a place fails too, so a new figure must name its row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"

# The values of one cell: "1.21x / 1.21x / 1.29x" (best / median / worst), "0.65x (0.60x)"
# (whole run, then steady step), "90% (goal >= 90%: met)".
BEST, MEDIAN, WORST = 0, 1, 2
WHOLE, STEADY = 0, 1
_VALUE = re.compile(r"\d[\d,]*(?:\.\d+)?(?:x|%)?")


@dataclass(frozen=True)
class Cell:
    """A value of a table row in one section of RESULTS.md."""

    section: str
    row: tuple[str, ...]  # the row's first cells
    column: str  # the header of its column (the first column of that name)
    value: int  # which value of the cell

    def read(self, results: str) -> str:
        """The value as RESULTS.md writes it."""
        for header, *rows in _tables(_section(results, self.section)):
            for cells in rows:
                if tuple(cells[: len(self.row)]) == self.row:
                    return _VALUE.findall(cells[header.index(self.column)])[self.value]
        raise AssertionError(f"RESULTS.md {self.section}: no row {self.row}")


@dataclass(frozen=True)
class Text:
    """A value in the prose of one section of RESULTS.md (its first group)."""

    section: str
    pattern: str

    def read(self, results: str) -> str:
        """The value as RESULTS.md writes it."""
        found = re.findall(self.pattern, _section(results, self.section))
        assert len(found) == 1, f"RESULTS.md {self.section}: {self.pattern!r} found {found}"
        return found[0]


_OWN = "own_models_vs_mesa"
_LLM = "llm_concurrency"
_SERVED = "llm_throughput"
_PLAIN = ("direct transport, plain policy",)
_GRAPH = ("direct transport, LangGraph policy",)
_CPU = "CPU ms per decision"

PER_AGENT = "per agent / Mesa (steady step)"
BATCHED = "batched speed-up (steady step)"

# README words (whitespace folded) with the figure as their one group -> where it is measured.
FIGURES: dict[str, Cell | Text] = {
    r"Schelling per agent takes (\S+) Mesa's": Cell(
        _OWN, ("schelling", "large"), "per agent / Mesa (steady step)", WHOLE
    ),
    r"Mesa's time and batched is (\S+) faster \(\S+ per step once built\)": Cell(
        _OWN, ("schelling", "large"), "batched speed-up (steady step)", WHOLE
    ),
    r"faster \((\S+) per step once built\)": Cell(
        _OWN, ("schelling", "large"), "batched speed-up (steady step)", STEADY
    ),
    r"Boltzmann per agent takes (\S+) Mesa's": Cell(
        _OWN, ("boltzmann", "large"), "per agent / Mesa (steady step)", WHOLE
    ),
    r"Mesa's time and batched is (\S+) faster \(\S+ per step\)\.": Cell(
        _OWN, ("boltzmann", "large"), "batched speed-up (steady step)", WHOLE
    ),
    r"faster \((\S+) per step\)\.": Cell(
        _OWN, ("boltzmann", "large"), "batched speed-up (steady step)", STEADY
    ),
    r"\(per agent at most (\S+), batched": Text(_OWN, r"Goals \(per agent <= (\S+) Mesa's time"),
    r"batched at least (\S+)\) are met": Text(_OWN, r"batched >= (\S+) faster\):"),
    r"take (\S+) the ideal time with the plain policy": Cell(_LLM, _PLAIN, "vs ideal", BEST),
    r"the plain policy and (\S+) with LangGraph": Cell(_LLM, _GRAPH, "vs ideal", BEST),
    r"medians (\S+) and \S+\)": Cell(_LLM, _PLAIN, "vs ideal", MEDIAN),
    r"medians \S+ and (\S+)\)": Cell(_LLM, _GRAPH, "vs ideal", MEDIAN),
    r"at (\S+) and \S+ ms of CPU a decision": Cell(
        _LLM, ("engine + plain policy + direct call + trace with prompts",), _CPU, MEDIAN
    ),
    r"at \S+ and (\S+) ms of CPU a decision": Cell(
        _LLM, ("engine + LangGraph policy + direct call + trace with prompts",), _CPU, MEDIAN
    ),
    r"256 LangGraph agents have all (\d+) calls in flight": Text(
        _LLM, r"at most \d+ calls in flight \(fewest in a run (\d+)\)"
    ),
    r"\((\d+%) of it here": Cell(
        _SERVED, ("Vivarium / standalone (median of runs)",), "completion tokens / s", 0
    ),
    r"in the server's cache \((\d+%) of it": Text(
        _SERVED, r"best / median / worst: \d+% / (\d+%) / \d+%"
    ),
    r"(\d+%) of all prompt tokens": Text(_SERVED, r"served from the server's cache .*?\((\d+%)\)"),
    r"a call adds (\d+) B to the trace": Text("llm_scale", r"\((\d+) B a call\)"),
    r"(\d+) B of it new text": Cell("llm_scale", ("new text stored a call",), "value", 0),
    r"a fork at step 6 made (\S+) model calls": Cell(
        "fork_cost", ("6 of 12",), "fork: model calls", WHOLE
    ),
    r"a fork at step 6 made \S+ model calls in (\S+) s": Cell(
        "fork_cost", ("6 of 12",), "fork s", WHOLE
    ),
    r"again made (\S+) in \S+ s\)": Cell("fork_cost", ("6 of 12",), "again: model calls", WHOLE),
    r"again made \S+ in (\S+) s\)": Cell("fork_cost", ("6 of 12",), "again s", WHOLE),
}

# What the README states as measured: a ratio, or CPU time a decision.
_CITED = re.compile(r"\b\d+(?:\.\d+)?x\b|\b\d+\.\d+(?= (?:and \S+ )?ms (?:of CPU )?a decision)")


def _section(results: str, name: str) -> str:
    """The text between ``<!-- name: begin -->`` and ``<!-- name: end -->``."""
    found = re.search(f"<!-- {name}: begin -->(.*?)<!-- {name}: end -->", results, re.S)
    assert found, f"RESULTS.md has no section {name}"
    return found.group(1)


def _tables(text: str) -> list[list[list[str]]]:
    """The Markdown tables of ``text``: rows of cells, the header first, the rule left out."""
    tables: list[list[list[str]]] = []
    previous = False
    for line in text.splitlines():
        is_row = line.startswith("|")
        if is_row and not re.fullmatch(r"[|\-\s:]+", line):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not previous:
                tables.append([])
            tables[-1].append(cells)
        previous = is_row
    return tables


def _readme() -> str:
    return " ".join(README.read_text(encoding="utf-8").split())


def _figure(readme: str, words: str) -> re.Match[str]:
    found = list(re.finditer(words, readme))
    assert len(found) == 1, f"README: {words!r} found {len(found)} times"
    return found[0]


def _wrong(readme: str, results: str) -> list[str]:
    """The figures of ``readme`` that are not the value of their row in ``results``."""
    wrong = []
    for words, place in FIGURES.items():
        cited, measured = _figure(readme, words).group(1), place.read(results)
        if cited != measured:
            wrong.append(f"{cited} ({words!r}; RESULTS.md: {measured})")
    return wrong


def _unnamed(readme: str) -> list[str]:
    """The figures of ``readme`` that no entry of ``FIGURES`` ties to a row."""
    named = {_figure(readme, words).start(1) for words in FIGURES}
    return [m.group() for m in _CITED.finditer(readme) if m.start() not in named]


def test_readme_speed_figures_are_the_measured_ones() -> None:
    wrong = _wrong(_readme(), RESULTS.read_text(encoding="utf-8"))
    assert not wrong, f"README figures that are not their row's in RESULTS.md: {wrong}"


def test_every_figure_the_readme_cites_names_its_row() -> None:
    readme = _readme()
    assert len(_CITED.findall(readme)) >= 10, "the README cites no measured figure"
    assert not _unnamed(readme), f"README figures with no row named in FIGURES: {_unnamed(readme)}"


def _cells(results: str, start: str) -> list[str]:
    """The cells after the first of the row of RESULTS.md that starts with ``start``."""
    line = next(line for line in results.splitlines() if line.startswith(start))
    return [cell.strip() for cell in line.strip().strip("|").split("|")][1:]


def test_figures_from_other_rows_or_made_up_are_caught() -> None:
    # The old test's hole: each of these numbers stands somewhere in RESULTS.md (Schelling's
    # steady step, the small size's speed-up, LangGraph's worst run, the mock model's CPU), so
    # "is it anywhere in the file" passed them all.
    # The own-model figures are swapped for others of the same table, read from the files as
    # they stand (a rerun of the benchmark changes them all): Schelling's steady-step ratio
    # for its whole-run one, the small size's speed-up for the large one's.
    results = RESULTS.read_text(encoding="utf-8")
    readme = _readme()
    own = _tables(_section(results, _OWN))[0]
    head = own[0]
    schelling = {row[1]: row for row in own if row[0] == "schelling"}
    steady = re.findall(r"\((\S+)\)", schelling["large"][head.index(PER_AGENT)])[0]
    small = schelling["small"][head.index(BATCHED)].split()[0]
    per_agent = re.findall(r"Schelling per agent takes (\S+)", readme)[0]
    batched = re.findall(r"Mesa's time and batched is (\S+) faster \(\S+ per step once", readme)[0]
    assert steady != per_agent and small != batched
    # The LLM figures likewise: LangGraph's worst run for its median, the mock model's CPU for
    # the plain policy's with a direct call.
    plain, graph = re.findall(r"medians (\S+) and (\S+)\)", readme)[0]
    cpu_plain, cpu_graph = re.findall(r"at (\S+) and (\S+) ms of CPU a decision", readme)[0]
    graph_worst = _cells(results, "| direct transport, LangGraph policy |")[1].split(" / ")[2]
    mock_cpu = _cells(results, "| engine + plain policy (mock model) |")[0].split(" / ")[1]
    assert graph_worst != graph and mock_cpu != cpu_plain
    swaps = [  # (README words, the same with another row's figure, that figure)
        (f"Schelling per agent takes {per_agent}", f"Schelling per agent takes {steady}", steady),
        (f"batched is {batched} faster", f"batched is {small} faster", small),
        (f"medians {plain} and {graph}", f"medians {plain} and {graph_worst}", graph_worst),
        (f"at {cpu_plain} and {cpu_graph} ms", f"at {mock_cpu} and {cpu_graph} ms", mock_cpu),
    ]
    for words, invented, figure in swaps:
        assert words in readme and figure in results
        readme = readme.replace(words, invented, 1)
    wrong = [figure.split()[0] for figure in _wrong(readme, results)]
    assert wrong == [steady, small, graph_worst, mock_cpu]
    added = readme.replace("are met by Schelling", "are met (2.5x) by Schelling")
    assert _unnamed(added) == ["2.5x"]
