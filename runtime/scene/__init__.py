"""Scenes: several NPCs in one conversation (``model``: the scene file; ``director``: who speaks next;
``scene``: the scene running, each NPC with its own view of it)."""
