"""The conversation the docks show: one ``SessionView`` (``view``), fed by the window's own conversation
on a worker thread (``local``) or by a session followed on ``parley serve`` (``follow``). The docks see
only the view and its ``ConversationActions``; an import-linter contract keeps them off both sources."""
