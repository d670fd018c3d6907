"""An editor description module that exits the program when imported (a broken plugin's view)."""

raise SystemExit(3)
