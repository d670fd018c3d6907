"""Running work off the UI thread: ``ThreadJob`` (one job) and ``ThreadService`` (a long-lived worker)."""
