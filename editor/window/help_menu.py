"""The Help menu: About, the documentation (the docs/ files beside the editor) and the keyboard
shortcuts, listed from the window's own actions, so the list is never out of date."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QAction, QDesktopServices, QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLineEdit,
    QMainWindow,
    QMenu,
    QMessageBox,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

DOC_TITLES = {  # the docs/ files by what they are about; any other .md file is listed by its name
    "node-types.md": "Node Types",
    "sizing.md": "Sizing: Memory and Context",
    "limits.md": "Limits",
    "reproducibility.md": "Reproducibility",
    "bundles.md": "Bundles",
    "serving.md": "Serving (parley serve)",
    "behaviours.md": "Behaviours (Subgraphs)",
}


def docs_dir() -> Path:
    """The documentation folder of a source checkout (docs/ beside the editor package)."""
    return Path(__file__).resolve().parents[2] / "docs"


def doc_files() -> list[tuple[str, Path]]:
    """(title, path) of each documentation page, the known ones first in ``DOC_TITLES``' order."""
    folder = docs_dir()
    found = sorted(folder.glob("*.md")) if folder.is_dir() else []
    known = [(DOC_TITLES[p.name], p) for name in DOC_TITLES for p in found if p.name == name]
    other = [(p.stem.replace("-", " ").replace("_", " ").capitalize(), p) for p in found if p.name not in DOC_TITLES]
    return known + other


def version() -> str:
    from importlib import metadata  # only when About is shown: the window starts without it

    try:
        return metadata.version("parley-studio")
    except metadata.PackageNotFoundError:
        return "development copy"


def _plain(text: str) -> str:
    """A menu text as a person reads it: no & mnemonics, no trailing ellipsis."""
    return text.replace("&&", "\0").replace("&", "").replace("\0", "&").rstrip("\u2026").rstrip(".")


def shortcut_rows(window: QMainWindow) -> list[tuple[str, str, str]]:
    """(menu, action, keys) for every action of ``window`` that has a shortcut: those in the menu
    bar under their menu's name, in menu order, then any others (the canvas's own) under "Canvas"."""
    rows: list[tuple[str, str, str]] = []
    seen: set[int] = set()

    def walk(menu: QMenu, title: str) -> None:
        # a menu's own entries first, then its submenus': each menu's rows under one heading
        submenus = []
        for action in menu.actions():
            if action.menu() is not None:
                submenus.append(action.menu())
            elif action.shortcuts() and id(action) not in seen:
                seen.add(id(action))
                rows.append((title, _plain(action.text()), keys_text(action)))
        for submenu in submenus:
            walk(submenu, f"{title} \u25b8 {_plain(submenu.title())}")

    for top in window.menuBar().actions():
        if top.menu() is not None:
            walk(top.menu(), _plain(top.menu().title()))
    # The window's own (its children, and any it was given by another object), then the canvas's
    others = {id(a): a for a in [*window.actions(), *window.findChildren(QAction)]}
    canvas = getattr(window, "canvas", None)
    if canvas is not None:
        others.update({id(a): a for a in canvas.viewer.actions()})
    for action in others.values():
        if action.shortcuts() and id(action) not in seen and action.text():
            seen.add(id(action))
            rows.append(("Canvas", _plain(action.text()), keys_text(action)))
    return [row for row in rows if row[2]]


def keys_text(action: QAction) -> str:
    """The keys a person can press for ``action``, as the platform writes them: the platform's standard
    bindings also hold media and office keys (Open, Save, Copy, Back), which few keyboards have, and
    which would read as words, not keys."""
    return ", ".join(s.toString(QKeySequence.SequenceFormat.NativeText) for s in action.shortcuts()
                     if _on_a_keyboard(s))


def _on_a_keyboard(sequence: QKeySequence) -> bool:
    """Whether every key of ``sequence`` is on an ordinary keyboard (letters, digits, F-keys, the arrows
    and the like): Qt numbers media and special keys from Key_Back up."""
    return all(sequence[i].key().value < Qt.Key.Key_Back.value for i in range(sequence.count()))


