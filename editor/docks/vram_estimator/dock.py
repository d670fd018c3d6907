"""The VRAM Estimator dock: the graph's RAM and VRAM needs from ``runtime.models.memory``, on every edit.

The estimate is always for running the graph on this computer. When the agent runs on a server
(the backend picker), the dock says so, and which backend each turn of the conversation ran on.
It also says which flash attention setting it assumed: the runtime's (off) unless the designer picks
"on", or a quantized KV cache, which llama.cpp creates only with flash attention on; then the
flash attention picker shows "on" and is locked until the KV cache is f16 again.
"""

from __future__ import annotations

import dataclasses
import html

from PySide6.QtCore import QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import (
    QComboBox,
    QDockWidget,
    QDoubleSpinBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from editor.services.backend_choice import EMBEDDED_LABEL, BackendChoice
from editor.session.view import SessionView
from editor.settings import snapshot_budget_mib
from runtime.asset.estimate import Estimate, estimate_asset
from runtime.models.context_settings import FLASH_ATTN, SNAPSHOT_BUDGET_MIB, kv_type_refusal
from runtime.models.folder import resolve_model
from runtime.models.gguf import GGUFError, read_gguf
from runtime.models.memory import (
    GPU_PRESETS_GB,
    KV_TYPES,
    MIB,
    EstimateError,
    Settings,
    flash_attn_assumed,
    gpu_memory_bytes,
)

VERDICT_COLOURS = {"fits": "#6fcf7f", "tight": "#e5c07b", "does not fit": "#ff7b7b", "no GPU": "#9a9a9a"}
CANNOT_RUN_COLOUR = "#ff7b7b"  # fits in memory, but a node's context is one its model cannot run
WEIGHT_COLOURS = [QColor(86, 140, 200), QColor(70, 110, 170), QColor(110, 160, 220)]
NODE_COLOURS = [QColor(200, 160, 80), QColor(90, 180, 110), QColor(170, 120, 210), QColor(79, 179, 179),
                QColor(220, 120, 90), QColor(150, 190, 90)]
CHART_HEIGHT = 92  # two bars with their totals
TABLE_MIN_HEIGHT = 120  # the table's header and a few rows, scrolled to when the dock is short
LABEL_W = 46  # the bars' names at their left
CUSTOM = "Custom\u2026"
NO_GPU = "No GPU (CPU only)"


def legend_html(entries: list[tuple[str, QColor]]) -> str:
    """Swatch and name of each entry; an entry never breaks across lines, the gaps between them do."""
    return " &nbsp; ".join(
        f"<span style='color:{colour.name()}'>\u25a0</span>&nbsp;{html.escape(name).replace(' ', '&nbsp;')}"
        for name, colour in entries)


def turn_ranges(labels: list[str]) -> list[tuple[int, int, str]]:
    """Consecutive turns (from 1) that ran on the same backend: (first, last, label); turns with no
    label (seeded, imported) are left out."""
    out: list[tuple[int, int, str]] = []
    for number, label in enumerate(labels, 1):
        if not label:
            continue
        if out and out[-1][2] == label and out[-1][1] == number - 1:
            out[-1] = (out[-1][0], number, label)
        else:
            out.append((number, number, label))
    return out


def backend_short(label: str) -> str:
    return "this computer" if label == EMBEDDED_LABEL else label


def mib(n: int) -> str:
    return f"{n / MIB:,.1f} MiB" if n < 1024 * MIB else f"{n / (1024 * MIB):,.2f} GiB"


@dataclasses.dataclass(frozen=True)
class AboveTrained:
    """A node whose context is larger than its model was trained for: the engine refuses to create it,
    so the graph cannot run however well it fits (the same error the Problems dock shows)."""

    node_id: str
    n_ctx: int
    trained: int
    model_file: str

    def text(self) -> str:
        return (f"{self.node_id}'s context {self.n_ctx:,} is above {self.model_file}'s trained {self.trained:,}")


def above_trained(e: Estimate) -> list[AboveTrained]:
    """The estimate's nodes whose context is above their model's trained size (GGUF headers are cached)."""
    found = []
    for n in e.nodes:
        if n.context is None or n.model_path is None:
            continue
        try:
            trained = read_gguf(n.model_path).context_length
        except GGUFError:
            continue  # the estimate read it a moment ago; a file gone since is the next estimate's problem
        if trained and n.context.n_ctx > trained:
            found.append(AboveTrained(n.node_id, n.context.n_ctx, trained, n.model_path.name))
    return found


def snapshot_text(e: Estimate) -> str:
    """The cache snapshots' RAM line: a ceiling on top of the total, not part of it."""
    if not e.snapshot_ram:
        return "Cache snapshots: off (a rewind across a trim or a new summary reads the conversation again)."
    return (f"Cache snapshots: up to {mib(e.snapshot_ram)} of RAM on top of the total (all nodes together; "
            "taken only when a rewind or a trim cuts cached cells).")


@dataclasses.dataclass(frozen=True)
class ChartRow:
    """One bar of the chart as painted: ``scale`` bytes fill its whole width."""

    device: str  # "vram" or "ram"
    top: float
    height: float
    scale: int
    magnified: int = 1  # 1: true to scale; N: an inset N times the scale of the bars above it
    label: str = ""


class MemoryChart(QWidget):
    """Two stacked bars, VRAM and RAM: each model's weights, then each node's KV cache and compute
    buffer; a line marks the GPU's memory. ``legend()`` says what each colour is.

    Both bars are true to scale against the GPU's memory (or the larger total, when it is bigger or
    there is no GPU), so 535 MiB and 1.35 GiB on an 8 GB GPU look as different as they are. When the
    totals fill under 9 % of that, a labelled inset under each bar shows its start magnified ten
    times (or a hundred, ...), so the parts still read."""

    INSET_FILL = 0.9  # an inset magnifies by 10, 100, ... while the larger total fills at most this of it
    BAR = 22
    THIN_BAR = 12  # the bars' height beside an inset
    INSET = 10

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.estimate: Estimate | None = None
        self.setMinimumHeight(CHART_HEIGHT)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:
        return QSize(400, self.chart_height())

    def chart_height(self) -> int:
        rows = self.rows()
        return max(CHART_HEIGHT, int(rows[-1].top + rows[-1].height + 16)) if rows else CHART_HEIGHT

    def legend(self) -> list[tuple[str, QColor]]:
        """Every segment kind of both bars, in bar order: (what it is, its colour)."""
        out: list[tuple[str, QColor]] = []
        seen: set[tuple[str, int]] = set()  # a list scan here took seconds for thousands of nodes
        for name, _size, colour in self.segments("vram") + self.segments("ram"):
            if (name, colour.rgba()) not in seen:
                seen.add((name, colour.rgba()))
                out.append((name, colour))
        return out

    def set_estimate(self, estimate: Estimate | None) -> None:
        self.estimate = estimate
        height = self.chart_height()
        if height != self.minimumHeight():
            self.setMinimumHeight(height)
            self.updateGeometry()
        self.update()

    def segments(self, device: str) -> list[tuple[str, int, QColor]]:
        e = self.estimate
        if e is None:
            return []
        out = []
        for i, m in enumerate(e.models):
            out.append((f"{m.path.name} weights", m.vram_bytes if device == "vram" else m.ram_bytes,
                        WEIGHT_COLOURS[i % len(WEIGHT_COLOURS)]))
        for i, n in enumerate(e.nodes):
            colour = NODE_COLOURS[i % len(NODE_COLOURS)]
            if n.context is None:
                continue
            c = n.context
            kv = c.kv_vram + c.recurrent_vram if device == "vram" else c.kv_ram + c.recurrent_ram
            compute = c.compute_vram if device == "vram" else c.compute_ram + c.output_ram
            out.append((f"{n.node_id} KV cache", kv, colour))
            out.append((f"{n.node_id} compute buffer", compute, colour.darker(140)))
        return out

    def scale(self) -> int:
        """Bytes the full width of the true-to-scale bars stands for."""
        e = self.estimate
        if e is None:
            return 1
        return max(e.settings.gpu_memory, e.vram_bytes, e.ram_bytes, 1)

    def magnification(self) -> int:
        """The inset's factor: the largest power of ten at which the larger total still fills at most
        ``INSET_FILL`` of the inset; 1 (no inset) when the totals fill over 9 % of the bars, which
        reads well enough. Powers of ten only, so within a decade a bigger graph looks bigger."""
        e = self.estimate
        if e is None:
            return 1
        used = max(e.vram_bytes, e.ram_bytes, 1)
        factor = 1
        while used * factor * 10 <= self.INSET_FILL * self.scale():
            factor *= 10
        return factor

    def rows(self) -> list[ChartRow]:
        """The bars, top to bottom, where they are painted (tests read this rather than pixels). With
        an inset the bars are thinner, so the chart keeps its height (the dock has no room to spare)."""
        if self.estimate is None:
            return []
        scale, factor = self.scale(), self.magnification()
        rows, top = [], 8.0
        for device in ("vram", "ram"):
            if factor == 1:
                rows.append(ChartRow(device, top, self.BAR, scale))
                top += self.BAR + 18
                continue
            rows.append(ChartRow(device, top, self.THIN_BAR, scale))
            label = f"\u00d7{factor}: 0 to {mib(scale // factor)} magnified"
            rows.append(ChartRow(device, top + self.THIN_BAR + 2, self.INSET, scale // factor, factor, label))
            top += self.THIN_BAR + 2 + self.INSET + 16
        return rows

    def filled_width(self, row: ChartRow) -> float:
        """How wide the row's segments are together, in pixels."""
        width = self._bar_width()
        return min(width, sum(size for _n, size, _c in self.segments(row.device)) / row.scale * width)

    def _bar_width(self) -> float:
        return max(1.0, self.width() - LABEL_W - 10)

    def paintEvent(self, _event) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        e = self.estimate
        width = self._bar_width()
        if e is None:
            painter.setPen(QColor(150, 150, 150))
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, "no estimate")
            return
        gpu = e.settings.gpu_memory
        totals = {"vram": e.vram_bytes, "ram": e.ram_bytes}
        rows = self.rows()
        for row in rows:
            top = row.top
            bar = QRectF(LABEL_W, top, width, row.height)
            painter.setPen(QColor(200, 200, 200) if row.magnified == 1 else QColor(150, 150, 150))
            name = row.device.upper() if row.magnified == 1 else f"\u00d7{row.magnified}"
            painter.drawText(QRectF(2, top - 2, LABEL_W, row.height + 4), Qt.AlignmentFlag.AlignVCenter, name)
            dashed = Qt.PenStyle.SolidLine if row.magnified == 1 else Qt.PenStyle.DashLine
            painter.setPen(QPen(QColor(90, 90, 90), 1, dashed))
            painter.setBrush(QColor(35, 35, 35))
            painter.drawRect(bar)
            painter.save()
            painter.setClipRect(bar)  # an inset's segments past its scale are cut at its edge
            x = bar.left()
            painter.setPen(Qt.PenStyle.NoPen)
            for _name, size, colour in self.segments(row.device):
                w = size / row.scale * width
                painter.setBrush(colour)
                painter.drawRect(QRectF(x, bar.top() + 1, w, bar.height() - 2))
                x += w
            painter.restore()
            if row.device == "vram" and row.magnified == 1 and gpu > 0:
                px = LABEL_W + gpu / row.scale * width
                painter.setPen(QPen(QColor(240, 90, 90), 2))
                painter.drawLine(int(px) - 1, int(top) - 4, int(px) - 1, int(top + row.height) + 4)
            if row is not rows[-1] and rows[rows.index(row) + 1].device == row.device:
                continue  # the bar's texts go under its inset
            # Under each bar (and its inset): its total on the left; on the right the GPU's size
            # (VRAM) or what the insets magnify (RAM, the last line).
            text_top = top + row.height
            painter.setPen(QColor(220, 220, 220))
            painter.drawText(QRectF(LABEL_W, text_top, width, 16), Qt.AlignmentFlag.AlignLeft, mib(totals[row.device]))
            right = (f"GPU {mib(gpu)}" if gpu > 0 else "") if row.device == "vram" else row.label
            if right:
                painter.setPen(QColor(240, 90, 90) if row.device == "vram" else QColor(160, 160, 160))
                tw = painter.fontMetrics().horizontalAdvance(right)
                painter.drawText(QRectF(self.width() - tw - 10, text_top, tw + 4, 16), Qt.AlignmentFlag.AlignRight, right)


class VramEstimatorDock(QDockWidget):
    node_clicked = Signal(str)  # a node's row: the window selects and centres that node

    def __init__(self, document, parent: QWidget | None = None, view: SessionView | None = None,
                 backends: BackendChoice | None = None) -> None:
        super().__init__("VRAM Estimator", parent)
        self.document = document
        self.view = view
        self.backends = backends
        self.estimate: Estimate | None = None
        self.updates = 0
        self.snapshot_budget_mib = SNAPSHOT_BUDGET_MIB  # the backend's; set_snapshot_budget for another
        body = QWidget(self)
        layout = QVBoxLayout(body)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(self._build_gpu_row())
        # How each node's context would be created: a second row, so the dock stays as narrow as before
        layout.addLayout(self._build_context_row())
        self._build_notes(layout)
        self._build_breakdown(layout)
        # Scrolled, not squeezed: in a short column (1366x768, beside Properties and the Conversation)
        # the dock asked for 348 px and grew the window past the screen, and squeezed below that its
        # chart was drawn over its legend. In a scroll area every part keeps its height.
        self.scroll = QScrollArea(self)
        self.scroll.setObjectName("vram_scroll")
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)  # its labels wrap
        self.scroll.setWidget(body)
        self.scroll.setMinimumWidth(body.minimumSizeHint().width())  # as narrow as its rows allow, no narrower
        self.body = body
        self.setWidget(self.scroll)

        self._follow_settings_and_document()
        self._follow_kv_type()
        self._follow_backends()
        self.update_estimate()
        self.show_backends()

    # --- building the dock --------------------------------------------------------------------------

    def _build_gpu_row(self) -> QHBoxLayout:
        """The GPU's memory (a preset, a custom size or none) and how many layers go on it."""
        controls = QHBoxLayout()
        controls.addWidget(QLabel("GPU"))
        self.gpu = QComboBox(self)
        for gb in GPU_PRESETS_GB:
            self.gpu.addItem(f"{gb} GB", float(gb))
        self.gpu.addItem(CUSTOM, None)
        self.gpu.addItem(NO_GPU, 0.0)
        self.gpu.setCurrentIndex(list(GPU_PRESETS_GB).index(8))
        # "Custom…" and "No GPU" need not fit closed: the dock stays under 360 px wide
        self.gpu.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.gpu.setMinimumContentsLength(5)
        controls.addWidget(self.gpu)
        self.custom_gb = QDoubleSpinBox(self)
        self.custom_gb.setRange(0.5, 512)
        self.custom_gb.setDecimals(1)  # a tenth of a GB is fine enough, and the row fits beside a scroll bar
        self.custom_gb.setSuffix(" GB")
        self.custom_gb.setValue(10)
        self.custom_gb.setEnabled(False)
        controls.addWidget(self.custom_gb)
        controls.addWidget(QLabel("GPU layers"))
        self.gpu_layers = QSpinBox(self)
        self.gpu_layers.setRange(-1, 999)
        self.gpu_layers.setValue(-1)
        self.gpu_layers.setSpecialValueText("all")
        self.gpu_layers.setToolTip("Layers offloaded to the GPU (llama.cpp n_gpu_layers): all, 0 (none) or the last N")
        controls.addWidget(self.gpu_layers)
        controls.addStretch(1)
        return controls

    def _build_context_row(self) -> QHBoxLayout:
        """The KV cache's number type and the flash attention setting."""
        controls = QHBoxLayout()
        controls.addWidget(QLabel("KV cache"))
        self.kv_type = QComboBox(self)
        self.kv_type.addItems(list(KV_TYPES))
        self.kv_type.setToolTip("The KV cache's number type: q8_0 and q4_0 halve and quarter it "
                                "(they need flash attention on)")
        controls.addWidget(self.kv_type)
        controls.addWidget(QLabel("Flash attention"))
        self.flash_attn = QComboBox(self)
        for mode in ("off", "on"):
            self.flash_attn.addItem(mode, mode)
        self.flash_attn.setCurrentIndex(max(self.flash_attn.findData(FLASH_ATTN), 0))
        self._flash_attn_chosen = self.flash_attn.currentData()  # the designer's pick, back when f16 is again
        controls.addWidget(self.flash_attn)
        controls.addStretch(1)
        return controls

    def _build_notes(self, layout: QVBoxLayout) -> None:
        """The texts above the chart: where the turns ran, the verdict, and what the numbers assume."""
        # Where the turns ran, when that is not (only) this computer
        self.backend_note = QLabel(self)
        self.backend_note.setObjectName("backend_note")
        self.backend_note.setTextFormat(Qt.TextFormat.RichText)
        self.backend_note.setWordWrap(True)
        self.backend_note.setStyleSheet("QLabel#backend_note { background: #1c3346; color: #d8e4ee; border-radius: 3px; "
                                        "padding: 4px; }")
        self.backend_note.hide()
        layout.addWidget(self.backend_note)

        self.verdict = QLabel(self)
        self.verdict.setTextFormat(Qt.TextFormat.RichText)
        self.verdict.setWordWrap(True)
        layout.addWidget(self.verdict)
        # What the numbers assume that the bars do not show: flash attention, and the snapshots' RAM
        self.assumed = QLabel(self)
        self.assumed.setObjectName("assumed")
        self.assumed.setWordWrap(True)
        layout.addWidget(self.assumed)

    def _build_breakdown(self, layout: QVBoxLayout) -> None:
        """The chart and its legend, the table of models and nodes, and the estimate's problems."""
        self.chart = MemoryChart(self)
        layout.addWidget(self.chart)
        # A label, not painted in the chart: it wraps, so every colour is named however narrow the dock.
        self.legend = QLabel(self)
        self.legend.setObjectName("legend")
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setWordWrap(True)
        layout.addWidget(self.legend)
        self.table = QTreeWidget(self)
        self.table.setHeaderLabels(["", "RAM", "VRAM", "Details"])
        self.table.setColumnWidth(0, 200)
        self.table.setRootIsDecorated(True)
        self.table.itemClicked.connect(self._row_clicked)
        self.table.setMinimumHeight(TABLE_MIN_HEIGHT)
        layout.addWidget(self.table, 1)
        self.problems = QLabel(self)
        self.problems.setWordWrap(True)
        self.problems.setStyleSheet("color: #ff8080;")
        layout.addWidget(self.problems)

    def _follow_settings_and_document(self) -> None:
        """A new estimate on every setting picked and every edit of the document."""
        self.gpu.currentIndexChanged.connect(self._gpu_picked)
        # Bound methods, not lambdas: Qt drops a connection when its receiver is destroyed.
        for signal in (self.custom_gb.valueChanged, self.gpu_layers.valueChanged,
                       self.document.undo_stack.indexChanged, self.document.reset, self.document.path_changed):
            signal.connect(self.update_estimate)
        self.kv_type.currentIndexChanged.connect(self._kv_type_picked)
        self.flash_attn.currentIndexChanged.connect(self._flash_attn_picked)

    def _follow_backends(self) -> None:
        """The note on where the turns ran follows the backend picker and the conversation, and the
        snapshots' RAM follows the budget the backend reports."""
        if self.backends is not None:
            self.backends.changed.connect(self.show_backends)
        view = self.view
        if view is not None:
            view.history_changed.connect(self.show_backends)
            view.turn_finished.connect(self.show_backends)
            view.restarted.connect(self.show_backends)
            # the budget the designer set (Backend > Cache Snapshot Budget), as the backend reports it
            view.snapshots_changed.connect(lambda use: self.set_snapshot_budget(use.budget / (1 << 20)))
            self.snapshot_budget_mib = snapshot_budget_mib()

    def turn_backends(self) -> list[str]:
        """The backend label of each turn of the conversation's current branch ("" when unknown)."""
        c = self.view
        tree = c.saved.tree if c is not None else None
        if tree is None:
            return []
        return [c.backend_of(turn_id) for turn_id in tree.path()]  # type: ignore[union-attr]

    def show_backends(self, *_changed: object) -> None:
        """Say where the agent runs when it is not (only) this computer: the estimate is for this
        computer, and the turns' memory was on the server. Hidden when everything ran here."""
        lines: list[str] = []
        choice = self.backends
        if choice is not None and choice.remote:
            lines.append(f"This estimate is for running the graph <b>on this computer</b>. The agent now runs on "
                         f"<b>{html.escape(choice.spec)}</b> ({html.escape(choice.description)}): its memory is on "
                         "the server, not here.")
        ranges = turn_ranges(self.turn_backends())
        if any(label != EMBEDDED_LABEL for _first, _last, label in ranges):
            parts = []
            for first, last, label in ranges:
                turns = f"Turn {first}" if first == last else f"Turns {first}\u2013{last}"
                parts.append(f"{turns} ran on {html.escape(backend_short(label))}")
            if not lines:
                lines.append("This estimate is for running the graph <b>on this computer</b>.")
            lines.append("<span style='color:#a9c4d8'>" + "; ".join(parts) + ".</span>")
        self.backend_note.setText("<br/>".join(lines))
        self.backend_note.setVisible(bool(lines))

    def _gpu_picked(self) -> None:
        self.custom_gb.setEnabled(self.gpu.currentText() == CUSTOM)
        self.update_estimate()

    def _kv_type_picked(self, *_changed: object) -> None:
        self._follow_kv_type()
        self.update_estimate()

    def _follow_kv_type(self) -> None:
        """A quantized KV cache exists only with flash attention on (llama.cpp refuses it off): show
        "on" and lock the picker; back on f16, the designer's own choice returns."""
        kv_type = self.kv_type.currentText()
        needs_it = bool(kv_type_refusal(kv_type, "off"))
        self.flash_attn.blockSignals(True)
        self.flash_attn.setCurrentIndex(self.flash_attn.findData("on" if needs_it else self._flash_attn_chosen))
        self.flash_attn.blockSignals(False)
        self.flash_attn.setEnabled(not needs_it)
        self.flash_attn.setToolTip(
            f"A {kv_type} KV cache needs flash attention on: llama.cpp quantizes the V cache only with it"
            if needs_it else
            f"How the contexts would be created. The runtime's default is {FLASH_ATTN}: with it off, replays "
            "are exact at any thread count; on, at the same thread count only")

    def _flash_attn_picked(self, *_changed: object) -> None:
        self._flash_attn_chosen = self.flash_attn.currentData()
        self.update_estimate()

    def set_snapshot_budget(self, mib: float) -> None:
        """Show ``mib`` as the cache snapshots' RAM budget (the one the embedded backend was given)."""
        self.snapshot_budget_mib = mib
        self.update_estimate()

    def settings(self) -> Settings:
        chosen = self.gpu.currentData()
        gb = self.custom_gb.value() if chosen is None else chosen
        return Settings(gpu_memory=gpu_memory_bytes(gb), gpu_layers=self.gpu_layers.value(),
                        kv_type=self.kv_type.currentText(), flash_attn=self.flash_attn.currentData(),
                        snapshot_budget=int(self.snapshot_budget_mib * MIB))

    def _row_clicked(self, item: QTreeWidgetItem, _column: int = 0) -> None:
        node_id = item.data(0, Qt.ItemDataRole.UserRole)
        if isinstance(node_id, str) and node_id:
            self.node_clicked.emit(node_id)

    def update_estimate(self, *_changed: object) -> None:
        """Estimate the document's asset now (GGUF headers are cached, so this is arithmetic)."""
        doc = self.document
        asset_dir = doc.asset_dir
        try:
            estimate = estimate_asset(doc.asset, lambda name: resolve_model(name, asset_dir), self.settings(),
                                      asset_file=doc.path)
        except EstimateError as exc:
            self.estimate = None
            self.chart.set_estimate(None)
            self.legend.setText("")
            self.table.clear()
            self.verdict.setText("")
            self.assumed.setText("")
            self.problems.setText("\n".join(str(p) for p in exc.problems))
            return
        self.updates += 1
        if estimate == self.estimate:
            return  # a move or a rename changes no number: keep the table as it is
        self.estimate = estimate
        self.chart.set_estimate(estimate)
        self.legend.setText(legend_html(self.chart.legend()))
        self._fill_table(estimate)
        self._show_verdict(estimate)
        self._show_assumptions(estimate)
        self.problems.setText("\n".join(f"{p.node_id or 'agent'}.{p.field}: {p.message}" if p.field else p.message
                                        for p in estimate.problems))

    def _show_verdict(self, e: Estimate) -> None:
        # A green FITS beside an error in Problems read as "ready to run": memory is not the only
        # reason a graph cannot run, so a context the model cannot create turns the verdict red.
        refused = above_trained(e)
        colour = CANNOT_RUN_COLOUR if refused else VERDICT_COLOURS[e.verdict]
        gpu = e.settings.gpu_memory
        word = f"<span style='font-size: 15px; color:{colour}'><b>{e.verdict.upper()}</b></span>"
        but = refused and e.verdict in ("fits", "tight")
        line = (word + (" in memory, but it cannot run" if but else "") + " &nbsp; "
                f"VRAM {mib(e.vram_bytes)}" + (f" of {mib(gpu)}" if gpu else "") + f" \u00b7 RAM {mib(e.ram_bytes)}")
        if gpu > 0:
            fit = e.agents_that_fit()
            line += f" \u00b7 headroom {mib(e.headroom)}"
            if fit is not None:
                line += f" \u00b7 {fit} agent{'s' if fit != 1 else ''} of this graph fit (weights shared)"
        for node in refused:
            line += (f"<br/><span style='color:{CANNOT_RUN_COLOUR}'>\u2716 {html.escape(node.text(), quote=False)}: the engine "
                     f"refuses this context. Lower its Context Size to {node.trained:,} or less, or set 0.</span>")
        self.verdict.setText(line)

    def _show_assumptions(self, e: Estimate) -> None:
        self.assumed.setText(f"Assumes {flash_attn_assumed(e.settings)}.\n{snapshot_text(e)}")

    def _fill_table(self, e: Estimate) -> None:
        self.table.clear()
        # Nodes whose Context Size is 0: their row says the size is the model's own.
        own = {node.id for node in self.document.asset.nodes if any(u.context_size == 0 for u in node.model_uses())}
        models = QTreeWidgetItem(self.table, ["Model weights", mib(sum(m.ram_bytes for m in e.models)),
                                              mib(e.weights_vram), f"{len(e.models)} file(s), loaded once"])
        for m in e.models:
            QTreeWidgetItem(models, [m.path.name, mib(m.ram_bytes), mib(m.vram_bytes),
                                     (f"{m.quantization}, {m.parameters / 1e6:,.0f} M parameters, {m.n_layer} layers;"
                                      f" used by {', '.join(m.node_ids)}")])
        nodes = QTreeWidgetItem(self.table, ["Node contexts", mib(e.agent_ram), mib(e.agent_vram),
                                             f"{len(e.nodes)} model-backed node(s), one context each"])
        for n in e.nodes:
            if n.context is None:
                unread = QTreeWidgetItem(nodes, [n.node_id, "-", "-", f"{n.model}: could not be read"])
                unread.setData(0, Qt.ItemDataRole.UserRole, n.node_id)
                continue
            c = n.context
            node_item = QTreeWidgetItem(nodes, [n.node_id, mib(n.ram_bytes), mib(n.vram_bytes),
                                                f"{c.n_ctx} tokens of context"
                                                + (" (Context Size 0: the model's own)" if n.node_id in own else "")])
            node_item.setData(0, Qt.ItemDataRole.UserRole, n.node_id)
            node_item.setToolTip(0, "Click to show this node on the canvas")
            QTreeWidgetItem(node_item, ["KV cache", mib(c.kv_ram + c.recurrent_ram), mib(c.kv_vram + c.recurrent_vram),
                                        f"{c.cells} cells, {e.settings.kv_type}"])
            QTreeWidgetItem(node_item, ["compute buffer", mib(c.compute_ram + c.output_ram), mib(c.compute_vram),
                                        f"graph scratch and output, flash attention {'on' if c.flash_attn else 'off'}"])
        refused = ", ".join(node.node_id for node in above_trained(e))
        QTreeWidgetItem(self.table, ["Total", mib(e.ram_bytes), mib(e.vram_bytes),
                                     e.verdict + (f" in memory; cannot run: {refused} above the trained context"
                                                  if refused else "")])
        QTreeWidgetItem(self.table, ["Cache snapshots", mib(e.snapshot_ram), "-",
                                     "at most, on top of the total: all nodes together, taken only when a rewind "
                                     "or a trim cuts cached cells" if e.snapshot_ram else "off"])
        self.table.expandAll()
