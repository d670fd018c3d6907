"""``parley serve``: the runtime as a local HTTP server, so a game runs the agents made in the editor.

- ``protocol``: the versioned API's requests, answers, events and typed errors (its OpenAPI schema is
  generated into ``resources/schemas/serve-openapi.json``).
- ``npcs``: the sessions (one ``Agent`` per NPC, all on one backend) and the turns they run on worker
  threads, streamed back as events.
- ``app``: the ASGI app (FastAPI on Starlette): routes, the token check, the request limits.
- ``server``: running it on uvicorn (``parley serve``, and in-process for tests).
- ``crash_reports``: the state folder a server's crash report goes to, and the crashes of earlier
  servers told as the next one starts (its log and ``GET /v1/health``).
- ``running``: the servers running on this computer, each announced by a file while it serves (its
  address, so one started with ``--port 0`` is found by the editor's Attach dialog).
- ``client``: a small typed Python client on httpx.
"""
