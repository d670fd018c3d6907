"""The editor's dialogs (attach to a server, backends, doctor, expectations, cache snapshot budget)."""
