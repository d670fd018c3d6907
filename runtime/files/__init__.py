"""Files a user gives or gets: reading regular files within limits (``reading``), writing them
atomically (``writing``), and one translator from pydantic's errors to located problems
(``located``)."""
