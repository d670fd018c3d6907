"""Repro bundles: one file that replays a conversation, byte for byte, on another machine."""
