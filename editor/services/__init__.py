"""The window's services: the backend choice, settings, the sample model's download, test and variant runs, crash recovery. They import no dock and no window."""