class ShortcutsDialog(QDialog):
    """Help > Keyboard Shortcuts: every shortcut of the window, by menu."""

    def __init__(self, window: QMainWindow) -> None:
        super().__init__(window)
        self.setWindowTitle("Keyboard Shortcuts")
        self.setObjectName("shortcuts")
        layout = QVBoxLayout(self)
        self.filter = QLineEdit(self)
        self.filter.setPlaceholderText("Filter: an action, a menu or a key")
        self.filter.setClearButtonEnabled(True)
        self.filter.textChanged.connect(self.show_matching)
        layout.addWidget(self.filter)
        self.tree = QTreeWidget(self)
        self.tree.setHeaderLabels(["Action", "Keys"])
        self.tree.setRootIsDecorated(False)
        self.tree.header().setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        last_menu = None
        for menu, action, keys in shortcut_rows(window):
            if menu != last_menu:
                heading = QTreeWidgetItem(self.tree, [menu])
                heading.setFirstColumnSpanned(True)
                font = heading.font(0)
                font.setBold(True)
                heading.setFont(0, font)
                heading.setFlags(Qt.ItemFlag.ItemIsEnabled)
                last_menu = menu
            QTreeWidgetItem(self.tree, [f"    {action}", keys])
        layout.addWidget(self.tree)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.resize(460, 560)
        self.filter.setFocus()

    def show_matching(self, text: str) -> None:
        """Only the rows whose action, menu or keys hold ``text`` (any case), under their menus' headings."""
        words = text.casefold().split()
        heading = None
        shown_under = False
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            if not item.text(1):  # a menu's heading: shown when a row under it is
                if heading is not None:
                    heading.setHidden(not shown_under)
                heading, shown_under = item, False
                continue
            haystack = " ".join([heading.text(0) if heading else "", item.text(0), item.text(1)]).casefold()
            match = all(w in haystack for w in words)
            item.setHidden(not match)
            shown_under = shown_under or match
        if heading is not None:
            heading.setHidden(not shown_under)

    def listed(self) -> dict[str, str]:
        """What the dialog lists: action -> keys."""
        items = [self.tree.topLevelItem(i) for i in range(self.tree.topLevelItemCount())]
        return {item.text(0).strip(): item.text(1) for item in items if item.text(1)}


def fill_help_menu(menu: QMenu, window: QMainWindow) -> dict[str, QAction]:
    """Keyboard Shortcuts, the window's Start Page (if it has one), Documentation (one entry per docs/
    page) and About; returns the actions."""
    shortcuts = menu.addAction("&Keyboard Shortcuts\u2026")
    shortcuts.setShortcut(QKeySequence("Ctrl+/"))
    shortcuts.setStatusTip("Every keyboard shortcut of the editor (Ctrl+/)")
    shortcuts.triggered.connect(lambda _c=False: show_shortcuts(window))
    start_page = getattr(window, "start_page_action", None)
    if isinstance(start_page, QAction):
        menu.addAction(start_page)
    docs = menu.addMenu("&Documentation")
    pages = doc_files()
    for title, path in pages:
        page = docs.addAction(title)
        page.setStatusTip(str(path))
        page.setData(str(path))
        page.triggered.connect(lambda _c=False, p=path: QDesktopServices.openUrl(QUrl.fromLocalFile(str(p))))
    if not pages:
        missing = docs.addAction("(no docs/ folder beside this copy of the editor)")
        missing.setEnabled(False)
    menu.addSeparator()
    about = menu.addAction("&About Parley Studio")
    about.triggered.connect(lambda _c=False: show_about(window))
    return {"shortcuts": shortcuts, "about": about}


def show_shortcuts(window: QMainWindow) -> ShortcutsDialog:
    dialog = ShortcutsDialog(window)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.open()  # not exec(): the window stays live behind it
    return dialog


def show_about(parent: QWidget) -> QMessageBox:
    box = QMessageBox(QMessageBox.Icon.NoIcon, "About Parley Studio", "", QMessageBox.StandardButton.Ok, parent)
    box.setObjectName("about")
    box.setTextFormat(Qt.TextFormat.RichText)
    box.setText(f"<b>Parley Studio</b> {version()}<br/>The editor for Parley agents: node graphs of prompts "
                "that run on local models (llama.cpp) or on a server.")
    box.setInformativeText("Help \u25b8 Documentation has the guides; Help \u25b8 Keyboard Shortcuts lists every key.")
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.open()
    return box
